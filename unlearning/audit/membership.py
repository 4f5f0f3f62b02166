"""Membership inference against a released model: can an attacker tell forgotten samples from samples the
model never saw?

The attack is the loss-threshold attack of Yeom et al. (2018, "Privacy Risk in Machine Learning:
Analyzing the Connection to Overfitting", section 3.2): a sample is guessed to be a member when the
model's loss on it is below a threshold. Over every threshold this gives a ROC curve; we report

- ``auc``: the area under it, ``P(l(m) < l(n)) + P(l(m) = l(n)) / 2`` for a member ``m`` and a
  non-member ``n`` drawn from the two sets (the Mann-Whitney statistic over ``n_m n_n``); 0.5 means the
  attacker does no better than a coin;
- ``advantage``: Yeom et al.'s membership advantage ``max_t (TPR(t) - FPR(t))`` (their Definition 4 with
  the best threshold), in [0, 1].

How it is used for unlearning (DESIGN.md, "Invariants worth tests"): the forgotten samples play the
members and held-out samples the non-members. On the original model the forgotten samples WERE
members, so an overfitted model gives an AUC above 0.5; on the exact retrain they were never seen,
so the AUC is 0.5 up to sampling noise; a good unlearning update gives the AUC of the retrain. The
figure that matters is therefore ``|auc(unlearned) - auc(retrained)|``, not the distance to 0.5: a
retrain can sit above 0.5 when the forgotten samples differ in distribution from the held-out ones.

The losses come from the caller (any model, any loss), so this module is the same for every method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from unlearning.errors import EmptyRequestError, InvalidConfigError


@dataclass(frozen=True)
class AttackResult:
    """The loss-threshold attack's AUC and best advantage over the given members and non-members."""

    auc: float
    advantage: float
    num_members: int
    num_nonmembers: int


def _losses(values: np.ndarray | list[float], what: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64).reshape(-1)
    if out.size == 0:
        raise EmptyRequestError(f"the membership attack needs at least one {what} loss")
    if not np.isfinite(out).all():
        raise InvalidConfigError(f"{what} losses must be finite numbers")
    return out


def loss_attack(
    member_losses: np.ndarray | list[float], nonmember_losses: np.ndarray | list[float]
) -> AttackResult:
    """The loss-threshold attack (Yeom et al. 2018) separating ``member_losses`` from ``nonmember_losses``.

    The attack's score is ``-loss`` (a low loss says "member"), so ``auc = roc_auc(labels, -losses)``
    with label 1 for members, and ``advantage = max(TPR - FPR)`` over the same ROC curve.
    """
    members = _losses(member_losses, "member")
    nonmembers = _losses(nonmember_losses, "non-member")
    labels = np.concatenate([np.ones(members.size), np.zeros(nonmembers.size)])
    scores = -np.concatenate([members, nonmembers])
    fpr, tpr, _ = roc_curve(labels, scores)
    return AttackResult(
        auc=float(roc_auc_score(labels, scores)),
        advantage=float(max(0.0, np.max(tpr - fpr))),
        num_members=int(members.size),
        num_nonmembers=int(nonmembers.size),
    )


__all__ = ["AttackResult", "loss_attack"]
