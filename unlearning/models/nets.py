"""Neural families: an MLP, the Hessian-free paper's small CNN, and LeNet-5 (digest 002, section 8)."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from unlearning.errors import InvalidConfigError
from unlearning.models.spec import ModelSpec

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


# Upper bounds on an MLP's shape, so that a width like 10**12 is refused when the model is registered
# rather than by the allocator when it trains. Generous: the paper settings, benches and tests use at most
# two layers of 64; 65,536 wide is already a 4-billion-weight layer next to another as wide.
MAX_HIDDEN_WIDTH = 65_536
MAX_HIDDEN_LAYERS = 16
# The whole MLP, input and output layers included (known once the data's width is): 2**26 weights are
# 256 MiB per float32 copy, and the SGD methods keep several copies and per-sample vectors of that size.
MAX_MLP_PARAMETERS = 2**26


def hidden_widths(value: object) -> list[int]:
    """The MLP's hidden widths: at most ``MAX_HIDDEN_LAYERS`` integers in [1, ``MAX_HIDDEN_WIDTH``] (an
    empty list is a linear model)."""
    if not isinstance(value, list | tuple) or any(
        isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= MAX_HIDDEN_WIDTH for h in value
    ):
        raise InvalidConfigError(
            f"hidden must be a list of layer widths, integers from 1 to {MAX_HIDDEN_WIDTH}, got {value!r}"
        )
    if len(value) > MAX_HIDDEN_LAYERS:
        raise InvalidConfigError(f"hidden may list at most {MAX_HIDDEN_LAYERS} layers, got {len(value)}")
    return [int(h) for h in value]


def mlp_parameter_count(input_dim: int, hidden: list[int], num_classes: int) -> int:
    """Weights and biases of the MLP :func:`build_mlp` makes, counted without allocating it."""
    widths = [input_dim, *hidden, num_classes]
    return sum((a + 1) * b for a, b in itertools.pairwise(widths))


def check_mlp_size(input_dim: int, hidden: list[int], num_classes: int) -> None:
    """Refuse an MLP of more than ``MAX_MLP_PARAMETERS`` weights on data ``input_dim`` wide."""
    count = mlp_parameter_count(input_dim, hidden, num_classes)
    if count > MAX_MLP_PARAMETERS:
        raise InvalidConfigError(
            f"hidden {hidden} on {input_dim} input features makes an MLP of {count:,} parameters, above the "
            f"limit of {MAX_MLP_PARAMETERS:,}: use fewer or narrower layers"
        )


def build_mlp(spec: ModelSpec) -> nn.Module:
    """The ``mlp`` family: flatten, then Linear-activation blocks of widths ``options["hidden"]``
    (default (64,))."""
    hidden = hidden_widths(spec.options.get("hidden", (64,)))
    act_name = str(spec.options.get("activation", "tanh"))
    if act_name not in _ACTIVATIONS:
        raise InvalidConfigError(f"unknown activation {act_name!r}; choose one of {sorted(_ACTIVATIONS)}")
    layers: list[nn.Module] = [Flatten()]
    width = math.prod(spec.input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), _ACTIVATIONS[act_name]()]
        width = h
    layers.append(nn.Linear(width, spec.num_classes))
    return nn.Sequential(*layers)


def _require_image(spec: ModelSpec, channels: int, size: int) -> None:
    if tuple(spec.input_shape) != (channels, size, size):
        raise InvalidConfigError(
            f"family {spec.family!r} takes images of shape ({channels}, {size}, {size}), "
            f"got {tuple(spec.input_shape)}"
        )


def build_cnn(spec: ModelSpec) -> nn.Module:
    """The ``cnn`` family: conv 1->10 k5, pool, conv 10->20 k5, pool, fc 320->50->10 (21,840 parameters
    for MNIST).

    ReLU after each conv+pool and after fc1, as the authors' model; no dropout (training and Stage II
    must see one deterministic map).
    """
    _require_image(spec, 1, 28)
    return nn.Sequential(
        nn.Conv2d(1, 10, kernel_size=5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(10, 20, kernel_size=5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        Flatten(),
        nn.Linear(320, 50),
        nn.ReLU(),
        nn.Linear(50, spec.num_classes),
    )


def build_lenet5(spec: ModelSpec) -> nn.Module:
    """The ``lenet5`` family: conv 1->6 k5 pad2, pool, conv 6->16 k5, pool, fc 400->120->84->10 (61,706
    parameters)."""
    _require_image(spec, 1, 28)
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        Flatten(),
        nn.Linear(400, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, spec.num_classes),
    )
