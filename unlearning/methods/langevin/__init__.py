"""Stochastic-gradient Langevin unlearning (SGLU; Chien, Wang, Chen, Li 2024; digest 003): the ``langevin``
method.

fit     projected noisy mini-batch SGD (PNSGD, Algorithm 1) on L2-regularised logistic regression over one
        fixed seeded partition of the training slots into N mini-batches, cycled in the same order every
        epoch:  W <- Pi_{C_R}( W - eta [ (1/b) sum_{i in B_j} clip_M(grad l_i(W)) + lam W ] + sqrt(2 eta) sigma xi ),
        run for T epochs, T the burn-in after which the law is within W_inf 2R c^(TN) (Lemma 3.6) of the
        stationary law, a negligible fraction of the first request's distance Z_B.
forget  K more noisy epochs of exactly the same PNSGD, same partition and order, on the remaining data
        minus the request, from the current (noisy) weights with fresh noise; K is the least number of
        epochs the accountant (:mod:`unlearning.privacy.langevin`) needs for the model's (epsilon, delta),
        the W_inf state Z following the corrected Theorem 3.11 recursion.

The modules:

- :mod:`.problem`       the model: (multinomial) logistic regression with clipping, its constants L, M;
- :mod:`.batching`      the seeded partition of the samples into N batches of b slots (null-padded);
- :mod:`.noisy_sgd`     the PNSGD chain itself (Algorithm 1) and its seeds;
- :mod:`.defaults`      the feature bound, L2 coefficient and burn-in budget derived from the data;
- :mod:`.config`        hyperparameters, defaults, checks and their resolution into the chain's constants;
- :mod:`.accounting`    the typed accounting a model version records (same JSON keys as stored versions);
- :mod:`.certificates`  what each release certifies, and the verification of a certificate;
- :mod:`.method`        the :class:`Langevin` method class (fit, forget, must_retrain, budget, verify),
                        registered on import.
"""

from unlearning.methods.langevin.method import Langevin

__all__ = ["Langevin"]
