"""Plain JSON for records that hold floats: non-finite values become strings and come back.

Certificates and method accounting carry infinities (an unbounded bound, epsilon = inf), which strict
JSON parsers and Postgres JSONB refuse.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

import torch


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as "inf"/"-inf"/"nan", dict keys as strings, tuples as lists,
    dataclass instances as dicts of their fields and one-element tensors as numbers. Every container is
    built anew, so the result shares no mutable part with ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return json_safe(value.item())
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_safe(getattr(value, f.name)) for f in fields(value)}
    return value


def json_restore(value: Any) -> Any:
    """The inverse of :func:`json_safe` for the non-finite floats."""
    if value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, dict):
        return {k: json_restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_restore(v) for v in value]
    return value
