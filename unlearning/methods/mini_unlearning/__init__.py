"""Mini-Unlearning (Huang et al., paper 004; digest /work/shared/papers/digests/004_mini_unlearning.md).

The unlearned model is the trained one plus a first-order replay of the last k SGD steps without the
deleted samples (Eq. 10): w* = w_T + Delta, Delta = sum_{j=1..k} H(T) ... H(T-j+2) G(T-j+1). The package:

- :mod:`.trajectory`: plain SGD that records its last k + m + 1 iterates, the window's batches and step
  directions (what ``fit`` stores), and the exact retraining counterfactual of Eq. 2;
- :mod:`.correction`: G(l), H(l) and the forward recursion Delta <- G(l) + H(l) Delta of Eq. 10, with
  exact or L-BFGS (corrected Algorithm 4) Hessian-vector products;
- :mod:`.config`: the window settings (k, m, hvp, dtype, max_deletion_fraction) and their bounds;
- :mod:`.accounting`: the typed ``MethodState.accounting`` of the method;
- :mod:`.method`: the ``mini_unlearning`` method (fit, forget, budget, certificates).

Importing the package registers the method (the registry imports every method module of
:mod:`unlearning.methods`).
"""

from unlearning.methods.mini_unlearning import method
from unlearning.methods.registry import register

register(method.MiniUnlearning())
