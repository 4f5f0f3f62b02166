"""Privacy accountant of stochastic-gradient Langevin unlearning (SGLU; Chien, Wang, Chen, Li, arXiv
2403.17105 v1; digest ``003_langevin.md``).

Learning and unlearning run projected noisy mini-batch SGD (PNSGD) over a fixed cyclic partition of the
n training slots into N = n/b batches. With step size eta <= 1/L and m-strong convexity each step is a
c-contraction, c = 1 - eta*m, so Privacy Amplification by Iteration (PABI) turns a W_inf distance Z
between two starting laws into a Renyi bound after K epochs (K*N noisy steps):

    Cor 3.8 / Thm 3.11    eps(alpha) = alpha * Z^2 * c^(2KN) / (2 eta sigma^2)                   [paper]
    Z_B (Cor 3.8, Alg 8)  Z_B = min(2 eta M / (b (1 - c^N)), 2R)                                  [paper]
    batch (Cor 3.12)      Z_B(S) = min(S * 2 eta M / (b (1 - c^N)), 2R)   (worst batch positions)  [paper]
    sequential (Thm 3.11) Z^(s+1) = min(c^(K_s N) Z^(s) + Z_B, 2R)                                 [paper]
    finite T (Thm 3.2)    eps(alpha) = (alpha - 1/2)/(alpha - 1) * (eps1(2 alpha) + eps2(2 alpha))  [paper]
    conversion (Prop K.2) epsilon = min_alpha eps(alpha) + log(1/delta)/(alpha - 1)               [paper]

The modules, each importing only those above it:

- :mod:`.constants`    the PNSGD constants (n, b, eta, m, M, R, L; c = 1 - eta m) and the input checks;
- :mod:`.distance`     W_inf bounds: Z_B (Lemma 3.5, Cor 3.8, Cor 3.12), the stationarity gap (Lemma 3.6)
                       and the burn-in that makes it negligible;
- :mod:`.renyi`        the Renyi curves (PABI, Cor 3.8, Thm 3.2) and their conversion to (epsilon, delta);
- :mod:`.calibration`  the searches: the least K for a target, the least sigma for a K (Algorithms 4-5);
- :mod:`.sequential`   the bookkeeping of a sequence of (batch) requests through the Z recursion (Thm 3.11,
                       the corrected Algorithm 6);
- :mod:`.lu_baseline`  the Langevin-unlearning (LU) baseline's accountant, for the comparison figures only.

Which formulas are the paper's own and which are not:

- ``[paper]`` above are stated in the paper; the corrections of its printed algorithms (digest 3.11) are
  applied: Algorithm 5 puts 2R c^(TN) outside the square (Theorem 3.2 puts it inside Z, as we do),
  Algorithms 6-8 use the constant Z_B for every sequential request (the Thm 3.11 recursion is
  implemented here; the constant Z_B understates the loss), Algorithm 4 returns sigma (not K), and
  Cor 3.12's prefactor is (1 - c^(TN))/(1 - c^N) (its own proof), not (1 - c^T)/(1 - c).
- the closed forms of the conversion for linear RDP curves (epsilon = A + 2 sqrt(A log(1/delta)) at
  alpha* = 1 + sqrt(log(1/delta)/A), and 3A + 2 sqrt(2A(A + log(1/delta))) for Theorem 3.2) and the
  closed forms for the least K and the least sigma derived from them are the digest's (section 3.9),
  re-derived here; they equal the paper's numerical minimisation over alpha and bisection over sigma
  (checked by the tests, which reproduce Table 3 both ways).
- ``pabi="tight"`` is the shift-optimal PABI factor c^(2k)(1 - c^2)/(1 - c^(2k)) over k = K*N steps
  (digest 3.1: Cauchy-Schwarz over the shifts of Feldman et al.'s shift-reduction lemma); it is what the
  authors' code uses for sequential requests and never exceeds the paper's c^(2k). ``"paper"`` is the
  default.
- ``conversion="dp_accounting"`` replaces Prop K.2 (Mironov 2017, Prop. 3) by dp-accounting's
  :func:`dp_accounting.rdp.compute_epsilon`, which implements the tighter conversion of Canonne, Kamath
  and Steinke 2020 (Prop. 12) / Asoodeh et al. 2020. We checked its code: it does NOT implement the
  paper's Prop K.2 (it only keeps the improved bound), so Table 3 is reproduced with the paper's
  conversion, implemented here in closed form; dp-accounting is used only for the optional tighter
  conversion. Both are statements about one pair of distributions, so both apply to (epsilon, delta)-
  unlearning (Definition K.1), in each direction of the two-sided Renyi difference.
- :func:`.distance.stationarity_gap` (Lemma 3.6 from any start in C_R: W_inf <= 2R c^(TN)) seeds the
  sequential recursion of a model trained for a finite T (the paper assumes T = infinity in Theorem
  3.11); this makes the recursion rigorous with respect to the stationary law without assuming exact
  convergence.
- The noise of Algorithm 1 has variance 2 eta sigma^2 per step, but the paper's PABI uses eta sigma^2
  (digest 3.1, UNSURE whether intended): every bound here keeps the paper's constant, which is a valid
  upper bound, conservative by a factor 2 in the RDP.

Everything is computed in log space: c^(2KN) underflows for realistic K*N (digest 6.6.9).
"""
