"""The artifact store on S3: objects ``<prefix><sha256>``, as :class:`LocalArtifactStore` does files."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from service.storage.artifacts import DIGEST_RE, BlobNotFound, Referenced, digest_of, remove_unreferenced


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, ``some/prefix/``); ValueError saying what to write."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
        raise ValueError(f"LETHE_ARTIFACT_URL {url!r} is not an S3 location; write s3://<bucket>[/<prefix>]")
    prefix = parsed.path.strip("/")
    return parsed.netloc, f"{prefix}/" if prefix else ""


def s3_client(endpoint_url: str | None, pool_size: int = 64) -> Any:
    """A thread-safe boto3 S3 client with ``pool_size`` connections and standard retries."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError("LETHE_ARTIFACT_URL names S3, which needs boto3: pip install 'lethe[s3]'") from exc
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(max_pool_connections=pool_size, retries={"max_attempts": 5, "mode": "standard"}),
    )


class S3ArtifactStore:
    """Blobs as objects ``<prefix><digest>`` of one bucket (see the module docstring)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def _key(self, digest: str) -> str:
        if not DIGEST_RE.match(digest):
            raise BlobNotFound(f"{digest!r} is not a sha256 digest")
        return self.prefix + digest

    def put(self, data: bytes) -> str:
        digest = digest_of(data)
        checksum = base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")
        self.client.put_object(Bucket=self.bucket, Key=self._key(digest), Body=data, ChecksumSHA256=checksum)
        return digest

    def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        return [self.put(data) for data in blobs]  # each PUT is durable when it returns

    def get(self, digest: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(digest))
        except self.client.exceptions.NoSuchKey:
            raise BlobNotFound(digest) from None
        return bytes(response["Body"].read())

    def exists(self, digest: str) -> bool:
        return self._modified(self._key(digest)) is not None

    def delete(self, digest: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(digest))  # absent: a no-op in S3

    def delete_many(self, digests: Collection[str]) -> None:
        for digest in digests:
            self.delete(digest)

    def digests(self) -> Iterator[str]:
        for key, _ in self._listing():
            yield key[len(self.prefix) :]

    def sweep(self, older_than_seconds: float, referenced: Referenced) -> list[str]:
        """Delete unreferenced blobs not put for ``older_than_seconds``; returns their digests."""
        cutoff = time.time() - older_than_seconds
        candidates = {
            key[len(self.prefix) :]: when for key, when in self._listing() if when.timestamp() < cutoff
        }
        return remove_unreferenced(
            candidates, referenced, lambda digest: self._remove_if_untouched(digest, candidates[digest])
        )

    def _remove_if_untouched(self, digest: str, listed: datetime) -> bool:
        """Delete the blob unless it was put again since the listing (a writer wants it) or is gone."""
        if self._modified(self._key(digest)) != listed:
            return False
        self.delete(digest)
        return True

    def writable(self) -> bool:
        """Whether an object can be written and deleted under the prefix (the readiness probe)."""
        key = f"{self.prefix}.probe-{secrets.token_hex(8)}"
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=b"")
            self.client.delete_object(Bucket=self.bucket, Key=key)
            return True
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False

    def _listing(self) -> Iterator[tuple[str, datetime]]:
        """(key, LastModified) of every blob under the prefix (probe objects and strays skipped)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            for item in page.get("Contents", []):
                if DIGEST_RE.match(item["Key"][len(self.prefix) :]):
                    yield item["Key"], item["LastModified"]

    def _modified(self, key: str) -> datetime | None:
        try:
            modified: datetime = self.client.head_object(Bucket=self.bucket, Key=key)["LastModified"]
            return modified
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
