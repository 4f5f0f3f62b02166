"""What a method's hyperparameters are: a typed declaration per configuration key.

Every method lists one :class:`HyperParameter` per key of its ``default_config()`` (and no other) in its
``hyperparameters()``; the defaults themselves are not repeated here, they are read from
``default_config()`` when the catalogue is shown, so a changed default is shown as it is. The bounds and
choices declared are the ones the method's ``check_config`` enforces (the declarations reference the
constants the checks use; ``tests/unit/test_method_catalog.py`` probes each bound against
``check_config``). A wrapper around a method extends the declaration: ``(*inner.hyperparameters(),
*own)``. Every numeric key is bounded on both sides, so that no single value makes a training run for days
or allocate without bound; :meth:`HyperParameter.check` / :func:`check_declared` enforce a declaration as it
is written, which is how the newer bounds are checked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from unlearning.errors import InvalidConfigError

Kind = Literal["integer", "number", "string", "boolean", "integer_list", "object"]
"""The JSON type of a value: ``integer`` (an ``integer`` is accepted where a ``number`` is), ``number``,
``string``, ``boolean``, ``integer_list`` (a list of integers; bounds apply to each item) or ``object``."""


@dataclass(frozen=True)
class HyperParameter:
    """One configuration key of a method.

    ``minimum`` / ``maximum`` bound a number (each item of an ``integer_list``), inclusive unless
    ``exclusive_minimum`` / ``exclusive_maximum``; numbers must also be finite. ``choices`` are the only
    values a ``string`` takes; for a numeric kind they are named values accepted besides the numbers
    within the bounds. ``nullable``: null is accepted, meaning ``null_means`` (e.g. a value derived from
    the data when training starts). ``max_items`` bounds the length of a list.
    """

    name: str
    kind: Kind
    description: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    null_means: str = ""
    max_items: int | None = None

    def __post_init__(self) -> None:
        if self.nullable != bool(self.null_means):
            raise ValueError(f"hyperparameter {self.name!r}: say what null means exactly when it is nullable")
        if (self.exclusive_minimum and self.minimum is None) or (self.exclusive_maximum and self.maximum is None):
            raise ValueError(f"hyperparameter {self.name!r}: an exclusive bound needs the bound")

    def to_dict(self, default: Any = None) -> dict[str, Any]:
        """JSON-able, with ``default`` (the method's current default) and, when that default is null, what
        it stands for (``default_note``)."""
        return {
            "name": self.name,
            "type": self.kind,
            "description": self.description,
            "default": default,
            "default_note": (self.null_means or "derived from the data") if default is None else None,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "exclusive_minimum": self.exclusive_minimum,
            "exclusive_maximum": self.exclusive_maximum,
            "choices": list(self.choices),
            "nullable": self.nullable,
            "null_means": self.null_means or None,
            "max_items": self.max_items,
        }


    def check(self, value: Any) -> Any:
        """``value`` if it is of this key's numeric kind, finite and within its declared bounds (null where
        nullable); otherwise :class:`InvalidConfigError` naming the key, the bound and the value. Only for
        ``integer`` and ``number`` declarations (named ``choices`` pass as they are)."""
        if (value is None and self.nullable) or (self.choices and value in self.choices):
            return value
        if self.kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidConfigError(f"{self.name} must be an integer{self._range()}, got {value!r}")
        if self.kind == "number" and (
            isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        ):
            raise InvalidConfigError(f"{self.name} must be a finite number{self._range()}, got {value!r}")
        if self.minimum is not None and (value <= self.minimum if self.exclusive_minimum else value < self.minimum):
            relation = ">" if self.exclusive_minimum else ">="
            raise InvalidConfigError(f"{self.name} must be {relation} {shown(self.minimum)}, got {value!r}")
        if self.maximum is not None and (value >= self.maximum if self.exclusive_maximum else value > self.maximum):
            relation = "below" if self.exclusive_maximum else "at most"
            raise InvalidConfigError(f"{self.name} must be {relation} {shown(self.maximum)}, got {value!r}")
        return value

    def _range(self) -> str:
        low = "" if self.minimum is None else f"{'(' if self.exclusive_minimum else '['}{shown(self.minimum)}"
        high = "" if self.maximum is None else f"{shown(self.maximum)}{')' if self.exclusive_maximum else ']'}"
        return f" in {low or '(-inf'}, {high or 'inf)'}" if low or high else ""


def shown(bound: float) -> str:
    """A bound as a message shows it: 1,000 for an integer, 1e+04 style for other numbers."""
    if float(bound).is_integer() and abs(bound) < 1e7:
        return f"{int(bound):,}"
    return f"{bound:g}"


def check_declared(declarations: Iterable[HyperParameter], config: Mapping[str, Any]) -> None:
    """:meth:`HyperParameter.check` for every ``integer`` / ``number`` declaration whose key ``config``
    holds: the one place where a method's numeric bounds are enforced as they are declared."""
    for p in declarations:
        if p.kind in ("integer", "number") and p.name in config:
            p.check(config[p.name])


__all__ = ["HyperParameter", "Kind", "check_declared", "shown"]
