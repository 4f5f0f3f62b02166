"""KnownManifests keeps the manifests of the models updated last, a bounded number of them."""

from __future__ import annotations

from service.jobs.state import KnownManifests


def test_the_model_updated_longest_ago_is_forgotten_beyond_capacity() -> None:
    manifests = KnownManifests(capacity=2)
    manifests.note(1, "100", {"training": {}})
    manifests.note(2, "200", {"training": {}})
    manifests.note(1, "101", {"training": {"a": 1}})  # model 1 updated again: now the newest
    manifests.note(3, "300", {"training": None})
    assert manifests.known(2) is None
    known = manifests.known(1)
    assert known is not None and known.xmin == "101" and known.values() == {"training": {"a": 1}}
    assert manifests.known(3) is not None
