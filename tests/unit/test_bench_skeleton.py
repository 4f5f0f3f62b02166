"""The pure helpers of ``bench.skeleton``: its fused statements, its audit chain, its manifests."""

from __future__ import annotations

import hashlib

import orjson

from bench.skeleton import chain_events, chain_link, drop_from_manifest, fused


def test_fused_statement_names_each_part_once() -> None:
    sql = fused(["DELETE FROM a", "UPDATE b SET x = 1"], "SELECT 2")
    assert sql == "WITH p0 AS (DELETE FROM a),\np1 AS (UPDATE b SET x = 1)\nSELECT 2"


def test_chain_events_link_each_event_to_the_one_before() -> None:
    head = b"\x01" * 32
    events = [{"kind": "a", "request": 1}, {"request": 2, "kind": "b"}]
    seqs, bodies, hashes = chain_events(41, head, events)
    assert seqs == [42, 43]
    assert [orjson.loads(b) for b in bodies] == events
    first = hashlib.sha256(head + b'{"kind":"a","request":1}').digest()
    assert hashes == [first, chain_link(first, events[1])]
    # Canonical: the same event with its keys in another order links the same way.
    assert chain_link(first, {"kind": "b", "request": 2}) == hashes[1]


def test_dropping_owners_from_a_manifest_returns_their_blobs() -> None:
    manifest = {"ann": ["a1", "a2"], "bob": ["b1", "b2"], "cy": ["c1", "c2"]}
    rest, garbage = drop_from_manifest(orjson.dumps(manifest).decode(), ["ann", "cy", "nobody"])
    assert orjson.loads(rest) == {"bob": ["b1", "b2"]}
    assert garbage == ["a1", "a2", "c1", "c2"]
