"""The artifact store on S3 or an S3-compatible object store (MinIO, Ceph, Cloudflare R2, ...).

With more than one host (API and workers on different machines) a local directory is not shared;
``LETHE_ARTIFACT_URL=s3://bucket/prefix`` puts every blob in one bucket instead, as the object
``<prefix><sha256>``. Credentials and region come from boto3's usual chain (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, an instance or pod role); ``LETHE_S3_ENDPOINT_URL`` points
at a store other than AWS.

The semantics are the local store's (:class:`service.storage.artifacts.LocalArtifactStore`):
- a put returns once the object is stored (S3 acknowledges a PUT only when it is durable), and sends
  the bytes' SHA-256 so that the store refuses a body damaged on the way (``ChecksumSHA256``);
- a put of a blob already stored writes it again, which refreshes its ``LastModified``: that is how the
  orphan sweep knows a writer is about to reference it (the local store touches the file's mtime);
- the sweep deletes, inside the ``referenced`` scope (no reference can commit meanwhile), the blobs no
  row holds whose ``LastModified`` is older than the grace and unchanged since the listing. S3 keeps
  ``LastModified`` to the second, so a put in the same second as the listing can go unnoticed; the
  writer's commit then finds the blob gone and writes it again (service.db.uow), as it does for a blob
  collected as garbage. Nothing is lost either way; the check only spares that rewrite.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
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
    """A boto3 S3 client (thread-safe; one per process), with a connection pool as large as the API's
    thread pool and the standard retry mode for throttling and transient errors."""
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

    def digests(self) -> Iterator[str]:
        for key, _ in self._listing():
            yield key[len(self.prefix) :]

    def sweep(self, older_than_seconds: float, referenced: Referenced) -> list[str]:
        """Delete the blobs ``referenced`` does not name that nobody put for ``older_than_seconds``;
        returns their digests. Each batch is checked and deleted inside one ``referenced`` scope."""
        cutoff = time.time() - older_than_seconds
        candidates = {
            key[len(self.prefix) :]: modified
            for key, modified in self._listing()
            if modified.timestamp() < cutoff
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
