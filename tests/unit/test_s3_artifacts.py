"""The S3 artifact store (service.storage.s3) against an S3-compatible server: the local store's
semantics (content addressing, the sweep and its scope, a blob put again while being swept), on a bucket."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from service.settings import Settings
from service.storage.artifacts import BlobNotFound, digest_of
from service.storage.s3 import S3ArtifactStore, parse_s3_url, s3_client
from tests.s3_server import S3Server
from tests.unit.test_artifacts import scoped


@pytest.fixture
def store(s3: S3Server) -> S3ArtifactStore:
    return S3ArtifactStore(s3_client(s3.endpoint_url), s3.bucket(), "lethe/blobs/")


def test_urls_name_a_bucket_and_a_prefix() -> None:
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    assert parse_s3_url("s3://bucket/a/b/") == ("bucket", "a/b/")
    for bad in ("/var/artifacts", "http://bucket/x", "s3:///x", "s3://bucket/x?versionId=1"):
        with pytest.raises(ValueError, match="write s3://<bucket>"):
            parse_s3_url(bad)
    with pytest.raises(ValueError, match="not both"):
        Settings(artifact_url="s3://b/p", artifact_dir="/tmp/x")


def test_put_is_content_addressed_and_round_trips(store: S3ArtifactStore) -> None:
    digest = store.put(b"weights")
    assert digest == digest_of(b"weights") and store.put(b"weights") == digest
    assert store.get(digest) == b"weights" and store.exists(digest)
    keys = [o["Key"] for o in store.client.list_objects_v2(Bucket=store.bucket)["Contents"]]
    assert keys == [f"lethe/blobs/{digest}"]  # one object, under the prefix
    assert list(store.digests()) == [digest]
    store.delete(digest)
    store.delete(digest)  # absent: no error
    assert not store.exists(digest)
    with pytest.raises(BlobNotFound):
        store.get(digest)
    with pytest.raises(BlobNotFound):
        store.get("not-a-digest")


def test_only_blobs_under_the_prefix_are_listed(store: S3ArtifactStore) -> None:
    digest = store.put(b"mine")
    store.client.put_object(Bucket=store.bucket, Key="elsewhere/" + digest_of(b"x"), Body=b"x")
    store.client.put_object(Bucket=store.bucket, Key="lethe/blobs/notes.txt", Body=b"a stray")
    assert list(store.digests()) == [digest]
    assert store.writable()
    assert list(store.digests()) == [digest]  # the probe object is gone


def test_sweep_removes_unreferenced_blobs_inside_the_scope_and_spares_young_ones(
    store: S3ArtifactStore,
) -> None:
    orphan, held = store.put(b"orphan"), store.put(b"held")
    assert store.sweep(3600, scoped(lambda digests: set())) == []  # both younger than the grace
    seen: list[tuple[str, bool]] = []

    @contextmanager
    def referenced(digests: list[str]) -> Iterator[set[str]]:
        assert sorted(digests) == sorted([orphan, held])
        seen.append(("open", store.exists(orphan)))
        yield {held}
        seen.append(("closing", store.exists(orphan)))

    assert store.sweep(-1, referenced) == [orphan]  # a grace in the past: every blob is old enough
    assert seen == [("open", True), ("closing", False)]  # removed while no reference could commit
    assert list(store.digests()) == [held]


def test_a_blob_put_again_while_being_swept_stays(store: S3ArtifactStore) -> None:
    digest = store.put(b"weights a retry writes again")
    time.sleep(1.1)  # S3 keeps LastModified to the second

    def referenced(digests: list[str]) -> set[str]:
        assert store.put(b"weights a retry writes again") == digest  # a writer's put, before its commit
        return set()

    assert store.sweep(-1, scoped(referenced)) == []
    assert store.get(digest) == b"weights a retry writes again"


def test_a_store_that_cannot_be_written_is_not_ready(s3: S3Server) -> None:
    missing = S3ArtifactStore(s3_client(s3.endpoint_url), "no-such-bucket-here", "")
    assert not missing.writable()
