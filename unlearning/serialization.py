"""Plain JSON for records that hold floats: non-finite values become strings and come back.

Certificates and method accounting carry infinities (an unbounded bound, epsilon = inf), which strict
JSON parsers and Postgres JSONB refuse.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as "inf"/"-inf"/"nan", dict keys as strings, tuples as lists and
    one-element tensors as numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return json_safe(value.item())
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
