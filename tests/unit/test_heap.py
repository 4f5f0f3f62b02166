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

    assert frozen == gc.get_freeze_count() > 0
    tracked = {id(o) for o in gc.get_objects()}
    assert id(kept) not in tracked  # in the permanent generation: later collections skip it
    assert garbage() is None  # the unreachable cycle was collected before the freeze, not frozen
    later = [object()]
    assert id(later) in {id(o) for o in gc.get_objects()}  # new objects are collected as usual
