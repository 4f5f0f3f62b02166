"""The local artifact store: content addressing, and durability (what is fsynced before put and delete
return, so that a committed version never names a blob a power cut lost, and an erased blob stays gone)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from service.storage import artifacts as artifacts_module
from service.storage.artifacts import BlobNotFound, LocalArtifactStore, Referenced, digest_of

HOUR = 3600.0


def scoped(referenced: Callable[[list[str]], set[str]]) -> Referenced:
    """A plain lookup as the scope the sweep takes (the service's holds a lock for its duration)."""

    @contextmanager
    def scope(digests: list[str]) -> Iterator[set[str]]:
        yield referenced(digests)

    return scope

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fsync of directories is POSIX")
needs_fd_paths = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads fd paths from /proc")


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


@needs_fd_paths
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


@needs_fd_paths
def test_put_many_syncs_every_new_file_before_any_rename_then_each_directory_once(
    tmp_path: Path, synced: list[Path]
) -> None:
    store = LocalArtifactStore(tmp_path)
    kept = store.put(b"already there")
    synced.clear()
    blobs = [b"one", b"two", b"already there", b"one", b"three"]
    digests = store.put_many(blobs)
    assert digests == [digest_of(b) for b in blobs]  # in order, duplicates included
    assert [store.get(d) for d in digests] == blobs
    files = [p for p in synced if p.name.startswith(".tmp-")]
    folders = [p for p in synced if not p.name.startswith(".tmp-")]
    assert len(files) == 3  # the three new blobs, once each; the stored one only refreshed
    new = {digest_of(b) for b in (b"one", b"two", b"three")}
    assert set(folders) >= {tmp_path / d[:2] for d in new} and kept not in {p.name for p in files}
    last_file = max(i for i, p in enumerate(synced) if p in files)
    first_rename_sync = min(i for i, p in enumerate(synced) if p in {tmp_path / d[:2] for d in new})
    assert last_file < first_rename_sync  # every file's bytes were durable before the renames were synced
    assert not list(tmp_path.glob("*/.tmp-*"))


def test_put_many_that_fails_midway_leaves_no_blob_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while making one of three blobs durable: nothing of the batch is stored (no blob was
    renamed into place before all were durable), no temporary file stays behind, the error reaches the
    caller, and the store works on afterwards."""
    store = LocalArtifactStore(tmp_path)
    real, calls = os.fsync, itertools.count()

    def failing(fd: int) -> None:
        if next(calls) == 1:
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(artifacts_module.os, "fsync", failing)
    with pytest.raises(OSError, match="No space left"):
        store.put_many([b"first", b"second", b"third"])
    monkeypatch.undo()
    assert list(store.digests()) == []
    assert not list(tmp_path.glob("*/.tmp-*"))
    assert store.put_many([b"first"]) == [digest_of(b"first")]


def test_delete_many_removes_every_blob_and_ignores_missing_ones(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    kept, *gone = store.put_many([b"kept", b"a", b"b", b"c"])
    store.delete_many([*gone, digest_of(b"never stored")])
    assert list(store.digests()) == [kept]


def test_delete_is_not_synced_and_a_missing_blob_is_a_no_op(tmp_path: Path, synced: list[Path]) -> None:
    """An unlink a power cut undoes comes back as an orphan, which the sweep removes (below)."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"erase me")
    synced.clear()
    store.delete(digest)
    store.delete(digest)
    assert synced == []
    assert not store.exists(digest)


def test_a_throwaway_store_never_syncs(tmp_path: Path, synced: list[Path]) -> None:
    store = LocalArtifactStore(tmp_path, durable=False)
    digest = store.put(b"scratch")
    store.delete(digest)
    assert synced == []


def age(store: LocalArtifactStore, digest: str, seconds: float) -> None:
    """Pretend the blob was last written ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(store.root / digest[:2] / digest, (then, then))


def test_sweep_removes_old_unreferenced_blobs_only(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, durable=False)
    old_orphan, old_held, young_orphan = (store.put(b) for b in (b"orphan", b"held", b"just written"))
    age(store, old_orphan, 2 * HOUR)
    age(store, old_held, 2 * HOUR)
    asked: list[list[str]] = []

    def referenced(digests: list[str]) -> set[str]:
        asked.append(digests)
        return {old_held} & set(digests)

    assert store.sweep(HOUR, scoped(referenced)) == [old_orphan]
    assert asked == [sorted([old_orphan, old_held])]  # a young blob is not even looked up
    assert sorted(store.digests()) == sorted([old_held, young_orphan])


def test_sweep_removes_while_the_lookup_scope_is_open(tmp_path: Path) -> None:
    """No reference may commit between the lookup and the removal: the removal happens inside it."""
    store = LocalArtifactStore(tmp_path, durable=False)
    orphan = store.put(b"orphan")
    age(store, orphan, 2 * HOUR)
    seen: list[tuple[str, bool]] = []

    @contextmanager
    def referenced(digests: list[str]) -> Iterator[set[str]]:
        seen.append(("open", store.exists(orphan)))
        yield set()
        seen.append(("closing", store.exists(orphan)))

    assert store.sweep(HOUR, referenced) == [orphan]
    assert seen == [("open", True), ("closing", False)]


def test_a_blob_put_again_while_being_swept_stays(tmp_path: Path) -> None:
    """The writer's put (before its commit names the blob) lands between the listing and the removal."""
    store = LocalArtifactStore(tmp_path, durable=False)
    digest = store.put(b"weights a retry writes again")
    age(store, digest, 2 * HOUR)

    def referenced(digests: list[str]) -> set[str]:
        assert store.put(b"weights a retry writes again") == digest  # not committed yet: unreferenced
        return set()

    assert store.sweep(HOUR, scoped(referenced)) == []
    assert store.get(digest) == b"weights a retry writes again"
    assert [p.name for p in (tmp_path / digest[:2]).iterdir()] == [digest]  # nothing left aside


def test_sweep_clears_dead_writes_and_settles_what_a_crashed_sweep_left_aside(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, durable=False)
    held, dropped = store.put(b"held"), store.put(b"dropped")
    folder = tmp_path / held[:2]
    (folder / held).rename(folder / f".aside-{held}.123.abcd")  # a sweep died after renaming it aside
    (tmp_path / dropped[:2] / dropped).rename(tmp_path / dropped[:2] / f".aside-{dropped}.123.abcd")
    dead_write = folder / ".tmp-x1y2"
    dead_write.write_bytes(b"half a blob")
    then = time.time() - 2 * HOUR
    os.utime(dead_write, (then, then))

    # Everything here is older than no time at all; only `held` is referenced.
    assert store.sweep(0.0, scoped(lambda digests: {held} & set(digests))) == []
    assert store.get(held) == b"held"  # back in place
    assert not store.exists(dropped)
    assert sorted(p.name for p in tmp_path.glob("*/.*")) == []  # no aside or temporary file left
