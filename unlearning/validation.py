"""Checks of configuration values that every part of the core library shares, with one wording.

A JSON ``true`` is an ``int`` to Python; none of these accepts it where a number is meant.
"""

from __future__ import annotations

import math

from unlearning.errors import InvalidConfigError


def integer_at_least(name: str, value: object, low: int) -> int:
    """``value`` as an int, if it is an integer (not a bool) of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def positive_number(name: str, value: object) -> float:
    """``value`` as a float, if it is a finite number (not a bool) above 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value > 0 and math.isfinite(value)):
        raise InvalidConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


__all__ = ["integer_at_least", "positive_number"]
