"""The JSON codec of the database's JSON columns: orjson, falling back to :func:`json.dumps` /
:func:`json.loads` wherever orjson's result would differ (integers beyond 64 bits, NaN or infinities;
non-standard JSON, floats of magnitude >= 2**63 that were out-of-range integers).
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


_INT64_MAGNITUDE = 2.0**63  # orjson's floats for out-of-range integer literals are at least this large


def _holds_huge_float(value: Any) -> bool:
    """Whether a float of magnitude at least 2**63 lies in ``value`` (it may have been an integer)."""
    return _any_float(value, lambda x: abs(x) >= _INT64_MAGNITUDE)


def _has_non_finite(value: Any) -> bool:
    """Whether a float that is NaN or infinite lies anywhere in ``value`` (orjson wrote it as null)."""
    return _any_float(value, lambda x: not math.isfinite(x))


def _any_float(value: Any, test: Callable[[float], bool]) -> bool:
    """Whether ``test`` holds for a float anywhere in ``value`` (dict values, lists, tuples)."""
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
