"""The SGD update map of one training step and its derivatives (the heart of Stages I and II).

Training applies ``w_{t+1} = w_t - eta_t * D_t(w_t)`` where ``D_t`` is the (optionally clipped) mean
gradient of the per-sample loss ``l(w; z) = CE(f(w, x), y) + (l2/2) ||w||^2`` over the batch B_t,
normalised by ``|B_t|``. Stage II of the Hessian-free method needs, for the *same* map ``D_t``:

- ``jvp(V)  = J_t V``   with ``J_t = dD_t/dw`` (the Hessian when no clipping is active),
- ``vjp(V)  = J_t^T V`` (for the operator norm of ``I - eta_t J_t``),
- ``injections()``: row i is ``|B_t| * dD_t/ds_i``, the linearised change of ``D_t`` when sample i's
  weight ``s_i`` in the batch goes from 1 to 0, i.e. what removing sample i from this batch changes.

Because every one of these differentiates exactly the map that training applied, clipping never
creates the mismatch of the authors' code (which clips per sample in Stage II but per batch in
training). Clipping modes:

- ``none``:       D = (1/N) sum_i g_i
- ``batch``:      D = c(g) g with g = (1/N) sum_i g_i and c(g) = min(1, C/||g||)   (clip_grad_norm_)
- ``per_sample``: D = (1/N) sum_i c(g_i) g_i                                        (DP-SGD style)

where g_i = grad l(w; z_i) and N the batch normaliser (|B_t| of the *recorded* batch, also in the
replay-retrain, Eq. 5 of the paper). The Jacobian of v -> c(v) v is c(v)(I - v̂ v̂^T) when the clip
is active (||v|| > C) and I otherwise.

Two implementations: :class:`SoftmaxStepMap` (closed form for multinomial logistic regression:
matrix products only, no per-sample loop) and :class:`AutogradStepMap` (torch.func: vmap over
forward-over-reverse jvp, for any model).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch.func import grad, vjp, vmap

from unlearning.errors import InvalidConfigError
from unlearning.forward_mode import jvp  # torch.func.jvp, one thread at a time
from unlearning.models.flat import FlatModel

ClipMode = Literal["none", "batch", "per_sample"]
CLIP_MODES: tuple[ClipMode, ...] = ("none", "batch", "per_sample")


@dataclass(frozen=True)
class SGDConfig:
    """Plain mini-batch SGD with per-step geometric decay eta_t = lr * lr_decay^t (digest 002, 1.1)."""

    epochs: int = 15
    batch_size: int = 32
    lr: float = 0.05
    lr_decay: float = 0.995
    l2: float = 0.5
    clip_norm: float | None = 5.0
    clip_mode: ClipMode = "batch"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise InvalidConfigError(f"{name} must be an integer, got {getattr(self, name)!r}")
        for name in ("lr", "lr_decay", "l2"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int | float):
                raise InvalidConfigError(f"{name} must be a number, got {getattr(self, name)!r}")
        if self.epochs < 1 or self.batch_size < 1:
            raise InvalidConfigError(f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InvalidConfigError(f"lr must be a finite number > 0, got {self.lr}")
        if not 0 < self.lr_decay <= 1:
            raise InvalidConfigError(f"lr_decay must lie in (0, 1], got {self.lr_decay}")
        if not (self.l2 >= 0 and math.isfinite(self.l2)):
            raise InvalidConfigError(f"l2 must be a finite number >= 0, got {self.l2}")
        if self.clip_mode not in CLIP_MODES:
            raise InvalidConfigError(f"clip_mode must be 'none', 'batch' or 'per_sample', got {self.clip_mode!r}")
        if self.clip_mode != "none" and not (
            self.clip_norm is not None and self.clip_norm > 0 and math.isfinite(self.clip_norm)
        ):
            raise InvalidConfigError(f"clip_mode {self.clip_mode!r} needs a finite clip_norm > 0, got {self.clip_norm}")

    @property
    def clip(self) -> float:
        """The clipping threshold, +inf when clipping is off."""
        return math.inf if self.clip_mode == "none" or self.clip_norm is None else float(self.clip_norm)

    def step_size(self, t: int) -> float:
        return self.lr * self.lr_decay**t


class StepMap(Protocol):
    direction: torch.Tensor  # (d,) D_t(w_t)
    grad_norms: torch.Tensor  # (b,) unclipped per-sample gradient norms ||g_i||
    clip_active: bool

    def jvp(self, v: torch.Tensor) -> torch.Tensor: ...

    def vjp(self, v: torch.Tensor) -> torch.Tensor: ...

    def injections(self) -> torch.Tensor: ...

    def propagate_(self, v: torch.Tensor, eta: float) -> None: ...


def _clip_scale(norm: torch.Tensor, clip: float) -> torch.Tensor:
    return torch.clamp(clip / norm.clamp_min(1e-30), max=1.0)


class SoftmaxStepMap:
    """Closed form for multinomial logistic regression, theta of shape (C, D+1), x̃ = [x, 1].

    With P = softmax(X̃ theta^T) and R = P - Y, the per-sample gradient is g_i = r_i x̃_i^T + l2 theta
    and its Hessian acts as H_i V = (diag(p_i) - p_i p_i^T)(V x̃_i) x̃_i^T + l2 V (digest 002, 2.3).
    All products over k vectors are two matrix multiplications with the (b, D+1) batch.
    """

    def __init__(
        self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: SGDConfig,
        normalizer: int | None = None,
    ) -> None:
        b = x.shape[0]
        self.n_classes = num_classes
        self.cfg = cfg
        self.norm = float(normalizer if normalizer is not None else b)
        self.theta = w.view(num_classes, -1)
        self.xt = torch.cat([x.reshape(b, -1), torch.ones(b, 1, dtype=w.dtype, device=w.device)], dim=1)
        logits = self.xt @ self.theta.T
        self.p = torch.softmax(logits, dim=1)
        self.r = self.p - F.one_hot(y, num_classes).to(w.dtype)
        l2 = cfg.l2
        sq = (
            (self.r**2).sum(1) * (self.xt**2).sum(1)
            + 2 * l2 * (self.r * logits).sum(1)
            + l2**2 * (self.theta**2).sum()
        )
        self.grad_norms = sq.clamp_min(0).sqrt()
        clip = cfg.clip
        self.sample_scale = torch.ones(b, dtype=w.dtype, device=w.device)
        self.batch_scale = 1.0
        self.ghat: torch.Tensor | None = None  # batch mode: unit batch gradient when the clip is active
        self.active_rows = torch.zeros(0, dtype=torch.long, device=w.device)
        if cfg.clip_mode == "per_sample":
            self.sample_scale = _clip_scale(self.grad_norms, clip)
            self.active_rows = torch.nonzero(self.grad_norms > clip).flatten()
        g = self._weighted_grad(self.sample_scale)
        if cfg.clip_mode == "batch":
            gn = g.norm()
            if gn > clip:
                self.batch_scale = float(clip / gn)
                self.ghat = g / gn
        self.direction = (self.batch_scale * g).reshape(-1)
        self.clip_active = self.ghat is not None or self.active_rows.numel() > 0
        if self.active_rows.numel():
            self._prepare_per_sample_correction()

    def _weighted_grad(self, c: torch.Tensor) -> torch.Tensor:
        return ((c[:, None] * self.r).T @ self.xt + c.sum() * self.cfg.l2 * self.theta) / self.norm

    def _per_sample_grads(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        r, xt = (self.r, self.xt) if rows is None else (self.r[rows], self.xt[rows])
        return (r[:, :, None] * xt[:, None, :] + self.cfg.l2 * self.theta).reshape(r.shape[0], -1)

    def _hvp_sum(self, v: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """(1/N) sum_i c_i H_i V for V of shape (k, d)."""
        k = v.shape[0]
        vm = v.view(k, self.n_classes, -1)
        m = vm @ self.xt.T  # (k, C, b): V x̃_i
        pt = self.p.T  # (C, b)
        s = pt * m
        s = s - pt * s.sum(dim=1, keepdim=True)
        out = (s * c) @ self.xt  # (k, C, D+1)
        out = out + (c.sum() * self.cfg.l2) * vm
        return (out / self.norm).reshape(k, -1)

    def _prepare_per_sample_correction(self) -> None:
        rows = self.active_rows
        g = self._per_sample_grads(rows)
        ghat = g / self.grad_norms[rows, None]
        xt, p = self.xt[rows], self.p[rows]
        gm = ghat.view(-1, self.n_classes, xt.shape[1])
        m = (gm * xt[:, None, :]).sum(-1)  # (a, C): ĝ_i x̃_i
        s = p * m - p * (p * m).sum(1, keepdim=True)
        h = s[:, :, None] * xt[:, None, :] + self.cfg.l2 * gm  # H_i ĝ_i
        self.ps_ghat = ghat
        self.ps_h = h.reshape(rows.numel(), -1)
        self.ps_c = self.sample_scale[rows]

    def jvp(self, v: torch.Tensor) -> torch.Tensor:
        hv = self._hvp_sum(v, self.sample_scale)
        if self.active_rows.numel():
            coef = (v @ self.ps_h.T) * self.ps_c / self.norm  # (k, a): c_i <h_i, v> / N
            hv = hv - coef @ self.ps_ghat
        if self.ghat is not None:
            gh = self.ghat.reshape(-1)
            hv = self.batch_scale * (hv - (hv @ gh)[:, None] * gh)
        return hv

    def vjp(self, v: torch.Tensor) -> torch.Tensor:
        if self.ghat is not None:
            gh = self.ghat.reshape(-1)
            v = self.batch_scale * (v - (v @ gh)[:, None] * gh)
        out = self._hvp_sum(v, self.sample_scale)
        if self.active_rows.numel():
            coef = (v @ self.ps_ghat.T) * self.ps_c / self.norm
            out = out - coef @ self.ps_h
        return out

    def propagate_(self, v: torch.Tensor, eta: float, chunk_rows: int = 256) -> None:
        """v <- (I - eta J) v in place, in cache-sized row blocks.

        Without an active clip, (I - eta J) V = (1 - eta l2 sum(c)/N) V - (eta/N) (S * c) X̃, which is one
        GEMM for S and one in-place addmm per block: two passes over memory instead of eight.
        """
        if self.clip_active:
            for chunk in torch.split(v, chunk_rows):
                chunk -= eta * self.jvp(chunk)
            return
        pt = self.p.T
        beta = 1.0 - eta * self.cfg.l2 * float(self.sample_scale.sum()) / self.norm
        for chunk in torch.split(v, chunk_rows):
            rows = chunk.view(-1, self.xt.shape[1])  # (k*C, D+1)
            m = (rows @ self.xt.T).view(chunk.shape[0], self.n_classes, -1)
            sm = pt * m
            sm = (sm - pt * sm.sum(dim=1, keepdim=True)) * self.sample_scale
            rows.addmm_(sm.reshape(rows.shape[0], -1), self.xt, beta=beta, alpha=-eta / self.norm)

    def injections(self) -> torch.Tensor:
        g = self._per_sample_grads() * self.sample_scale[:, None]
        if self.ghat is not None:
            gh = self.ghat.reshape(-1)
            g = self.batch_scale * (g - (g @ gh)[:, None] * gh)
        return g


class BatchObjective:
    """The training map D(w) of one batch for any model, as a differentiable torch.func function."""

    def __init__(self, model: FlatModel, x: torch.Tensor, y: torch.Tensor, cfg: SGDConfig, normalizer: float) -> None:
        self.model, self.x, self.y, self.cfg, self.norm = model, x, y, cfg, normalizer

    def loss_one(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """l(w; z) = CE(f(w, x), y) + (l2/2) ||w||^2 for one sample."""
        logits = self.model.logits(w, x.unsqueeze(0))
        return F.cross_entropy(logits, y.unsqueeze(0)) + 0.5 * self.cfg.l2 * (w * w).sum()

    def per_sample_grads(self, w: torch.Tensor) -> torch.Tensor:
        return vmap(grad(self.loss_one), in_dims=(None, 0, 0))(w, self.x, self.y)

    def batch_loss(self, w: torch.Tensor) -> torch.Tensor:
        """(1/N) sum_i l(w; z_i), the L2 term inside every per-sample loss."""
        ce = F.cross_entropy(self.model.logits(w, self.x), self.y, reduction="sum")
        return (ce + 0.5 * self.cfg.l2 * self.x.shape[0] * (w * w).sum()) / self.norm

    def direction(self, w: torch.Tensor) -> torch.Tensor:
        """D(w): the (clipped) mean gradient, exactly as training applies it."""
        if self.cfg.clip_mode == "per_sample":
            gs = self.per_sample_grads(w)
            c = _clip_scale(gs.norm(dim=1), self.cfg.clip)
            return (c[:, None] * gs).sum(0) / self.norm
        g = grad(self.batch_loss)(w)
        if self.cfg.clip_mode == "batch":
            return _clip_scale(g.norm(), self.cfg.clip) * g
        return g


class AutogradStepMap:
    """Any model through torch.func: per-sample gradients by vmap(grad), J V by vmap over jvp(D)."""

    def __init__(
        self, model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, cfg: SGDConfig,
        normalizer: int | None = None, chunk_size: int = 64,
    ) -> None:
        self.w = w
        self.objective = BatchObjective(model, x, y, cfg, float(normalizer if normalizer is not None else x.shape[0]))
        self.chunk_size = chunk_size
        self.per_sample = self.objective.per_sample_grads(w)
        self.grad_norms = self.per_sample.norm(dim=1)
        clip = cfg.clip
        if cfg.clip_mode == "per_sample":
            self.sample_scale = _clip_scale(self.grad_norms, clip)
        else:
            self.sample_scale = torch.ones_like(self.grad_norms)
        g = (self.sample_scale[:, None] * self.per_sample).sum(0) / self.objective.norm
        self.batch_scale = 1.0
        self.ghat: torch.Tensor | None = None
        if cfg.clip_mode == "batch" and g.norm() > clip:
            self.batch_scale = float(clip / g.norm())
            self.ghat = g / g.norm()
        self.direction = self.batch_scale * g
        per_sample_active = cfg.clip_mode == "per_sample" and bool((self.grad_norms > clip).any())
        self.clip_active = self.ghat is not None or per_sample_active

    def _chunked(self, fn: Callable[[torch.Tensor], torch.Tensor], v: torch.Tensor) -> torch.Tensor:
        return torch.cat([vmap(fn)(chunk) for chunk in torch.split(v, self.chunk_size)], dim=0)

    def jvp(self, v: torch.Tensor) -> torch.Tensor:
        return self._chunked(lambda t: jvp(self.objective.direction, (self.w,), (t,))[1], v)

    def vjp(self, v: torch.Tensor) -> torch.Tensor:
        pullback = vjp(self.objective.direction, self.w)[1]
        return self._chunked(lambda t: pullback(t)[0], v)

    def propagate_(self, v: torch.Tensor, eta: float) -> None:
        for chunk in torch.split(v, self.chunk_size):
            chunk -= eta * self.jvp(chunk)

    def injections(self) -> torch.Tensor:
        g = self.per_sample * self.sample_scale[:, None]
        if self.ghat is not None:
            g = self.batch_scale * (g - (g @ self.ghat)[:, None] * self.ghat)
        return g


_CLOSED_FORM_FAMILIES = frozenset({"logistic_regression"})


def make_step_map(
    model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, cfg: SGDConfig,
    normalizer: int | None = None, closed_form: bool = True,
) -> StepMap:
    """The step map for ``model`` at ``w`` on batch (x, y); closed form where the family has one."""
    if closed_form and model.spec.family in _CLOSED_FORM_FAMILIES:
        return SoftmaxStepMap(w, x, y, model.spec.num_classes, cfg, normalizer)
    return AutogradStepMap(model, w, x, y, cfg, normalizer)


def sgd_direction(
    model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, cfg: SGDConfig, normalizer: int
) -> torch.Tensor:
    """D_t(w) alone (training and replay need no derivatives); zero for an empty batch."""
    if x.shape[0] == 0:
        return torch.zeros_like(w)
    if model.spec.family in _CLOSED_FORM_FAMILIES:
        return SoftmaxStepMap(w, x, y, model.spec.num_classes, cfg, normalizer).direction
    return BatchObjective(model, x, y, cfg, float(normalizer)).direction(w).detach()
