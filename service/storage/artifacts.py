"""Content-addressed, immutable blob store (a directory by default).

A blob's name is the sha256 of its bytes, so writing the same content twice stores it once, and a
blob can be checked against its name. The interface is small on purpose: an object store (S3, GCS)
can implement the same five methods.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class BlobNotFound(KeyError):
    """The artifact store has no blob with this digest."""


class ArtifactStore(Protocol):
    def put(self, data: bytes) -> str: ...

    def get(self, digest: str) -> bytes: ...

    def exists(self, digest: str) -> bool: ...

    def delete(self, digest: str) -> None: ...

    def digests(self) -> Iterator[str]: ...


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LocalArtifactStore:
    """Blobs under ``root/ab/<digest>``; writes go to a temporary file and are renamed into place.

    The rename is atomic, so a reader never sees a partial blob and a crash mid-write leaves at most a
    temporary file behind. (A deletion update writes many small blobs: directories made once are
    remembered, since even a failing mkdir costs a system call.)

    ``durable`` (the default): :meth:`put` returns only once the blob's bytes and its directory entry
    are on disk (fsync of the file before the rename, then of the directory), and :meth:`delete` once
    the unlink is. Postgres commits a version only after its blobs were put, and fsyncs that commit; without
    these fsyncs a power cut could leave a committed version naming blobs that never reached the disk,
    or bring back a blob an erasure had already unlinked. About 0.4 ms a blob on this machine's disk.
    """

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.durable = durable and os.name == "posix"  # a directory fsync needs POSIX semantics
        self._dirs: set[str] = set()

    def _path(self, digest: str) -> Path:
        if not _DIGEST.match(digest):
            raise BlobNotFound(f"{digest!r} is not a sha256 digest")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = digest_of(data)
        path = self._path(digest)
        if path.exists():
            return digest
        if digest[:2] not in self._dirs:
            path.parent.mkdir(exist_ok=True)
            self._sync_dir(self.root)  # the new prefix directory's own entry
            self._dirs.add(digest[:2])
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
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
        path = self._path(digest)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._sync_dir(path.parent)

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
            if _DIGEST.match(path.name):
                yield path.name

    def writable(self) -> bool:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".probe-")
            os.close(fd)
            os.unlink(tmp)
            return True
        except OSError:
            return False
