"""Keyed hashes of data subjects (``HMAC-SHA256(key, kind || 0x00 || id)``), and :class:`Redactor`."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSet
from typing import Any


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
    """Sample ids held only as keyed hashes (``MethodState.deleted_ids``); iterating yields hashes."""

    def __init__(
        self,
        hasher: SubjectHasher,
        hashes: Iterable[str] = (),
        load: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``load``, if given, supplies the hashes lazily on first use instead of ``hashes``."""
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


ID_FIELDS = ("owner_ids", "sample_ids", "node_feature_ids", "graph_ids")  # a deletion body's id lists
PAIR_FIELDS = ("edges", "graph_nodes")  # a deletion body's lists of id pairs
HASH_SHOWN = 16  # hex digits of a keyed hash shown where a text names a subject (``h:`` + a prefix)


def request_positions(body: Mapping[str, Any]) -> dict[str, str]:
    """Every id a deletion request body names -> where it first appears (``items[2].edges[0][1]``)."""
    out: dict[str, str] = {}
    items = body.get("items")
    for k, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, Mapping):
            for value, where in request_positions(item).items():
                out.setdefault(value, f"items[{k}].{where}")
    for field in ID_FIELDS:
        for i, value in enumerate(_listed(body, field)):
            if isinstance(value, str):
                out.setdefault(value, f"{field}[{i}]")
    for field in PAIR_FIELDS:
        for i, pair in enumerate(_listed(body, field)):
            for j, value in enumerate(pair if isinstance(pair, list | tuple) else []):
                if isinstance(value, str):
                    out.setdefault(value, f"{field}[{i}][{j}]")
    return out


def _listed(body: Mapping[str, Any], field: str) -> list[Any]:
    value = body.get(field)
    return value if isinstance(value, list) else []


def hashed_names(hasher: SubjectHasher, owners: Iterable[str], samples: Iterable[str]) -> dict[str, str]:
    """Each id -> ``h:`` + :data:`HASH_SHOWN` hex digits of its keyed hash (owner hash first)."""
    out = {s: f"h:{hasher.sample(s)[:HASH_SHOWN]}" for s in samples}
    return out | {o: f"h:{hasher.owner(o)[:HASH_SHOWN]}" for o in owners}


class Redactor:
    """Rewrites text kept at rest: each ``repr``-quoted id becomes its name in ``names`` (or ``names()``)."""

    def __init__(self, names: Mapping[str, str] | Callable[[], Mapping[str, str]]) -> None:
        self._names = names
        self._quoted: dict[str, str] | None = None
        self._pattern: re.Pattern[str] | None = None

    def text(self, value: str) -> str:
        """``value`` with every quoted id replaced by its name."""
        if "'" not in value and '"' not in value:
            return value  # no quote, no quoted id (the common case: nothing is computed)
        if self._quoted is None:
            names = self._names() if callable(self._names) else self._names
            self._quoted = {repr(sid): name for sid, name in names.items()}
            if self._quoted:
                needles = sorted(self._quoted, key=len, reverse=True)  # the longest quote first
                self._pattern = re.compile("|".join(re.escape(n) for n in needles))
        if self._pattern is None:
            return value
        quoted = self._quoted
        return self._pattern.sub(lambda m: quoted[m.group()], value)

    def json(self, value: Any) -> Any:
        """A copy of a JSON value whose strings went through :meth:`text` (keys are left as they are)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value
