"""The window settings of Mini-Unlearning (besides the recorded SGD's) and their bounds.

``k`` is the number of replayed SGD steps (the window of Eq. 10), ``m`` the L-BFGS memory of
Algorithm 4, ``hvp`` how the Hessian-vector products H(l) Delta are taken, ``dtype`` the floating-point
type of training and of the recorded window, and ``max_deletion_fraction`` the deletion ratio per budget
epoch used when the budget policy sets none. Every bound below is enforced by
:meth:`WindowConfig.from_config` / :func:`check_fraction` (so by ``check_config`` at registration and by
``fit``) and declared, with the same constants, by :func:`window_hyperparameters`.

The recorded window of a model with p parameters holds (k + m + 1) snapshots and k step directions, i.e.
(2k + m + 1) p floats, and a request takes up to k - 1 Hessian-vector products (plus m gradients per
step in ``lbfgs`` mode). The upper bounds keep a registration from asking for a window no store holds:

- :data:`MAX_K` = 10,000 replayed steps: five times the 2,000 steps the data-derived defaults aim for
  (``unlearning.sgd_defaults``), so the full-horizon replay (k >= T, which closes the gap to the retrain
  almost entirely, digest 004 section 8) stays available for those runs; a k above a run's T replays
  all T steps.
- :data:`MAX_M` = 50 curvature pairs: the paper uses m = 2, L-BFGS practice 3 to 20; every pair costs
  one more stored snapshot and one more gradient of each replayed batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from unlearning.errors import InvalidConfigError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.validation import integer_at_least

HvpMode = Literal["exact", "lbfgs"]
HVP_MODES: tuple[str, ...] = ("exact", "lbfgs")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
MAX_K = 10_000  # replayed steps; see the module docstring
MAX_M = 50  # L-BFGS curvature pairs; see the module docstring
DEFAULT_MAX_DELETION_FRACTION = 0.15  # the largest unlearning ratio the paper evaluates (Sec. 5.1)

_K_NAME = "k (the number of replayed steps)"
_M_NAME = "m (the L-BFGS memory)"


def _integer_between(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int, if it is an integer (not a bool) in [low, high]."""
    checked = integer_at_least(name, value, low)
    if checked > high:
        raise InvalidConfigError(f"{name} must be at most {high:,}, got {value!r}")
    return checked


@dataclass(frozen=True)
class WindowConfig:
    """k (window length, 1..MAX_K), m (L-BFGS memory, 1..MAX_M), how Hessian-vector products are taken,
    and the dtype."""

    k: int
    m: int
    hvp: HvpMode
    dtype: torch.dtype

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WindowConfig:
        """The window settings of a (merged) configuration; :class:`InvalidConfigError` when one is out of
        range or of the wrong type."""
        k = _integer_between(_K_NAME, config["k"], 1, MAX_K)
        m = _integer_between(_M_NAME, config["m"], 1, MAX_M)
        hvp = hvp_mode(config["hvp"])
        dtype = config["dtype"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise InvalidConfigError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        return cls(k=k, m=m, hvp=hvp, dtype=DTYPES[dtype])


def hvp_mode(value: object) -> HvpMode:
    """``value`` if it names a Hessian-vector product mode of :data:`HVP_MODES`."""
    if value == "exact":
        return "exact"
    if value == "lbfgs":
        return "lbfgs"
    raise InvalidConfigError(f"hvp must be one of {list(HVP_MODES)}, got {value!r}")


def check_fraction(value: Any) -> float:
    """``max_deletion_fraction`` as a float, if it lies in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) <= 1:
        raise InvalidConfigError(f"max_deletion_fraction must lie in (0, 1], got {value!r}")
    return float(value)


def window_hyperparameters() -> tuple[HyperParameter, ...]:
    """The declarations of the keys :class:`WindowConfig` and :func:`check_fraction` check."""
    return (
        HyperParameter("k", "integer", "Replayed SGD steps at the end of training (the window)", minimum=1,
                       maximum=MAX_K),
        HyperParameter("m", "integer", "L-BFGS memory (curvature pairs kept)", minimum=1, maximum=MAX_M),
        HyperParameter("hvp", "string", "Hessian-vector products: exact, or the L-BFGS approximation",
                       choices=HVP_MODES),
        HyperParameter("dtype", "string", "Floating-point type of training and the recorded window",
                       choices=tuple(DTYPES)),
        HyperParameter("max_deletion_fraction", "number", "Deletions per budget epoch, as a fraction of its "
                       "training set, when the budget policy sets no limit of its own", minimum=0,
                       exclusive_minimum=True, maximum=1),
    )


__all__ = [
    "DEFAULT_MAX_DELETION_FRACTION",
    "DTYPES",
    "HVP_MODES",
    "MAX_K",
    "MAX_M",
    "HvpMode",
    "WindowConfig",
    "check_fraction",
    "hvp_mode",
    "window_hyperparameters",
]
