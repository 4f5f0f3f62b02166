"""``service.heap.settle``: what is alive is frozen out of later collections; garbage is not."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from service import heap


class _Node:
    me: object


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_freezes_live_objects_and_collects_cycles(unfrozen: None) -> None:
    kept = [object()]
    node = _Node()
    node.me = node  # a reference cycle: only the collector frees it
    garbage = weakref.ref(node)
    del node

    frozen = heap.settle()

    # Only that the count is positive: in a test session other threads may settle their runtimes, and a
    # frozen object whose last reference goes is still freed (the count drops).
    assert frozen > 0 and gc.get_freeze_count() > 0
    assert id(kept) not in {id(o) for o in gc.get_objects()}  # permanent generation: collections skip it
    assert garbage() is None  # the unreachable cycle was collected before the freeze, not frozen
