"""Keyed hashes of data subjects: the only form in which a subject outlives its erasure.

HMAC-SHA256 with a server-side key (``LETHE_SUBJECT_HASH_KEY``), so a hash cannot be reversed by
hashing guessed ids without the key, and the same subject always hashes the same way (the audit log
can be queried by subject). The kind ("sample" or "owner") is part of the message, so a sample and an
owner that share an id string get different hashes.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Iterator, MutableSet


class SubjectHasher:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, kind: str, value: str) -> str:
        return hmac.new(self._key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()

    def sample(self, sample_id: str) -> str:
        return self._mac("sample", sample_id)

    def owner(self, owner_id: str) -> str:
        return self._mac("owner", owner_id)

    def fingerprint(self, data: bytes) -> str:
        """Keyed digest of a request body (idempotency): the body may name subjects."""
        return hmac.new(self._key, b"body\x00" + data, hashlib.sha256).hexdigest()


class HashedIdSet(MutableSet[str]):
    """The sample ids forgotten in the current budget epoch, held only as keyed hashes.

    ``MethodState.deleted_ids`` is a set of sample ids; after an erasure the service no longer has
    the plaintext ids, but membership (``sid in deleted_ids``), ``add`` and ``len`` still work exactly.
    Iterating yields hashes, never ids.
    """

    def __init__(
        self,
        hasher: SubjectHasher,
        hashes: Iterable[str] = (),
        load: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``load``, when given, supplies the hashes on first use instead (a method that never looks at
        ``deleted_ids``, like the Hessian-free one, never pays for reading them)."""
        self._hasher = hasher
        self._loaded: set[str] | None = None if load is not None else set(hashes)
        self._load = load

    @property
    def _hashes(self) -> set[str]:
        if self._loaded is None:
            assert self._load is not None
            self._loaded = set(self._load())
        return self._loaded

    @classmethod
    def _from_iterable(cls, it: Iterable[str]) -> set[str]:  # type: ignore[override]
        return set(it)

    def __contains__(self, sample_id: object) -> bool:
        return isinstance(sample_id, str) and self._hasher.sample(sample_id) in self._hashes

    def __iter__(self) -> Iterator[str]:
        return iter(self._hashes)

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, sample_id: str) -> None:
        self._hashes.add(self._hasher.sample(sample_id))

    def discard(self, sample_id: str) -> None:
        self._hashes.discard(self._hasher.sample(sample_id))
