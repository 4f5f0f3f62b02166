"""The Mini-Unlearning correction: Eq. 10 on the recorded window, in forward (Horner) form.

The unlearned model is the trained one plus a linearised replay of the last k SGD steps without the
deleted samples (Eq. 10, Horner form of digest 004 section 2.9):

    Delta <- 0
    for l = T-k+1 .. T:                                   (ascending)
        Delta <- G(l) + H(l) Delta
    w* = w_T + Delta

    G(l) = eta_l (D_l(w_{l-1}) - D^R_l(w_{l-1}))          (Eq. 7)
    H(l) = I - eta_l J^R_l(w_{l-1})                       (Eq. 8)

where D_l is the step direction training applied at step l (the mean gradient over the recorded batch
B_l, of size B), D^R_l the same map over the retained part B_l \\ D_U normalised by B - dB_l (Eq. 2, the
retraining counterfactual), and J^R_l = dD^R_l/dw, i.e. (1/(B - dB_l)) times the sum of the retained
samples' Hessians. Unrolled, this is exactly Eq. 10:

    Delta = G(T) + sum_{j=2..k} H(T) H(T-1) ... H(T-j+2) G(T-j+1)

with k G-terms and k-1 Hessian-vector products. Where we depart from the printed paper:

- Sign: Eq. 6 / 13 print "- (eta/B) sum_U grad"; the sign is "+" (digest 2.1), which is what
  G = eta (D - D^R) gives. We write G in this "retained step minus full step" form (digest 2.2, equal to
  Eq. 7 to rounding) because D_l is recorded at training time, so a request needs only the RETAINED
  samples of the window: samples forgotten by earlier requests, whose data the service has erased, are
  never needed again.
- The printed Algorithms 1 and 3 have index and ordering bugs (digest 2.4, 2.5); we implement Eq. 10.
- A batch whose samples are all deleted is skipped by the retrain, so G(l) = eta D_l and H(l) = I
  (digest 2.2; the paper divides by zero there).
- Hessian-vector products are exact (``hvp: "exact"``, the Jacobian-vector product of the step map,
  closed form for logistic regression) or the corrected L-BFGS approximation of Algorithm 4
  (``hvp: "lbfgs"``, :mod:`unlearning.lbfgs`) with secant pairs of the SAME function phi_l (the
  retained part of batch l) at the m snapshots before w_{l-1}: the literal reading, a different batch
  per snapshot, breaks the secant condition and can move the model away from the retrain (digest 2.6).

Theorem 1 bounds only the truncation error of the linearised recursion, by r^k ||Delta w_{T-k}|| with
r = max(|1 - eta mu|, |1 - eta L|) for a mu-strongly convex, L-smooth loss; it is no privacy guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import InvalidDatasetError, UnknownSampleError
from unlearning.lbfgs import CompactLBFGS, secant_pairs
from unlearning.methods.mini_unlearning.config import HvpMode
from unlearning.methods.mini_unlearning.trajectory import RecordedWindow, decode_ids
from unlearning.models.flat import FlatModel
from unlearning.steps import SGDConfig, StepMap, make_step_map, sgd_direction


@dataclass(frozen=True)
class WindowStep:
    """One replayed step: its retained rows (positions in ``remaining``), |B_l| and dB_l."""

    retained: np.ndarray
    recorded: int
    deleted: int


def split_window(
    window: RecordedWindow, remaining: Dataset, forgotten: set[str]
) -> tuple[list[WindowStep], torch.Tensor, int]:
    """Split every window batch B_l into its retained part B_l \\ D_U and dB_l; scrub this request's ids.

    An id scrubbed by an earlier request counts as deleted; an id neither scrubbed, nor named, nor in
    ``remaining`` means the caller passed the wrong training data (:class:`InvalidDatasetError`). Returns
    the steps, the scrubbed id table and the number of distinct samples of this request that fall inside
    the window.
    """
    ids = window.ids.clone()
    steps: list[WindowStep] = []
    hit: set[str] = set()
    for j, row in enumerate(decode_ids(window.ids)):
        recorded = window.recorded_size(j)
        kept: list[str] = []
        for pos, sid in enumerate(row[:recorded]):
            if sid in forgotten:
                hit.add(sid)
                ids[j, pos] = 0
            elif sid:  # "" = padding or scrubbed by an earlier request
                kept.append(sid)
        try:
            rows = remaining.indices_of(kept)
        except UnknownSampleError as exc:
            raise InvalidDatasetError(
                f"a sample of the recorded window is missing from the remaining training data ({exc}); pass "
                "every sample not yet forgotten, including those this request names"
            ) from None
        steps.append(WindowStep(retained=rows, recorded=recorded, deleted=recorded - len(kept)))
    return steps, ids, len(hit)


@dataclass
class ReplayStats:
    """Work done by one forward loop (for the certificate's ``measured``)."""

    gradient_evaluations: int = 0
    hvp_products: int = 0
    lbfgs_fallbacks: int = 0
    lbfgs_pairs_dropped: int = 0
    deleted_per_step: list[int] = field(default_factory=list)
    recorded_per_step: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _RetainedBatch:
    """phi_l, the retained part of window batch l, as a map of the weights: D^R_l(w) and its step map
    (normalised by B - dB_l, Eq. 2). Every evaluation is counted in ``stats``."""

    model: FlatModel
    cfg: SGDConfig
    x: torch.Tensor
    y: torch.Tensor
    stats: ReplayStats

    def direction(self, w: torch.Tensor) -> torch.Tensor:
        self.stats.gradient_evaluations += 1
        return sgd_direction(self.model, w, self.x, self.y, self.cfg, self.x.shape[0])

    def step_map(self, w: torch.Tensor) -> StepMap:
        self.stats.gradient_evaluations += 1
        return make_step_map(self.model, w, self.x, self.y, self.cfg, normalizer=self.x.shape[0])


def forward_correction(
    model: FlatModel,
    cfg: SGDConfig,
    window: RecordedWindow,
    steps: Sequence[WindowStep],
    remaining: Dataset,
    *,
    hvp: HvpMode,
    m: int,
    device: torch.device,
) -> tuple[torch.Tensor, ReplayStats]:
    """Delta of Eq. 10 by the forward recursion Delta <- G(l) + H(l) Delta over the window (ascending).

    G(l) = eta_l (D_l - D^R_l(w_{l-1})) always uses the exact retained direction; only the product
    J^R_l Delta inside H(l) Delta = Delta - eta_l J^R_l Delta is approximated in ``lbfgs`` mode. A step
    with no deleted sample has G = 0 and, while Delta is still zero, needs no work, so the recursion
    starts at the first window step that contains a deleted sample.
    """
    dtype = window.snapshots.dtype
    model.to(device, dtype)
    snaps = window.snapshots.to(device)
    stats = ReplayStats()
    delta = torch.zeros(snaps.shape[1], dtype=dtype, device=device)
    started = False
    for j, step in enumerate(steps):
        stats.deleted_per_step.append(step.deleted)
        stats.recorded_per_step.append(step.recorded)
        if step.deleted == 0 and not started:
            continue
        eta = float(window.step_sizes[j])
        applied = window.directions[j].to(device)
        started = True
        if len(step.retained) == 0:  # the retrain skips this step: G = eta D_l = w_{l-1} - w_l, H = I
            delta = delta + eta * applied
            continue
        at = window.history + j  # snaps[at] = w_{l-1}
        x = torch.as_tensor(remaining.features[step.retained], device=device).to(dtype)
        y = torch.as_tensor(remaining.labels[step.retained], device=device)
        phi = _RetainedBatch(model, cfg, x, y, stats)
        exact = phi.step_map(snaps[at]) if hvp == "exact" else None
        retained_dir = exact.direction.reshape(-1) if exact is not None else phi.direction(snaps[at])
        if bool(delta.any()):
            if exact is not None:
                product = _hvp_exact(exact, delta)
            else:
                product = _hvp_lbfgs(phi, snaps, at, m, retained_dir, delta)
            delta = delta - eta * product
            stats.hvp_products += 1
        if step.deleted:
            delta = delta + eta * (applied - retained_dir)
    return delta, stats


def _hvp_exact(step_map: StepMap, v: torch.Tensor) -> torch.Tensor:
    """J^R_l v, the Jacobian-vector product of the retained step map (closed form for logistic regression)."""
    return step_map.jvp(v[None])[0]


def _hvp_lbfgs(
    phi: _RetainedBatch, snaps: torch.Tensor, at: int, m: int, grad_at: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """J^R_l v by the corrected Algorithm 4 with the pairs of phi_l at snaps[at-m .. at].

    The pairs use the gradients of the SAME retained batch at the (up to) m snapshots before w_{l-1}.
    Approximating the mean-gradient Jacobian (1/n_R) H-bar instead of Algorithm 4's sum H-bar scales Y
    by 1/n_R, which scales B by exactly 1/n_R (the BFGS update is homogeneous of degree one in Y), so
    H(l) v = v - eta_l B v is the same as Algorithm 4's output. Without a usable pair (too little
    history, or no positive curvature) the exact product is taken and counted as a fallback.
    """
    lo = max(0, at - m)
    approx = None
    if lo < at:
        older = [phi.direction(snaps[i]) for i in range(lo, at)]
        s, y = secant_pairs(snaps[lo : at + 1], torch.stack([*older, grad_at]))
        approx = CompactLBFGS.from_pairs(s, y)
        phi.stats.lbfgs_pairs_dropped += approx.dropped if approx is not None else at - lo
    if approx is None:
        phi.stats.lbfgs_fallbacks += 1
        return _hvp_exact(phi.step_map(snaps[at]), v)
    return approx.matvec(v)


__all__ = ["ReplayStats", "WindowStep", "forward_correction", "split_window"]
