"""L-BFGS Hessian-vector products for Mini-Unlearning (paper 004, Appendix B, Algorithm 4), corrected.

Given m secant pairs of ONE smooth function phi, oldest first,

    s_i = w_{i+1} - w_i,        y_i = grad phi(w_{i+1}) - grad phi(w_i),        i = 0 .. m-1,

the BFGS recursion started from B_0 = sigma I (sigma = y_{m-1}^T s_{m-1} / s_{m-1}^T s_{m-1}) has the
compact representation of Byrd, Nocedal & Schnabel (1994, Thm 2.3):

    B u = sigma u - [Y, sigma S] M^{-1} [Y^T u ; sigma S^T u],      M = [[-D, L^T], [L, sigma S^T S]]

with D = diag(S^T Y) and L the strictly lower triangular part of S^T Y (L_ij = s_i^T y_j, i > j).
Algorithm 4 solves with M through the factorisation

    M = [[D^{1/2}, 0], [-L D^{-1/2}, J]] . [[-D^{1/2}, D^{-1/2} L^T], [0, J^T]],
    J J^T = sigma S^T S + L D^{-1} L^T                                        (lower Cholesky factor J)

The printed Algorithm 4 has three errors (digest 004, section 2.6, all checked numerically there and in
``tests/unit/test_lbfgs.py``); we follow the digest's corrected form because it is the one that equals
the BFGS recursion:

1. step 5 divides by w_{m-1}^T w_{m-1}; it must be s_{m-1}^T s_{m-1} (the scaling of B_0);
2. step 6 factorises sigma S^T S + L D L^T; it must be L D^{-1} L^T (otherwise the product of the two
   block factors is not M);
3. step 7 prints block factors with wrong signs, D^{1/2} for D^{-1/2}, L^T for L and J^T for J.

:func:`two_loop_inverse_product` is the textbook two-loop recursion (Nocedal & Wright, Alg. 7.4) for
the INVERSE approximation H = B^{-1} started from H_0 = I / sigma; it never forms M, so it is an
independent reference: B (H v) = v and H (B u) = u hold to rounding. :func:`bfgs_dense` is the explicit
BFGS recursion (small p only, for tests).

Safeguards not in the paper: a pair whose curvature s^T y is not clearly positive is dropped (BFGS
needs s^T y > 0 for D^{1/2} and the Cholesky factor), and when the Cholesky factorisation fails
(nearly collinear steps) the oldest pair is dropped and the factorisation retried. With no usable pair
left :meth:`CompactLBFGS.from_pairs` returns None and the caller falls back to an exact product.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unlearning.errors import DimensionMismatchError

_SMALL = torch.float64  # the 2m x 2m algebra runs in float64 whatever the vectors' dtype


def secant_pairs(points: torch.Tensor, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, Y), each (p, m), from m+1 consecutive points and the gradients of ONE function at them.

    ``points`` and ``grads`` are (m+1, p), oldest first; column i is s_i = points[i+1] - points[i] and
    y_i = grads[i+1] - grads[i] (Algorithm 4, steps 1-2).
    """
    if points.shape != grads.shape or points.ndim != 2 or points.shape[0] < 2:
        raise DimensionMismatchError(
            f"need (m+1, p) points and gradients with m >= 1, got {tuple(points.shape)} and "
            f"{tuple(grads.shape)}"
        )
    return (points[1:] - points[:-1]).T, (grads[1:] - grads[:-1]).T


@dataclass(frozen=True)
class CompactLBFGS:
    """The corrected Algorithm 4: B u for the L-BFGS approximation B of the Hessian of phi.

    ``s`` and ``y`` are the pairs kept after the safeguards (p, m'), oldest first; ``lower`` and
    ``upper`` are the two block factors of M (2m' x 2m', float64); ``dropped`` counts discarded pairs.
    """

    s: torch.Tensor
    y: torch.Tensor
    sigma: float
    lower: torch.Tensor
    upper: torch.Tensor
    dropped: int

    @classmethod
    def from_pairs(
        cls, s: torch.Tensor, y: torch.Tensor, *, curvature_tol: float = 1e-8
    ) -> CompactLBFGS | None:
        """Build the factors from pairs (p, m), oldest first; None when no pair is usable.

        A pair is kept when s^T y > curvature_tol * ||s|| ||y|| (a scale-free curvature condition).
        """
        if s.shape != y.shape or s.ndim != 2:
            raise DimensionMismatchError(
                f"S and Y must both be (p, m), got {tuple(s.shape)} and {tuple(y.shape)}"
            )
        s64, y64 = s.to(_SMALL), y.to(_SMALL)
        curv = (s64 * y64).sum(0)
        ok = (curv > curvature_tol * s64.norm(dim=0) * y64.norm(dim=0)) & (s64.norm(dim=0) > 0)
        keep = torch.nonzero(ok).flatten().tolist()
        dropped = s.shape[1] - len(keep)
        while keep:
            factors = _factorise(s64[:, keep], y64[:, keep])
            if factors is not None:
                sigma, lower, upper = factors
                return cls(s[:, keep], y[:, keep], sigma, lower, upper, dropped)
            keep, dropped = keep[1:], dropped + 1  # Cholesky failed: drop the oldest pair and retry
        return None

    @property
    def pairs(self) -> int:
        return int(self.s.shape[1])

    def matvec(self, u: torch.Tensor) -> torch.Tensor:
        """B u for u of shape (p,) or (r, p) (rows are independent vectors); Algorithm 4, steps 7-8."""
        single = u.ndim == 1
        rows = u[None] if single else u
        if rows.shape[1] != self.s.shape[0]:
            raise DimensionMismatchError(
                f"vectors have dimension {rows.shape[1]}, the pairs {self.s.shape[0]}"
            )
        sigma = self.sigma
        rhs = torch.cat([rows @ self.y, sigma * (rows @ self.s)], dim=1).to(_SMALL).T  # (2m', r)
        half = torch.linalg.solve_triangular(self.lower, rhs, upper=False)
        q = torch.linalg.solve_triangular(self.upper, half, upper=True).to(rows.dtype)  # M^{-1} rhs
        m = self.pairs
        out = sigma * rows - (q[:m].T @ self.y.T + sigma * (q[m:].T @ self.s.T))
        return out[0] if single else out

    def dense(self) -> torch.Tensor:
        """The p x p matrix B (small p only: tests and parity checks)."""
        eye = torch.eye(self.s.shape[0], dtype=self.s.dtype, device=self.s.device)
        return self.matvec(eye).T


def _factorise(s: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor] | None:
    """sigma and the two block factors of M (Algorithm 4 steps 3-6, corrected); None if Cholesky fails."""
    m = s.shape[1]
    sts = s.T @ s
    sty = s.T @ y
    d = torch.diagonal(sty)
    low = torch.tril(sty, diagonal=-1)
    sigma = float(y[:, -1] @ s[:, -1] / (s[:, -1] @ s[:, -1]))  # correction 1: s^T s, not w^T w
    inner = sigma * sts + low @ torch.diag(1.0 / d) @ low.T  # correction 2: L D^{-1} L^T
    j, info = torch.linalg.cholesky_ex(inner)
    if int(info) != 0:
        return None
    d_half, d_inv_half = torch.diag(d.sqrt()), torch.diag(d.rsqrt())
    zero = torch.zeros(m, m, dtype=s.dtype, device=s.device)
    # correction 3: the factors of M = [[-D, L^T], [L, sigma S^T S]] (their product is checked in tests)
    lower = torch.cat([torch.cat([d_half, zero], 1), torch.cat([-low @ d_inv_half, j], 1)], 0)
    upper = torch.cat([torch.cat([-d_half, d_inv_half @ low.T], 1), torch.cat([zero, j.T], 1)], 0)
    return sigma, lower, upper


def lbfgs_hessian_vector(s: torch.Tensor, y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """B u of the corrected Algorithm 4 for pairs (p, m).

    Raises ValueError when no pair satisfies the curvature condition.
    """
    approx = CompactLBFGS.from_pairs(s, y)
    if approx is None:
        raise ValueError("no secant pair has positive curvature s^T y > 0: L-BFGS is undefined here")
    return approx.matvec(u)


def two_loop_inverse_product(s: torch.Tensor, y: torch.Tensor, v: torch.Tensor, gamma: float) -> torch.Tensor:
    """H v for the L-BFGS inverse-Hessian approximation with H_0 = gamma I (Nocedal & Wright, Alg. 7.4).

    With gamma = 1/sigma and the same pairs, H is exactly the inverse of the compact B above (the
    direct and inverse BFGS updates are dual), which is what the tests use as the reference.
    """
    m = s.shape[1]
    rho = [1.0 / float(y[:, i] @ s[:, i]) for i in range(m)]
    q = v.clone()
    alpha = [0.0] * m
    for i in reversed(range(m)):  # newest pair first
        alpha[i] = rho[i] * float(s[:, i] @ q)
        q = q - alpha[i] * y[:, i]
    r = gamma * q
    for i in range(m):  # oldest pair first
        beta = rho[i] * float(y[:, i] @ r)
        r = r + (alpha[i] - beta) * s[:, i]
    return r


def bfgs_dense(s: torch.Tensor, y: torch.Tensor, sigma: float) -> torch.Tensor:
    """The explicit BFGS recursion from B_0 = sigma I:

        B_{i+1} = B_i - B_i s_i s_i^T B_i / (s_i^T B_i s_i) + y_i y_i^T / (y_i^T s_i)
    """
    b = sigma * torch.eye(s.shape[0], dtype=s.dtype, device=s.device)
    for i in range(s.shape[1]):
        si, yi = s[:, i], y[:, i]
        bs = b @ si
        b = b - torch.outer(bs, bs) / (si @ bs) + torch.outer(yi, yi) / (yi @ si)
    return b
