"""Projected noisy mini-batch SGD (PNSGD), the Langevin chain SGLU learns and unlearns with (Algorithm 1;
digest 003, section 2.1).

One step on batch B_j of the fixed cyclic partition (N batches of b slots, visited j = 0..N-1 every epoch):

    W <- Pi_{C_R}( W - eta [ (1/b) sum_{i in B_j} clip_M(grad l_i(W)) + lam W ] + sqrt(2 eta) sigma xi ),
    xi ~ N(0, I),   Pi_{C_R}(w) = w min(1, R/||w||)

Learning runs T epochs of it from w0 ~ N(0, 2 sigma^2/m I) (App. K.3); unlearning runs K more epochs of
exactly the same chain (same partition, same order, fresh noise) from the current weights.

Deleting instead of replacing. The paper's adjacency replaces a point (n fixed, batch positions fixed).
Every deleted sample is replaced with a *null* point that contributes no data gradient (digest 2.3, the
analogue of Kairouz et al.'s bottom element): it is L-smooth and m-strongly convex through the
regulariser, and ||grad f(w; d) - grad f(w; null)|| <= M <= 2M (Remark 3.7), so every bound holds with
the paper's constants while the forgotten sample's data is never touched again: unlearning trains on
the remaining samples only. The same device pads the batches (:mod:`unlearning.methods.langevin.batching`).

Seeds. Noise is drawn from a seeded generator so every draw is reproducible; whoever holds the noise
seeds and the data can strip the noise (digest 2.3 warns that seeds are non-private state).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from unlearning.methods.langevin.batching import Batch
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.protocol import ProgressCallback

SMALL_OP_ELEMENTS = 1 << 22
"""Per-step work (b x d elements) up to which the CPU loop runs on one intra-op thread."""
_MASK64 = (1 << 64) - 1


def project(w: torch.Tensor, radius: float) -> torch.Tensor:
    """Pi_{C_R}(w) = w min(1, R/||w||) (Frobenius norm of the whole parameter)."""
    norm = float(w.norm())
    return w * (radius / norm) if norm > radius else w


def pnsgd_epochs(
    w: torch.Tensor,
    batches: Sequence[Batch],
    problem: LogisticProblem,
    *,
    epochs: int,
    eta: float,
    sigma: float,
    radius: float,
    normaliser: int,
    generator: torch.Generator,
    progress: ProgressCallback | None = None,
    phase: str = "training",
) -> torch.Tensor:
    """``epochs`` full epochs of Algorithm 1 from ``w``: batches j = 0..N-1 in order, each step
    W <- Pi_{C_R}(W - eta ((1/b) sum_{B_j} clip grad + lam W) + sqrt(2 eta) sigma xi), xi ~ N(0, I).

    Noise is drawn on the CPU from ``generator`` one epoch at a time (N x shape), so the same seed gives
    the same weights on every device. Empty batches (all slots null) still take the noisy
    regulariser step: the chain is the one the analysis describes.
    """
    scale = math.sqrt(2.0 * eta) * sigma
    shape = (len(batches), *w.shape)
    with small_op_threads(w.device, normaliser * w.numel()):
        for e in range(epochs):
            noise = torch.randn(shape, generator=generator, dtype=w.dtype).to(w.device)
            for j, (xb, yb) in enumerate(batches):
                grad = problem.l2 * w
                if yb.numel():
                    grad = grad + problem.data_gradient_sum(w, xb, yb) / normaliser
                w = project(w - eta * grad + scale * noise[j], radius)
            if progress is not None:
                progress(phase, (e + 1) / epochs)
    return w


@contextmanager
def small_op_threads(device: torch.device, elements: int) -> Iterator[None]:
    """Run tiny per-step CPU ops on one intra-op thread, restoring the previous count afterwards.

    Each step touches one mini-batch (b x d elements); at that size torch's thread fork/join costs more
    than the arithmetic, and on a busy machine it is catastrophic: on the shared 2-core box a b = 128
    MNIST fit took 5.6 s with 2 threads and 0.1 s with 1 (the full batch 6.1 s vs 0.6 s). The setting is
    process-wide while the loop runs and only on the CPU; it changes speed, not the algorithm (one
    thread also fixes the floating-point summation order, so small fits reproduce bit for bit whatever
    the caller's thread setting).
    """
    if device.type != "cpu" or elements > SMALL_OP_ELEMENTS or torch.get_num_threads() == 1:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one purpose (partition, noise) from the fit seed."""
    tag_int = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=4).digest(), "little")
    state = np.random.SeedSequence([int(seed) & _MASK64, tag_int]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & ((1 << 63) - 1)


def noise_generator(seed: int) -> torch.Generator:
    """The CPU generator every noise draw of one run (a fit or one request) comes from."""
    return torch.Generator(device="cpu").manual_seed(int(seed))
