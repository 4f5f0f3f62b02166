"""Flat-parameter wrapper over torch modules, and :func:`build_model`, which builds one from a
:class:`~unlearning.models.spec.ModelSpec` through the family table of :mod:`unlearning.models.families`."""

from __future__ import annotations

import functools
import json
import math
import threading
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.models.families import module_builder
from unlearning.models.spec import ModelSpec

__all__ = ["FlatModel", "build_model"]

_DEFAULT_GENERATOR = threading.Lock()
"""Held while a thread seeds and draws from torch's process-wide default generator."""


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
    """The flat model of ``spec``; an unknown family or fewer than 2 classes is an InvalidConfigError."""
    builder = module_builder(spec.family)
    if spec.num_classes < 2:
        raise InvalidConfigError(f"num_classes must be >= 2, got {spec.num_classes}")
    return FlatModel(spec, builder(spec))


@functools.lru_cache(maxsize=64)
def _built(spec_json: str) -> FlatModel:
    return build_model(ModelSpec.from_dict(json.loads(spec_json)))


def shared_model(spec: ModelSpec | dict[str, Any]) -> FlatModel:
    """The :class:`FlatModel` of ``spec``, built once per architecture and shared (its ``logits`` is safe
    from several threads): for predictions, where building the module per request would dominate."""
    data = spec.to_dict() if isinstance(spec, ModelSpec) else spec
    return _built(json.dumps(data, sort_keys=True))
