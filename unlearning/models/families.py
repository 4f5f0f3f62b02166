"""The model families :func:`unlearning.models.flat.build_model` knows, by name.

A family is a function from a :class:`~unlearning.models.spec.ModelSpec` to the torch module whose
parameters, flattened, are the model's weight vector. Adding a family is one entry in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from torch import nn

from unlearning.errors import InvalidConfigError
from unlearning.models.linear import build_logistic_regression
from unlearning.models.nets import build_cnn, build_lenet5, build_mlp
from unlearning.models.spec import ModelSpec

__all__ = ["FAMILIES", "ModuleBuilder", "family_names", "module_builder"]

ModuleBuilder = Callable[[ModelSpec], nn.Module]

FAMILIES: Mapping[str, ModuleBuilder] = MappingProxyType({
    "logistic_regression": build_logistic_regression,
    "mlp": build_mlp,
    "cnn": build_cnn,
    "lenet5": build_lenet5,
})
"""Family name -> the builder of its module (read-only)."""


def family_names() -> tuple[str, ...]:
    """The family names, sorted."""
    return tuple(sorted(FAMILIES))


def module_builder(family: str) -> ModuleBuilder:
    """The builder of ``family``; an unknown name is an InvalidConfigError listing the known ones."""
    try:
        return FAMILIES[family]
    except KeyError:
        raise InvalidConfigError(
            f"unknown model family {family!r}; choose one of {sorted(FAMILIES)}"
        ) from None
