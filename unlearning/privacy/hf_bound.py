"""The Hessian-free method's rigorous approximation-error bound (Qiao et al., App. C.4, Eq. 56).

For one deleted sample u, the Hessian-free unlearned model ``w_bar = w + a^{-u}`` differs from the SGD
replay without u by at most (paper Eq. 56, digest section 3.2)::

    ||w^{-u} - w_bar^{-u}|| <= (2 eta^2 G / (1-q)) * [ (rho^T - q^T)/(rho - q) - (rho^T - q^{2T})/(rho - q^2) ]
                             + (2 eta G / |B|) * (rho^T - q^T)/(rho^B - q^B) * rho^{B-b(u)-1} * q^{b(u)}

where the fractions are the finite geometric sums they come from (Eq. 56 before simplification)::

    S(r, s, T) = sum_{k=0}^{T-1} r^{T-1-k} s^k                       (= (r^T - s^T)/(r - s) for r != s)
    term1 = (2 eta^2 G/(1-q)) * [ S(rho, q, T) - S(rho, q^2, T) ]
          = 2 eta^2 G * sum_{k=0}^{T-1} rho^{T-1-k} * q^k * (1 - q^k)/(1 - q)
    term2 = (2 eta G/|B|) * sum_{steps t = eB + b(u) < T} q^t * rho^{T-1-t}
          = (2 eta G/|B|) * [ sum_{e=0}^{E_eff-1} rho^{B(E_eff-1-e)} q^{Be} ] * rho^{B-b-1} q^b   (T = E_eff B)

- ``term1`` is the accumulated Taylor remainder ("C1"): at step k the linearisation misses at most
  ``eta_k ||w^{-u}_k - w_k||`` with ``eta_k = eta q^k`` and ``||w^{-u}_k - w_k|| <= 2 eta G (1-q^k)/(1-q)``
  (Lemma 2), and the miss is then contracted by ``rho`` for the ``T-1-k`` remaining steps.
- ``term2`` is from using ``grad l(w; u)`` in place of ``grad l(w^{-u}; u)`` at each step t where u is in the
  batch ("C2"): at most ``2 G eta_t / |B|``, contracted by ``rho^{T-1-t}``.

We evaluate the sums term by term in log space (log-sum-exp). This is exact for ``rho == q`` and
``rho == q^2`` where the closed forms divide by zero, needs no ``q < rho`` case split, does not cancel
catastrophically when ``q`` is close to 1 (``(1-q^k)/(1-q)`` is formed as ``expm1(k ln q)/expm1(ln q)``),
and overflows only to ``inf`` (a vacuous bound, e.g. ``rho > 1`` over many steps), never to NaN. Cost is
O(T) time and memory.

Parameters, as the paper names them:

- ``eta``: the initial step size ``eta_0``; step t uses ``eta_t = eta q^t`` (geometric decay per update).
- ``q``: the per-step decay, ``0 < q < 1``.
- ``G``: the bound on every per-sample gradient norm along both trajectories (Lemma 2).
- ``rho``: the contraction, ``max_t ||I - eta_t H_t||_2`` over the trajectory (Lemma 3); it must be < 1
  for the bound to be small, but any ``rho >= 0`` is accepted.
- ``batch_size``: ``|B|``, the (maximum) minibatch size that divides u's gradient.
- ``batches_per_epoch``: ``B = ceil(n/|B|)``.
- ``total_steps``: ``T``, the number of SGD steps actually run. The paper writes ``T = EB + B`` because it
  indexes epochs ``0..E`` (``E+1`` epochs); here you pass the real step count. ``E_eff = ceil(T/B)``; a last
  partial epoch is allowed and contributes exactly the steps that were run.
- ``position``: ``b(u)``, u's batch index within each epoch (the paper's exposition keeps it fixed across
  epochs).
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy.special import logsumexp

from unlearning.errors import InvalidConfigError

__all__ = ["hf_per_sample_bound", "hf_total_bound"]

_CHUNK = 1 << 20  # steps per vectorised chunk of the term-1 sum
_LOG_MAX = math.log(np.finfo(np.float64).max)


# --------------------------------------------------------------------------------------------------
# validation


def _real(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidConfigError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if math.isnan(result):
        raise InvalidConfigError(f"{name} must be a number, got NaN")
    return result


def _integer(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidConfigError(f"{name} must be an integer, got {value!r}")
    result = int(value)
    if result < minimum:
        raise InvalidConfigError(f"{name} must be >= {minimum}, got {result}")
    return result


def _validate(
    eta: float, q: float, G: float, rho: float, batch_size: int, batches_per_epoch: int, total_steps: int
) -> tuple[float, float, float, float, int, int, int]:
    eta = _real("eta", eta)
    if not (math.isfinite(eta) and eta > 0):
        raise InvalidConfigError(f"eta (the initial step size) must be finite and > 0, got {eta!r}")
    q = _real("q", q)
    if q == 1.0:
        raise InvalidConfigError(
            "the Eq. 56 bound needs a decaying step size q < 1 (got q = 1: its 1/(1-q) factor is infinite)"
        )
    if not (0.0 < q < 1.0):
        raise InvalidConfigError(f"q (the per-step step-size decay) must lie in (0, 1), got {q!r}")
    G = _real("G", G)
    if not (math.isfinite(G) and G >= 0):
        raise InvalidConfigError(f"G (the per-sample gradient-norm bound) must be finite and >= 0, got {G!r}")
    rho = _real("rho", rho)
    if not (math.isfinite(rho) and rho >= 0):
        raise InvalidConfigError(
            f"rho (the contraction ||I - eta_t H_t||) must be finite and >= 0, got {rho!r}"
        )
    batch_size = _integer("batch_size", batch_size, 1)
    batches_per_epoch = _integer("batches_per_epoch", batches_per_epoch, 1)
    total_steps = _integer("total_steps", total_steps, 1)
    return eta, q, G, rho, batch_size, batches_per_epoch, total_steps


# --------------------------------------------------------------------------------------------------
# log-space sums


def _log_pow(log_base: float, exponents: NDArray[np.float64]) -> NDArray[np.float64]:
    """``exponents * log(base)`` with ``0^0 = 1`` (log 0 = -inf times exponent 0 gives 0, not NaN)."""
    if math.isinf(log_base):
        return np.where(exponents == 0, 0.0, -np.inf)
    return exponents * log_base


# The two sums below are pure functions of their scalars that every update of a model (and the check of its
# certificate) asks for with the same arguments; each costs about a quarter of a millisecond over every
# step, so they are kept.


@lru_cache(maxsize=256)
def _log_term1_sum(log_q: float, log_rho: float, steps: int) -> float:
    """``log sum_{k=0}^{T-1} rho^{T-1-k} q^k (1-q^k)/(1-q)`` (the k = 0 term is 0)."""
    log_one_minus_q = math.log(-math.expm1(log_q))
    parts: list[float] = []
    for start in range(1, steps, _CHUNK):
        k = np.arange(start, min(start + _CHUNK, steps), dtype=np.float64)
        with np.errstate(divide="ignore"):
            log_ratio = np.log(-np.expm1(k * log_q)) - log_one_minus_q  # log((1-q^k)/(1-q)), k >= 1
        parts.append(float(logsumexp(_log_pow(log_rho, steps - 1 - k) + k * log_q + log_ratio)))
    if not parts:
        return -math.inf
    return float(logsumexp(np.asarray(parts)))


@lru_cache(maxsize=256)
def _log_term2_sum(log_q: float, log_rho: float, per_epoch: int, steps: int, position: int | None) -> float:
    """``log sum_{t = eB + b < T} q^t rho^{T-1-t}``.

    With ``position=None`` each epoch takes its own worst in-epoch position (see :func:`hf_per_sample_bound`).
    """
    epochs = -(-steps // per_epoch)
    e = np.arange(epochs, dtype=np.float64)[:, None]
    b = np.arange(per_epoch, dtype=np.float64)[None, :] if position is None else np.array([[float(position)]])
    t = e * per_epoch + b
    with np.errstate(invalid="ignore"):
        log_terms = np.where(
            t < steps, t * log_q + _log_pow(log_rho, np.maximum(steps - 1 - t, 0.0)), -np.inf
        )
    per_epoch_worst = log_terms.max(axis=1)
    if not np.any(np.isfinite(per_epoch_worst)):
        return -math.inf  # u is never in a batch within the steps run
    return float(logsumexp(per_epoch_worst))


def _exp(log_value: float) -> float:
    if log_value > _LOG_MAX:
        return math.inf
    return math.exp(log_value)


# --------------------------------------------------------------------------------------------------
# public


def hf_per_sample_bound(
    eta: float,
    q: float,
    G: float,
    rho: float,
    batch_size: int,
    batches_per_epoch: int,
    total_steps: int,
    position: int | None = None,
) -> float:
    """Per-sample approximation-error bound of Hessian-free unlearning (paper Eq. 56, digest section 3.2).

    ``||w^{-u}_T - (w_T + a^{-u})|| <= term1 + term2`` with (see the module docstring for the derivation)::

        term1 = (2 eta^2 G/(1-q)) * [ S(rho, q, T) - S(rho, q^2, T) ],   S(r, s, T) = sum_{k<T} r^{T-1-k} s^k
        term2 = (2 eta G/|B|) * sum_{e=0}^{E_eff-1} rho^{B(E_eff-1-e)} q^{Be} * rho^{B-b-1} q^b      (T = E_eff B)

    which for ``rho != q``, ``T = E_eff B`` is the paper's closed form
    ``(2 eta^2 G/(1-q)) [(rho^T-q^T)/(rho-q) - (rho^T-q^{2T})/(rho-q^2)]
    + (2 eta G/|B|) (rho^T-q^T)/(rho^B-q^B) rho^{B-b-1} q^b``. ``T = total_steps`` is the number of SGD
    steps actually run (the paper's ``T = EB + B`` counts its ``E+1`` epochs ``0..E``); if it is not a
    multiple of ``B = batches_per_epoch``, ``E_eff = ceil(T/B)`` and term2 sums only the steps
    ``t = eB + b < T`` that were run.

    ``position`` is ``b(u)`` in ``[0, B-1]``, taken as the same in every epoch, as in the paper. ``None``
    gives the worst case over positions: every epoch takes its own worst position, which is also correct
    when batches are reshuffled each epoch. For full epochs this equals ``max_b`` of the fixed-position
    bound, because each epoch's term scales as ``(q/rho)^b``: ``b = 0`` is worst when ``q < rho``,
    ``b = B-1`` when ``q > rho``. In a last partial epoch it can be slightly larger.

    ``q = 1`` (constant step size) raises :class:`InvalidConfigError`: Eq. 56 is stated for ``q < 1`` and its
    ``1/(1-q)`` prefactor is infinite there. (The limit of ``term1`` is finite, ``2 eta^2 G sum_k rho^{T-1-k} k``,
    but we do not certify outside the paper's statement.) ``G = 0`` gives 0. The result is ``inf`` when it
    overflows float64, for example ``rho > 1`` over many steps. That is a vacuous bound, and calibrating noise
    from it must fail.
    """
    eta, q, G, rho, batch_size, batches_per_epoch, total_steps = _validate(
        eta, q, G, rho, batch_size, batches_per_epoch, total_steps
    )
    if position is not None:
        position = _integer("position", position, 0)
        if position >= batches_per_epoch:
            raise InvalidConfigError(
                f"position (the in-epoch batch index b(u)) must lie in [0, {batches_per_epoch - 1}], "
                f"got {position}"
            )
    if G == 0.0:
        return 0.0
    log_q = math.log(q)
    log_rho = math.log(rho) if rho > 0 else -math.inf
    log_term1 = math.log(2.0 * G) + 2.0 * math.log(eta) + _log_term1_sum(log_q, log_rho, total_steps)
    log_term2 = (
        math.log(2.0 * G)
        + math.log(eta)
        - math.log(batch_size)
        + _log_term2_sum(log_q, log_rho, batches_per_epoch, total_steps, position)
    )
    return _exp(log_term1) + _exp(log_term2)


def hf_total_bound(per_sample_bound: float, cumulative_deletions: int) -> float:
    """Bound for ``m`` deleted samples: ``m * per_sample_bound``.

    Each deleted sample's per-sample bound (Eq. 56, at its worst position) bounds that sample's error.
    The approximators add up (Theorem 1, additivity), so the triangle inequality gives the sum. This is the
    digest's section 3.2 [INFERENCE]: the paper itself states only ``O(eta G m rho^T)`` (Theorem 4).
    Interaction terms between deleted samples are outside the linearisation, as they are in the paper.
    ``m = 0`` gives 0 even for an infinite per-sample bound.
    """
    bound = _real("per_sample_bound", per_sample_bound)
    if bound < 0:
        raise InvalidConfigError(f"per_sample_bound must be >= 0, got {bound!r}")
    m = _integer("cumulative_deletions", cumulative_deletions, 0)
    if m == 0:
        return 0.0
    return m * bound
