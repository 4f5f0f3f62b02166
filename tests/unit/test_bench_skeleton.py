"""The pure helpers of ``bench.skeleton``: its fused statements, its audit chain, its manifests."""

from __future__ import annotations

from datetime import datetime

import orjson
import pytest

from bench.skeleton import MODEL_ID, VARIANTS, chain_events, drop_from_manifest, fused, parse_variants
from service.audit.chain import event_hash


def test_fused_statement_names_each_part_once() -> None:
    sql = fused(["DELETE FROM a", "UPDATE b SET x = 1"], "SELECT 2")
    assert sql == "WITH p0 AS (DELETE FROM a),\np1 AS (UPDATE b SET x = 1)\nSELECT 2"


def test_chain_events_link_each_event_to_the_one_before() -> None:
    """Hashed as the service hashes its audit events, each from the hash before it."""
    head = "1" * 64
    events = [
        {"type": "a", "request_id": 1, "payload": {}},
        {"type": "b", "request_id": 2, "version_id": 7, "payload": {"x": 1}},
    ]
    seqs, bodies, hashes = chain_events("c", 41, head, events)
    assert seqs == [42, 43]
    decoded = [orjson.loads(b) for b in bodies]
    assert [{k: v for k, v in d.items() if k != "at"} for d in decoded] == events
    at = datetime.fromisoformat(decoded[0]["at"])
    fields = {"chain": "c", "at": at, "model_id": MODEL_ID}
    first = event_hash(
        head, chain_seq=42, event_type="a", request_id=1, version_id=None, payload={}, **fields
    )
    second = event_hash(
        first, chain_seq=43, event_type="b", request_id=2, version_id=7, payload={"x": 1}, **fields
    )
    assert hashes == [first, second]


def test_dropping_owners_from_a_manifest_returns_their_blobs() -> None:
    manifest = {"ann": ["a1", "a2"], "bob": ["b1", "b2"], "cy": ["c1", "c2"]}
    rest, garbage = drop_from_manifest(orjson.dumps(manifest).decode(), ["ann", "cy", "nobody"])
    assert orjson.loads(rest) == {"bob": ["b1", "b2"]}
    assert garbage == ["a1", "a2", "c1", "c2"]


def test_variants_are_named_from_the_known_ones() -> None:
    assert parse_variants("") == frozenset()
    assert parse_variants("split,manifest,") == {"split", "manifest"}
    with pytest.raises(ValueError, match=r"unknown skeleton variants \['orm'\]; known: \['fastapi'"):
        parse_variants("split,orm")


def test_the_ladder_starts_and_ends_bare_and_rates_against_both_bare_runs() -> None:
    from bench.skeleton.__main__ import ladder_configs, with_ratios

    configs = ladder_configs()
    assert configs[0] == configs[-1] == frozenset()
    assert len(configs) == 2 + 4 + 6 + 1 and configs[-2] == frozenset(VARIANTS)
    runs = [
        {"variants": [], "p50_ms": 8.0, "cpu_ms_per_request": 7.0},
        {"variants": ["split"], "p50_ms": 18.0, "cpu_ms_per_request": 12.0},
        {"variants": [], "p50_ms": 10.0, "cpu_ms_per_request": 9.0},
    ]
    rated = with_ratios(runs)
    assert [r["p50_ratio"] for r in rated] == [0.889, 2.0, 1.111]
    assert [r["cpu_ratio"] for r in rated] == [0.875, 1.5, 1.125]
