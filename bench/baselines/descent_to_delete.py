"""Descent-to-Delete (D2D; Neel, Roth, Sharifi-Malvajerdi, ALT 2021) as the SGLU paper runs it (App. K.3 and
L; digest 4.1): the gradient-count baseline of the ``langevin`` method.

Learning (Algorithm 2): full-batch gradient descent with step 2/(L + m) on the same clipped, L2-regularised
logistic loss as SGLU, optionally projected onto the ball of radius R. Unlearning request i (Algorithm 3):
remove the sample, run I_i more full-batch gradient steps on the remaining data from the current weights
and publish w + N(0, sigma^2 I_d). With gamma = (L - m)/(L + m):

- Theorem L.2 (Neel et al. Thm 28, *without* internal non-private state; the fair comparison, since SGLU
  keeps none): the published noisy weights become the state and request i runs

      I_i = I + ceil( log(log(4 d i / delta)) / log(1/gamma) ),
      I   = ceil( log( sqrt(2d) (1 - gamma)^-1 / (sqrt(2 log(2/delta) + eps) - sqrt(2 log(2/delta))) ) / log(1/gamma) ),
      sigma = 8 M gamma^I / ( m n (1 - gamma^I) (sqrt(2 log(2/delta) + 3 eps) - sqrt(2 log(2/delta) + 2 eps)) ).

- Theorem L.1 (Neel et al. Thm 9, *with* internal state): the clean weights are kept and continued, every
  request runs I iterations and publishes with
      sigma = 4 sqrt(2) M gamma^I / ( m n (1 - gamma^I) (sqrt(log(1/delta) + eps) - sqrt(log(1/delta))) ).

- Both need training for T >= I + log(2 R m n / (2 M)) / log(1/gamma) iterations; the paper's experiments
  use T = 10,000.

The ceilings follow the authors' baseline code (digest 4.1). D2D's theorems are for add/remove adjacency;
the SGLU paper uses them as they are for its replacement comparison, and so do we. n in sigma is the
current training-set size (it shrinks with every deletion, which only raises sigma).
Every full-batch iteration computes one per-sample gradient for every remaining sample; that count is what
the benchmark compares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import InvalidConfigError
from unlearning.methods.langevin.batching import gather_batches
from unlearning.methods.langevin.noisy_sgd import project, small_op_threads
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.privacy.langevin.constants import check_target

Variant = Literal["without_state", "with_state"]
PAPER_TRAINING_ITERATIONS = 10_000


@dataclass(frozen=True)
class D2DConstants:
    """L-smooth, m-strongly convex, M-Lipschitz objective on d parameters; step 2/(L + m)."""

    L: float
    m: float
    M: float
    d: int

    def __post_init__(self) -> None:
        if not (0 < self.m < self.L) or not self.M > 0 or self.d < 1:
            raise InvalidConfigError(f"D2D needs 0 < m < L, M > 0 and d >= 1, got m={self.m}, L={self.L}, "
                                     f"M={self.M}, d={self.d}")

    @property
    def gamma(self) -> float:
        """The contraction of one gradient step with step 2/(L + m): (L - m)/(L + m)."""
        return (self.L - self.m) / (self.L + self.m)

    @property
    def step(self) -> float:
        return 2.0 / (self.L + self.m)

    @classmethod
    def for_problem(cls, problem: LogisticProblem) -> D2DConstants:
        rows, cols = problem.shape
        return cls(L=problem.smoothness, m=problem.l2, M=problem.clip, d=rows * cols)


def iterations_without_state(const: D2DConstants, epsilon: float, delta: float) -> int:
    """I of Theorem L.2 (eq. 75), rounded up as in the authors' baseline code."""
    check_target(epsilon, delta)
    base = 2.0 * math.log(2.0 / delta)
    gap = math.sqrt(base + epsilon) - math.sqrt(base)
    return max(1, math.ceil(math.log(math.sqrt(2.0 * const.d) / (1.0 - const.gamma) / gap) / -math.log(const.gamma)))


def request_iterations(const: D2DConstants, base_iterations: int, request_index: int, delta: float) -> int:
    """Gradient steps of the i-th sequential request (1-based) under Theorem L.2:
    I + ceil(log(log(4 d i / delta)) / log(1/gamma))."""
    if request_index < 1:
        raise InvalidConfigError(f"requests are numbered from 1, got {request_index}")
    extra = math.log(math.log(4.0 * const.d * request_index / delta)) / -math.log(const.gamma)
    return base_iterations + math.ceil(extra)


def sigma_without_state(const: D2DConstants, iterations: int, n: int, epsilon: float, delta: float) -> float:
    """Output-perturbation sigma of Theorem L.2 (eq. 76) for I = ``iterations`` and n samples."""
    check_target(epsilon, delta)
    base = 2.0 * math.log(2.0 / delta)
    g = const.gamma**iterations
    gap = math.sqrt(base + 3.0 * epsilon) - math.sqrt(base + 2.0 * epsilon)
    return 8.0 * const.M * g / (const.m * n * (1.0 - g) * gap)


def sigma_with_state(const: D2DConstants, iterations: int, n: int, epsilon: float, delta: float) -> float:
    """Output-perturbation sigma of Theorem L.1 (eq. 74) for I = ``iterations`` and n samples."""
    check_target(epsilon, delta)
    base = math.log(1.0 / delta)
    g = const.gamma**iterations
    return 4.0 * math.sqrt(2.0) * const.M * g / (const.m * n * (1.0 - g) * (math.sqrt(base + epsilon) - math.sqrt(base)))


def training_iterations(const: D2DConstants, iterations: int, radius: float, n: int) -> int:
    """The learning requirement of Theorems L.1/L.2: T >= I + log(2 R m n / (2M)) / log(1/gamma)."""
    return iterations + max(0, math.ceil(math.log(2.0 * radius * const.m * n / (2.0 * const.M)) / -math.log(const.gamma)))


@dataclass
class DescentToDelete:
    """A runnable D2D model on the SGLU loss: ``fit`` then ``forget`` request by request.

    ``gradient_evaluations`` counts per-sample gradients (one per remaining sample per iteration),
    ``history`` the iterations of each request.
    """

    problem: LogisticProblem
    epsilon: float
    delta: float
    variant: Variant = "without_state"
    radius: float | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    weights: torch.Tensor | None = None  # the internal state: noisy (L.2) or clean (L.1)
    published: torch.Tensor | None = None
    requests: int = 0
    gradient_evaluations: int = 0
    history: list[int] = field(default_factory=list)
    const: D2DConstants = field(init=False)
    base_iterations: int = field(init=False)

    def __post_init__(self) -> None:
        check_target(self.epsilon, self.delta)
        if self.variant not in ("without_state", "with_state"):
            raise InvalidConfigError(f"variant must be 'without_state' or 'with_state', got {self.variant!r}")
        self.const = D2DConstants.for_problem(self.problem)
        self.base_iterations = iterations_without_state(self.const, self.epsilon, self.delta)

    def _descend(self, w: torch.Tensor, data: Dataset, iterations: int) -> torch.Tensor:
        ((x, y),) = gather_batches(data, [np.arange(len(data))], self.problem, self.device)
        step, n = self.const.step, float(len(data))
        with small_op_threads(self.device, len(data) * w.numel()):
            for _ in range(iterations):
                w = w - step * self.problem.objective_gradient(w, x, y, n)
                if self.radius is not None:
                    w = project(w, self.radius)
        self.gradient_evaluations += iterations * len(data)
        return w

    def fit(self, data: Dataset, iterations: int = PAPER_TRAINING_ITERATIONS) -> torch.Tensor:
        """Algorithm 2 from w = 0 (deterministic; 10,000 iterations in the paper). Returns the weights
        as published before any request (D2D adds noise only when it unlearns)."""
        w0 = torch.zeros(self.problem.shape, dtype=torch.float64, device=self.device)
        self.weights = self._descend(w0, data, iterations)
        self.published = self.weights.clone()
        return self.problem.to_flat(self.published).cpu()

    def iterations_for_next(self) -> int:
        """Iterations the next request will run (Thm L.2 grows with the request index; L.1 runs I)."""
        if self.variant == "with_state":
            return self.base_iterations
        return request_iterations(self.const, self.base_iterations, self.requests + 1, self.delta)

    def sigma(self, n: int) -> float:
        if self.variant == "with_state":
            return sigma_with_state(self.const, self.base_iterations, n, self.epsilon, self.delta)
        return sigma_without_state(self.const, self.base_iterations, n, self.epsilon, self.delta)

    def forget(self, remaining: Dataset, noise_seed: int) -> torch.Tensor:
        """Algorithm 3 on ``remaining`` (the data after the deletion): descend, perturb, publish."""
        if self.weights is None:
            raise InvalidConfigError("fit the D2D baseline before forgetting")
        iterations = self.iterations_for_next()
        clean = self._descend(self.weights, remaining, iterations)
        gen = torch.Generator(device="cpu").manual_seed(int(noise_seed))
        noise = torch.randn(self.problem.shape, generator=gen, dtype=torch.float64).to(self.device)
        self.published = clean + self.sigma(len(remaining)) * noise
        self.weights = self.published if self.variant == "without_state" else clean
        self.requests += 1
        self.history.append(iterations)
        return self.problem.to_flat(self.published).cpu()
