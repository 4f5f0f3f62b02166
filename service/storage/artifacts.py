"""Content-addressed, immutable blob store (a directory; :mod:`service.storage.s3`): blobs named by sha256."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_TEMP = ".tmp-"  # a write in progress (or one that died)
_ASIDE = ".aside-"  # a blob the orphan sweep is deleting
SWEEP_BATCH = 1000
_FILE_THREADS = 16  # file operations waiting at once (they hold no CPU while they wait on the journal)
_T = TypeVar("_T")
_R = TypeVar("_R")


class BlobNotFound(KeyError):
    """The artifact store has no blob with this digest."""


class BlobVanished(RuntimeError):
    """Blobs a transaction was about to reference were collected before its commit (nothing committed)."""

    def __init__(self, digests: list[str]) -> None:
        super().__init__(f"{len(digests)} blob(s) were collected before their reference committed")
        self.digests = digests


# referenced(digests): a scope yielding the digests some row holds; no reference to the others commits meanwhile
Referenced = Callable[[list[str]], AbstractContextManager[set[str]]]


class ArtifactStore(Protocol):
    def put(self, data: bytes) -> str: ...
    def put_many(self, blobs: Sequence[bytes]) -> list[str]: ...
    def get(self, digest: str) -> bytes: ...
    def exists(self, digest: str) -> bool: ...
    def delete(self, digest: str) -> None: ...
    def delete_many(self, digests: Collection[str]) -> None: ...
    def digests(self) -> Iterator[str]: ...
    def sweep(self, older_than_seconds: float, referenced: Referenced) -> list[str]: ...
    def writable(self) -> bool: ...


def remove_unreferenced(
    candidates: Iterable[str], referenced: Referenced, remove: Callable[[str], bool]
) -> list[str]:
    """``remove(digest)`` (True: removed) each candidate no row holds, per batch in one ``referenced`` scope."""
    removed: list[str] = []
    names = sorted(candidates)
    for start in range(0, len(names), SWEEP_BATCH):
        batch = names[start : start + SWEEP_BATCH]
        with referenced(batch) as live:
            removed.extend(digest for digest in batch if digest not in live and remove(digest))
    return removed


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LocalArtifactStore:
    """Blobs under ``root/ab/<digest>``, renamed into place; ``put`` again refreshes the mtime (see sweep)."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.durable = durable and os.name == "posix"  # a directory fsync needs POSIX semantics
        self._dirs: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None  # started by the first batch of several files

    def _path(self, digest: str) -> Path:
        if not DIGEST_RE.match(digest):
            raise BlobNotFound(f"{digest!r} is not a sha256 digest")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        return self.put_many([data])[0]

    def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        """Store ``blobs``; their digests, in order. The new blobs are written to temporary files and made
        durable at once (from a pool of threads: file creation and fsync wait on the file system's journal,
        which commits concurrent waits together), then renamed into place, and then the directories that
        gained entries are synced, also at once: a batch waits for about two journal commits instead of two
        per blob (docs/decisions.md, "Durable blob writes, unsynced unlinks")."""
        digests = [digest_of(data) for data in blobs]
        new: dict[str, bytes] = {}
        for digest, data in zip(digests, blobs, strict=True):
            if digest in new:
                continue
            try:
                os.utime(self._path(digest))  # already stored: mark it as wanted now (see sweep)
            except FileNotFoundError:
                new[digest] = data
        if new:
            self._write_durably(new)
        return digests

    def _write_durably(self, new: dict[str, bytes]) -> None:
        for digest in new:
            self._folder(digest)
        written = self._at_once(self._write_temporary, list(new.items()))
        try:
            for digest, tmp in zip(new, written, strict=True):
                os.replace(tmp, self._path(digest))
        except BaseException:
            self._discard(written)
            raise
        if self.durable:
            self._at_once(self._sync_dir, sorted({self.root / digest[:2] for digest in new}))

    def _write_temporary(self, item: tuple[str, bytes]) -> str:
        """``item``'s bytes in a new temporary file in its digest's folder, fsynced when durable."""
        digest, data = item
        fd, tmp = tempfile.mkstemp(dir=self.root / digest[:2], prefix=_TEMP)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if self.durable:
                    fh.flush()
                    os.fsync(fh.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return tmp

    def _folder(self, digest: str) -> None:
        """Create the prefix directory of ``digest`` (its entry made durable) on first use."""
        if digest[:2] not in self._dirs:
            self._path(digest).parent.mkdir(exist_ok=True)
            self._sync_dir(self.root)
            self._dirs.add(digest[:2])

    def _at_once(self, work: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        """``work`` on every item, from the pool when several. Every item is tried; on an error the other
        items' temporary files are removed (:meth:`_discard`) and the first error is raised."""
        if len(items) <= 1:
            return [work(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=_FILE_THREADS, thread_name_prefix="blob-files")
        futures = [self._pool.submit(work, item) for item in items]
        wait(futures)
        errors = [error for error in (f.exception() for f in futures) if error is not None]
        if errors:
            self._discard([f.result() for f in futures if f.exception() is None])
            raise errors[0]
        return [f.result() for f in futures]

    @staticmethod
    def _discard(results: Iterable[Any]) -> None:
        """The temporary files among a failed batch's results (other results need nothing)."""
        for result in results:
            if isinstance(result, str):
                Path(result).unlink(missing_ok=True)

    def get(self, digest: str) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(digest) from None

    def exists(self, digest: str) -> bool:
        return self._path(digest).exists()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)

    def delete_many(self, digests: Collection[str]) -> None:
        """:meth:`delete` each, at once (an unlink waits on the journal too)."""
        self._at_once(self.delete, list(digests))

    def sweep(self, older_than_seconds: float, referenced: Referenced) -> list[str]:
        """Delete and return the unreferenced blobs not put for ``older_than_seconds`` (renamed aside)."""
        cutoff = time.time() - older_than_seconds
        candidates: dict[str, int] = {}
        leftovers: list[Path] = []
        for path in self.root.glob("*/*"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if DIGEST_RE.match(path.name):
                if stat.st_mtime < cutoff:
                    candidates[path.name] = stat.st_mtime_ns
            elif path.name.startswith(_TEMP) and stat.st_mtime < cutoff:
                path.unlink(missing_ok=True)
            elif path.name.startswith(_ASIDE) and stat.st_ctime < cutoff:  # renamed long ago, not in hand
                leftovers.append(path)
        self._settle_leftovers(leftovers, referenced)
        return remove_unreferenced(
            candidates, referenced, lambda digest: self._remove_if_untouched(digest, candidates[digest])
        )

    def _remove_if_untouched(self, digest: str, listed_mtime_ns: int) -> bool:
        path = self._path(digest)
        aside = path.with_name(f"{_ASIDE}{digest}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        if aside.stat().st_mtime_ns != listed_mtime_ns:  # put() refreshed it before the rename:
            os.replace(aside, path)  # a writer wants it
            return False
        aside.unlink()
        return True

    def _settle_leftovers(self, leftovers: list[Path], referenced: Referenced) -> None:
        """Files a crashed sweep renamed aside: back in place when referenced, deleted otherwise."""
        if not leftovers:
            return
        digests = {p: p.name[len(_ASIDE) :].split(".")[0] for p in leftovers}
        valid = sorted({d for d in digests.values() if DIGEST_RE.match(d)})
        with referenced(valid) as live:
            for path, digest in digests.items():
                if digest in live and not self._path(digest).exists():
                    os.replace(path, self._path(digest))
                else:
                    path.unlink(missing_ok=True)

    def _sync_dir(self, folder: Path) -> None:
        """Make the directory's entries (a rename, an unlink) durable."""
        if not self.durable:
            return
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def digests(self) -> Iterator[str]:
        for path in self.root.glob("*/*"):
            if DIGEST_RE.match(path.name):
                yield path.name

    def writable(self) -> bool:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".probe-")
            os.close(fd)
            os.unlink(tmp)
            return True
        except OSError:
            return False
