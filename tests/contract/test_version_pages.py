"""Version lineage read a page at a time: each version on a later page still names its parent."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.runtime import Runtime
from tests.contract.conftest import forget_owner


def test_pages_of_versions_name_each_parent(fresh: tuple[TestClient, Runtime]) -> None:
    client, _ = fresh
    for owner in ("owner-00001", "owner-00002", "owner-00003"):
        forget_owner(client, owner)
    whole = client.get("/v1/models/1/versions").json()["versions"]
    assert [(v["seq"], v["parent_seq"]) for v in whole] == [(1, None), (2, 1), (3, 2), (4, 3)]
    assert client.get("/v1/models/1/versions").json()["next_after_seq"] is None  # all on one page
    pages = []
    after: int | None = 0
    while after is not None:  # follow the cursor until it is null
        listing = client.get("/v1/models/1/versions", params={"after_seq": after, "limit": 2}).json()
        pages += listing["versions"]
        after = listing["next_after_seq"]
    assert pages == whole
    assert client.get("/v1/models/1/versions", params={"after_seq": 2}).json()["versions"] == whole[2:]
