"""Hessian-free online certified unlearning (Qiao et al.; digest 002): the ``hessian_free`` method.

fit     Stage I + II: recorded SGD with the per-sample approximators a^{-u} of Eq. 10 computed fused with
        training (:func:`unlearning.training.train_recorded`).
forget  Stage III: w̄ <- w̄ + sum_{u in U} a^{-u} (Theorem 1, additivity; owners use their per-owner sums).

Release modes:

- ``certified`` (convex families: ``logistic_regression``, binary included), with ``certified_bound``
  ``gradient_residual`` (the default, :mod:`.certified`): sigma is fixed at registration from (epsilon,
  delta) and the sensitivity cap Delta_max; the fit polishes the SGD weights by Newton-CG in float64, and
  every deletion checks ``||grad F_{D'}(w)||/l2 <= Delta_max`` with one pass over the remaining rows,
  restoring it by Newton-CG (or an exact solve) when needed, before fresh noise: certified against the
  exact minimiser on the remaining rows. With ``eq56`` (:mod:`.eq56`) the noise is calibrated from the
  paper's Eq. 56 bound, which is vacuous on real data (the model ends near chance); kept to reproduce it.
- ``audited``: no noise; the certificate says ``empirical`` and carries a fit-time probe measured against
  the exact replay-retrain.

Modules: :mod:`.sgd` (recorded-SGD settings, shared with other SGD-trained methods), :mod:`.objective`
(the float64 objective and Newton-CG), :mod:`.certified`, :mod:`.eq56`, :mod:`.accounting` (the typed
accounting), :mod:`.precision` (the dtype the vectors are kept in, ``vector_dtype``) and :mod:`.method`
(the method itself, registered on import).
"""

from unlearning.methods.hessian_free.accounting import GradientResidualAccount, HFAccounting, Work
from unlearning.methods.hessian_free.certified import ResidualAudit
from unlearning.methods.hessian_free.eq56 import per_sample_bound_from
from unlearning.methods.hessian_free.method import (
    HessianFree,
    audit_residual,
    certified_state,
    state_from_record,
)
from unlearning.methods.hessian_free.sgd import (
    MAX_BATCH_SIZE,
    MAX_CLIP_NORM,
    MAX_EPOCHS,
    MAX_L2,
    MAX_LR,
    MAX_RHO_ITERATIONS,
    SGD_RULE,
    check_sgd_config,
    model_spec_for,
    sgd_config,
    sgd_hyperparameters,
)

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_CLIP_NORM",
    "MAX_EPOCHS",
    "MAX_L2",
    "MAX_LR",
    "MAX_RHO_ITERATIONS",
    "SGD_RULE",
    "GradientResidualAccount",
    "HFAccounting",
    "HessianFree",
    "ResidualAudit",
    "Work",
    "audit_residual",
    "certified_state",
    "check_sgd_config",
    "model_spec_for",
    "per_sample_bound_from",
    "sgd_config",
    "sgd_hyperparameters",
    "state_from_record",
]
