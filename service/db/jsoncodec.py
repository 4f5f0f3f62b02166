"""The JSON codec of the database's JSON columns: orjson, with the standard library as fallback.

An update round reads and writes the model's and the dataset's bucket manifests (JSON, about 84 KB each
at 1,000 owners, :mod:`service.storage.buckets`): three encodes and three decodes per round. The
standard library spends about 375 microseconds on one encode and 250 on one decode, orjson 20 and 125, so the codec is a measurable part of a round's CPU.

What is stored never depends on the codec: where orjson would write something other than
:func:`json.dumps` (with its defaults, as before), the standard library writes it.

- orjson refuses integers beyond 64 bits and values the standard library handles in its own way: those
  are encoded by :func:`json.dumps`;
- orjson writes NaN and infinities as ``null`` where :func:`json.dumps` writes ``NaN`` (which Postgres
  rejects): a value holding such a float is encoded by :func:`json.dumps`
  (the service keeps them out of its columns: :func:`unlearning.serialization.json_safe`);
- orjson reads only standard JSON (no ``NaN``): anything else is read by :func:`json.loads`;
- orjson reads an integer beyond 64 bits as a float, silently (``-9223372036854775809`` becomes
  ``-9.223372036854776e+18``): a document in which a float of that size appears is read again by
  :func:`json.loads`, which keeps the integer exact. The walk over the decoded values that finds such a
  float skips strings, so on a manifest (a thousand hex digests) it costs about 20 microseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS  # {1: ...} is stored as {"1": ...}, as json.dumps does


def dumps_bytes(value: Any) -> bytes:
    """``value`` as UTF-8 JSON (psycopg's JSON dumper takes bytes as they are)."""
    try:
        encoded = orjson.dumps(value, option=_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value).encode()
    if b"null" in encoded and _has_non_finite(value):
        return json.dumps(value).encode()
    return encoded


def dumps_text(value: Any) -> str:
    """``value`` as JSON text (the manifest columns store it as TEXT)."""
    return dumps_bytes(value).decode()


def loads(data: str | bytes) -> Any:
    """The value of a JSON document."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # NaN, Infinity
    return json.loads(data) if _holds_huge_float(value) else value


# No look at the text first: a regular expression for a run of 19 digits (which such an integer needs)
# took 1.4 ms on an 84 KB manifest, whose random hex digests hold such runs at some 6 places each and
# digit runs that fail the match at thousands, against 20 microseconds for the walk (bench/README.md,
# item 30).
_INT64_MAGNITUDE = 2.0**63  # orjson's floats for out-of-range integer literals are at least this large


def _holds_huge_float(value: Any) -> bool:
    """Whether a float of magnitude at least 2**63 lies in ``value`` (it may have been an integer)."""
    return _any_float(value, lambda x: abs(x) >= _INT64_MAGNITUDE)


def _has_non_finite(value: Any) -> bool:
    """Whether a float that is NaN or infinite lies anywhere in ``value`` (orjson wrote it as null)."""
    return _any_float(value, lambda x: not math.isfinite(x))


def _any_float(value: Any, test: Callable[[float], bool]) -> bool:
    """Whether ``test`` holds for a float anywhere in ``value`` (dicts' values, lists and tuples). A loop
    that skips strings first: a manifest is a thousand of them, and this runs on every document read."""
    if isinstance(value, float):
        return test(value)
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return False
    for item in items:
        if type(item) is not str and _any_float(item, test):
            return True
    return False
