"""The local artifact store: content addressing, and durability (what is fsynced before put and delete
return, so that a committed version never names a blob a power cut lost, and an erased blob stays gone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.storage import artifacts as artifacts_module
from service.storage.artifacts import BlobNotFound, LocalArtifactStore, digest_of

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fsync of directories is POSIX")


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths fsynced through the store, in order (a file is seen under the name it had then)."""
    seen: list[Path] = []
    real = os.fsync

    def recording(fd: int) -> None:
        seen.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(artifacts_module.os, "fsync", recording)
    return seen


def test_put_is_content_addressed_and_round_trips(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"weights")
    assert digest == digest_of(b"weights")
    assert store.put(b"weights") == digest  # the same bytes are stored once
    assert store.get(digest) == b"weights"
    assert list(store.digests()) == [digest]
    store.delete(digest)
    with pytest.raises(BlobNotFound):
        store.get(digest)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads fd paths from /proc")
def test_durable_put_syncs_the_bytes_before_the_rename_then_the_directories(
    tmp_path: Path, synced: list[Path]
) -> None:
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"a blob")
    folder = tmp_path / digest[:2]
    assert synced[0] == tmp_path  # the new prefix directory's entry in the root
    assert synced[1].parent == folder and synced[1].name.startswith(".tmp-")  # bytes, before the rename
    assert synced[2] == folder  # the rename
    assert len(synced) == 3

    synced.clear()
    other = store.put(b"another blob with " + bytes(digest[:2], "ascii"))
    assert (tmp_path / other[:2]).exists()
    assert synced[-1] == tmp_path / other[:2]

    synced.clear()
    store.put(b"a blob")  # already there: nothing to write, nothing to sync
    assert synced == []


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads fd paths from /proc")
def test_durable_delete_syncs_the_unlink_and_a_missing_blob_is_a_no_op(
    tmp_path: Path, synced: list[Path]
) -> None:
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"erase me")
    synced.clear()
    store.delete(digest)
    assert synced == [tmp_path / digest[:2]]
    assert not (tmp_path / digest[:2] / digest).exists()
    synced.clear()
    store.delete(digest)
    assert synced == []


def test_a_throwaway_store_never_syncs(tmp_path: Path, synced: list[Path]) -> None:
    store = LocalArtifactStore(tmp_path, durable=False)
    digest = store.put(b"scratch")
    store.delete(digest)
    assert synced == []
