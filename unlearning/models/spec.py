"""The architecture of a model: family name, input shape, number of classes and family options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelSpec"]


@dataclass(frozen=True)
class ModelSpec:
    """The architecture: family name, input shape (without the batch axis), classes, family options."""

    family: str
    input_shape: tuple[int, ...]
    num_classes: int
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "options": dict(self.options),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        return cls(
            family=str(data["family"]),
            input_shape=tuple(int(s) for s in data["input_shape"]),
            num_classes=int(data["num_classes"]),
            options=dict(data.get("options", {})),
        )
