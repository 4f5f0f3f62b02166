"""Content-addressed, immutable blob store (a directory; :mod:`service.storage.s3`): blobs named by sha256."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_TEMP = ".tmp-"  # a write in progress (or one that died)
_ASIDE = ".aside-"  # a blob the orphan sweep is deleting
SWEEP_BATCH = 1000


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
    def get(self, digest: str) -> bytes: ...
    def exists(self, digest: str) -> bool: ...
    def delete(self, digest: str) -> None: ...
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

    def _path(self, digest: str) -> Path:
        if not DIGEST_RE.match(digest):
            raise BlobNotFound(f"{digest!r} is not a sha256 digest")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = digest_of(data)
        path = self._path(digest)
        try:
            os.utime(path)  # already stored: mark it as wanted now (see sweep)
            return digest
        except FileNotFoundError:
            pass
        if digest[:2] not in self._dirs:
            path.parent.mkdir(exist_ok=True)
            self._sync_dir(self.root)  # the new prefix directory's own entry
            self._dirs.add(digest[:2])
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if self.durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._sync_dir(path.parent)
        return digest

    def get(self, digest: str) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(digest) from None

    def exists(self, digest: str) -> bool:
        return self._path(digest).exists()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)

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
