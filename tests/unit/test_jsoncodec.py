"""The JSON columns' codec (service.db.jsoncodec) stores what the standard library would have stored."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from service.db import jsoncodec

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # beyond 64 bits: orjson refuses them
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_json_value_reads_back_as_the_standard_library_reads_its_own(value: Any) -> None:
    expected = json.loads(json.dumps(value))
    assert jsoncodec.loads(jsoncodec.dumps_bytes(value)) == expected
    assert jsoncodec.loads(jsoncodec.dumps_text(value)) == expected
    assert json.loads(jsoncodec.dumps_text(value)) == expected  # plain JSON, readable by anyone


def test_non_string_keys_and_tuples_are_written_as_json_dumps_writes_them() -> None:
    value = {1: (2, 3), "a": [True, None]}
    assert jsoncodec.loads(jsoncodec.dumps_text(value)) == json.loads(json.dumps(value))


def test_a_value_holding_a_non_finite_float_is_written_by_the_standard_library() -> None:
    # orjson would write null for each, silently; the standard library writes NaN and Infinity, which
    # Postgres refuses and SQLite stores and reads back, as before the codec changed.
    for bad in (math.nan, math.inf, -math.inf):
        value = {"certificate": {"sigma": bad, "epsilon": None}}
        assert jsoncodec.dumps_text(value) == json.dumps(value)
        restored = jsoncodec.loads(jsoncodec.dumps_text(value))["certificate"]["sigma"]
        assert math.isnan(restored) if math.isnan(bad) else restored == bad


def test_a_null_that_is_really_null_stays_on_the_fast_path() -> None:
    value = {"parent": None, "weights": [1.0, 2.5]}
    assert jsoncodec.dumps_bytes(value) == b'{"parent":null,"weights":[1.0,2.5]}'


def test_an_integer_beyond_64_bits_reads_back_exactly() -> None:
    # orjson alone reads these as floats (-9.223372036854776e+18): a seed or a count must not change.
    for number in (-(2**63) - 1, 2**64, 2**70):
        document = json.dumps({"seed": number, "nested": [{"n": number}]})
        assert jsoncodec.loads(document) == {"seed": number, "nested": [{"n": number}]}
        assert type(jsoncodec.loads(document)["seed"]) is int


def test_a_manifest_is_read_by_orjson_alone(monkeypatch: Any) -> None:
    """A manifest's hex digests hold runs of 19 digits and more, which no integer literal makes: its text
    is decoded once, by orjson, and not read again by the standard library; a document with an integer
    beyond 64 bits still is."""
    digests = {"a1b2c3": "12345678901234567890" + "ab" * 22, "d4e5f6": "9e" * 32}
    manifest = {"num_rows": 1000, "buckets": digests, "scale": 0.5, "dims": [784, 10]}
    standard_loads = json.loads

    def refused(_: Any) -> Any:
        raise AssertionError("read again by json.loads")

    monkeypatch.setattr(jsoncodec.json, "loads", refused)
    assert jsoncodec.loads(jsoncodec.dumps_bytes(manifest)) == manifest
    assert jsoncodec.loads(jsoncodec.dumps_text(manifest)) == manifest
    monkeypatch.setattr(jsoncodec.json, "loads", standard_loads)
    assert jsoncodec.loads(b'{"n": 18446744073709551616}') == {"n": 18446744073709551616}
