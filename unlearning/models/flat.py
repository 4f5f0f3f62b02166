"""Flat-parameter wrapper over torch modules and the registry of model families."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from unlearning.errors import DimensionMismatchError, InvalidConfigError

_DEFAULT_GENERATOR = threading.Lock()
"""Held while a thread seeds and draws from torch's process-wide default generator."""


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


ModuleBuilder = Callable[[ModelSpec], nn.Module]
_FAMILIES: dict[str, ModuleBuilder] = {}


def register_family(name: str) -> Callable[[ModuleBuilder], ModuleBuilder]:
    def deco(builder: ModuleBuilder) -> ModuleBuilder:
        _FAMILIES[name] = builder
        return builder

    return deco


def family_names() -> tuple[str, ...]:
    _load_families()
    return tuple(sorted(_FAMILIES))


def _load_families() -> None:
    # Importing the family modules registers them; done lazily to avoid an import cycle.
    import unlearning.models.linear
    import unlearning.models.nets  # noqa: F401


class FlatModel:
    """A module viewed as a function of one flat parameter vector.

    ``w`` concatenates the module's parameters in ``named_parameters()`` order, each flattened
    row-major. The module itself is only a template: its own parameters are never trained.
    """

    def __init__(self, spec: ModelSpec, module: nn.Module) -> None:
        self.spec = spec
        self.module = module.eval()  # eval mode: training and Stage II see the same deterministic map
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in module.named_parameters()]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.dim = int(sum(self.sizes))
        # functional_call puts the given weights into the template module for the call's duration: two
        # threads sharing this model (the API's request threads share one per architecture) take turns.
        self._module_in_use = threading.RLock()

    def initial_weights(self, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Deterministic initialisation: the module's default init under ``torch.manual_seed(seed)``.

        The modules' ``reset_parameters`` draw from torch's default generator, which the whole process
        shares, so the seeding and the draws hold :data:`_DEFAULT_GENERATOR` throughout: two trainings
        starting together on a worker's threads otherwise reseed under each other's draws and get
        weights their recorded seed does not reproduce (tests/unit/test_threads.py)."""
        with _DEFAULT_GENERATOR:
            gen_state = torch.random.get_rng_state()
            try:
                torch.manual_seed(seed)
                fresh = build_model(self.spec).module
                fresh.apply(_reset)
                return torch.cat([p.detach().reshape(-1) for p in fresh.parameters()]).to(dtype)
            finally:
                torch.random.set_rng_state(gen_state)

    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        if w.ndim != 1 or w.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"weights have shape {tuple(w.shape)}, model {self.spec.family!r} needs ({self.dim},)"
            )
        parts = torch.split(w, self.sizes)
        return {n: p.view(s) for n, p, s in zip(self.names, parts, self.shapes)}

    def logits(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch ``x`` of shape (b, *input_shape) under flat weights ``w``.

        Safe from several threads: ``functional_call`` swaps ``w`` into the template module for the
        call, so without the lock a concurrent call with other weights computes with those (two threads
        on one MLP: about two thirds of 3,000 calls each got the other's logits; tests/unit/test_threads.py).
        """
        with self._module_in_use:
            return functional_call(self.module, self.unflatten(w), (x,))

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> FlatModel:
        self.module = self.module.to(device=device, dtype=dtype)
        return self


def _reset(m: nn.Module) -> None:
    reset = getattr(m, "reset_parameters", None)
    if callable(reset):
        reset()


def build_model(spec: ModelSpec) -> FlatModel:
    _load_families()
    try:
        builder = _FAMILIES[spec.family]
    except KeyError:
        raise InvalidConfigError(
            f"unknown model family {spec.family!r}; choose one of {sorted(_FAMILIES)}"
        ) from None
    if spec.num_classes < 2:
        raise InvalidConfigError(f"num_classes must be >= 2, got {spec.num_classes}")
    return FlatModel(spec, builder(spec))
