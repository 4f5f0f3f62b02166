"""What a method's hyperparameters are: a typed declaration per configuration key.

Every method lists one :class:`HyperParameter` per key of its ``default_config()`` (and no other) in its
``hyperparameters()``; the defaults themselves are not repeated here, they are read from
``default_config()`` when the catalogue is shown, so a changed default is shown as it is. The bounds and
choices declared are the ones the method's ``check_config`` enforces (the declarations reference the
constants the checks use; ``tests/unit/test_method_catalog.py`` probes each bound against
``check_config``). A wrapper around a method extends the declaration: ``(*inner.hyperparameters(),
*own)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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


__all__ = ["HyperParameter", "Kind"]
