"""Multinomial logistic regression with a bias column folded into one (C, D+1) parameter."""

from __future__ import annotations

import math

import torch
from torch import nn

from unlearning.models.spec import ModelSpec


class SoftmaxRegression(nn.Module):
    """logits = [x, 1] @ theta^T with theta of shape (C, D+1); x is flattened first.

    Folding the bias into theta makes the flat vector theta.flatten() and lets the closed-form
    Hessian-vector products of :mod:`unlearning.models.softmax_ops` work on one matrix.
    """

    def __init__(self, num_features: int, num_classes: int) -> None:
        super().__init__()
        self.num_features = num_features
        self.theta = nn.Parameter(torch.empty(num_classes, num_features + 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Same distribution as nn.Linear's default: U(-1/sqrt(D), 1/sqrt(D)) for weights and bias.
        bound = 1.0 / math.sqrt(self.num_features)
        nn.init.uniform_(self.theta, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        return x @ self.theta[:, :-1].T + self.theta[:, -1]


def build_logistic_regression(spec: ModelSpec) -> nn.Module:
    """The ``logistic_regression`` family: :class:`SoftmaxRegression` on the flattened input."""
    return SoftmaxRegression(math.prod(spec.input_shape), spec.num_classes)
