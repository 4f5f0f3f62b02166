"""The precision the per-sample vectors a^{-u} are kept in (the ``vector_dtype`` hyperparameter).

Stage II computes the vectors in float32; a state keeps them, and the service stores them (hot store and
statistics buckets), in ``vector_dtype``: ``float32`` (the default), or ``float16`` / ``bfloat16`` for half
the bytes. Every read upcasts: sums over vectors (a forget's, the per-owner sums) accumulate in float32 and
a stored per-owner sum is the float32 sum rounded once. Rounding is round-to-nearest-even, so a state's
vectors, and every forget from them, stay deterministic.

What the rounding does to the guarantees:

- ``audited``: the fit-time probe forgets with the rounded vectors, so its measured distance to the replay
  retrain includes the rounding;
- ``certified`` with the gradient residual: unaffected. The check runs on the weights actually released,
  in float64 over the remaining rows (``||grad F_{D'}(w)|| + slack)/l2 <= Delta_max``), whatever the
  starting point ``w + sum a^{-u}`` was; rounded vectors can only cost more Newton steps;
- ``certified`` with ``eq56``: the Eq. 56 bound is about the SGD replay and the exact recursion; it does
  not cover the rounding, so half-precision vectors are refused there (:func:`check_certified_precision`).
"""

from __future__ import annotations

import torch

from unlearning.errors import InvalidConfigError

VECTOR_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DEFAULT_VECTOR_DTYPE = "float32"


def vector_dtype(name: object) -> torch.dtype:
    """The torch dtype named ``name``; :class:`InvalidConfigError` for any other value."""
    if not isinstance(name, str) or name not in VECTOR_DTYPES:
        raise InvalidConfigError(f"vector_dtype must be one of {list(VECTOR_DTYPES)}, got {name!r}")
    return VECTOR_DTYPES[name]


def itemsize(name: object) -> int:
    """Bytes per value of a vector kept in ``name``."""
    return vector_dtype(name).itemsize


def check_certified_precision(name: object, bound: object, eq56_name: str) -> None:
    """Refuse half-precision vectors for a certified release whose noise is calibrated by ``eq56_name``
    (module docstring): that bound does not account for the rounding."""
    if bound == eq56_name and vector_dtype(name) != torch.float32:
        raise InvalidConfigError(
            f"a certified hessian_free model with certified_bound {eq56_name!r} keeps its vectors in float32: the "
            f"Eq. 56 bound does not cover the rounding of vector_dtype {name!r}; use certified_bound "
            "'gradient_residual' (checked on the released weights, so rounding is covered) or vector_dtype 'float32'"
        )


def stored(vectors: torch.Tensor, name: object) -> torch.Tensor:
    """``vectors`` as a state keeps them: rounded to ``name`` (no copy when already of that dtype)."""
    return vectors.to(vector_dtype(name))


__all__ = [
    "DEFAULT_VECTOR_DTYPE",
    "VECTOR_DTYPES",
    "check_certified_precision",
    "itemsize",
    "stored",
    "vector_dtype",
]
