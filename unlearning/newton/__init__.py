"""Certified removal by a Newton step for L2-regularised logistic regression with objective perturbation.

Shared core of the ``newton_removal`` (tabular, Guo et al. 2020), ``graph_node_newton`` (SGC/GPR,
digest 001) and ``graph_classification_newton`` (scattering transform, digest 000) methods, one module
per concern, each importing only those above it:

- :mod:`~unlearning.newton.objective`: the model and its loss on a design matrix (targets, noise,
  design operators, the operator-norm bound);
- :mod:`~unlearning.newton.solvers`: the Hessian solves (CG, Cholesky, Woodbury) and the Newton-CG
  optimiser that trains;
- :mod:`~unlearning.newton.step`: the removal step ``W + H^{-1} Delta`` and the data-dependent bound on
  the gradient residual it leaves (its charge);
- :mod:`~unlearning.newton.config`: the hyperparameters every Newton method shares;
- :mod:`~unlearning.newton.budget`: the residual budget, the training that opens a budget epoch, and the
  epoch's typed ledger (:class:`NewtonAccounting`, stored as ``MethodState.accounting``);
- :mod:`~unlearning.newton.certificate`: a release's certificate and its verification;
- :mod:`~unlearning.newton.method`: the released model, predictions and :class:`NewtonMethodBase`, whose
  ``forget`` is the one removal sequence the methods parametrise.

Nothing here imports the method modules (``unlearning.methods.newton_tabular`` and the graph methods):
they import this package.
"""

from __future__ import annotations

from unlearning.newton.budget import (
    OP_NORM_SOURCES,
    EpochStart,
    NewtonAccounting,
    OpNormSource,
    c0,
    integer_spec,
    newton_progress,
    number_spec,
    residual_budget,
    start_epoch,
    text_spec,
)
from unlearning.newton.certificate import newton_certificate, step_inputs, verify_newton_certificate
from unlearning.newton.config import FAMILIES, OP_NORMS, NewtonConfig, newton_hyperparameters
from unlearning.newton.method import (
    NewtonMethodBase,
    NewtonModelSpec,
    Removal,
    Reopen,
    columns_for,
    one_source,
    predict_labels,
    released_weight_matrix,
)
from unlearning.newton.objective import (
    DTYPE,
    EPS,
    DenseDesign,
    Design,
    Objective,
    draw_noise,
    operator_norm_upper,
    signed_targets,
)
from unlearning.newton.solvers import (
    SOLVERS,
    LiveGram,
    Solver,
    TrainResult,
    conjugate_gradient,
    pick_solver,
    solve_hessian,
    tracked_cg,
    train_perturbed,
)
from unlearning.newton.step import (
    BOUND_VARIANTS,
    GAMMA_LOGISTIC,
    GAMMA_PAPER,
    BoundVariant,
    StepReport,
    bound_per_column,
    charge_from,
    gradient_difference,
    newton_step,
    step_terms,
)

__all__ = [
    "BOUND_VARIANTS",
    "DTYPE",
    "EPS",
    "FAMILIES",
    "GAMMA_LOGISTIC",
    "GAMMA_PAPER",
    "OP_NORMS",
    "OP_NORM_SOURCES",
    "SOLVERS",
    "BoundVariant",
    "DenseDesign",
    "Design",
    "EpochStart",
    "LiveGram",
    "NewtonAccounting",
    "NewtonConfig",
    "NewtonMethodBase",
    "NewtonModelSpec",
    "Objective",
    "OpNormSource",
    "Removal",
    "Reopen",
    "Solver",
    "StepReport",
    "TrainResult",
    "bound_per_column",
    "c0",
    "charge_from",
    "columns_for",
    "conjugate_gradient",
    "draw_noise",
    "gradient_difference",
    "integer_spec",
    "newton_certificate",
    "newton_hyperparameters",
    "newton_progress",
    "newton_step",
    "number_spec",
    "one_source",
    "operator_norm_upper",
    "pick_solver",
    "predict_labels",
    "released_weight_matrix",
    "residual_budget",
    "signed_targets",
    "solve_hessian",
    "start_epoch",
    "step_inputs",
    "step_terms",
    "text_spec",
    "tracked_cg",
    "train_perturbed",
    "verify_newton_certificate",
]
