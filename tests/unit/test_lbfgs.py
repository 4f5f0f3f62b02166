"""The corrected L-BFGS Hessian-vector product of Algorithm 4 (paper 004, App. B; digest 004 section 2.6)
against the textbook two-loop recursion and the explicit BFGS recursion, and the printed algorithm's
three errors shown to matter."""

from __future__ import annotations

import pytest
import torch

from unlearning.errors import DimensionMismatchError
from unlearning.lbfgs import (
    CompactLBFGS,
    bfgs_dense,
    lbfgs_hessian_vector,
    secant_pairs,
    two_loop_inverse_product,
)

F64 = torch.float64


def _quadratic_pairs(
    p: int = 15, m: int = 3, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs of the quadratic 1/2 w^T A w (gradient A w) along a random walk: y_i = A s_i exactly."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(p, p, generator=gen, dtype=F64)
    a = q @ q.T / p + 0.1 * torch.eye(p, dtype=F64)
    points = torch.cumsum(torch.randn(m + 1, p, generator=gen, dtype=F64), dim=0)
    s, y = secant_pairs(points, points @ a)
    return s, y, a


def _logistic_pairs(m: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs of a (non-quadratic) L2 logistic loss along its own gradient-descent path."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 6, generator=gen, dtype=F64)
    t = (torch.rand(50, generator=gen, dtype=F64) > 0.5).to(F64)

    def grad(w: torch.Tensor) -> torch.Tensor:
        return x.T @ (torch.sigmoid(x @ w) - t) / 50 + 0.01 * w

    w = torch.zeros(6, dtype=F64)
    points = []
    for _ in range(m + 1):
        points.append(w)
        w = w - 0.5 * grad(w)
    pts = torch.stack(points)
    return secant_pairs(pts, torch.stack([grad(p) for p in pts]))


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_compact_product_equals_the_explicit_bfgs_recursion(m: int) -> None:
    s, y, _ = _quadratic_pairs(m=m, seed=m)
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None and approx.pairs == m and approx.dropped == 0
    reference = bfgs_dense(s, y, approx.sigma)
    torch.testing.assert_close(approx.dense(), reference, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("pairs", ["quadratic", "logistic"])
def test_compact_product_inverts_the_two_loop_recursion_to_float_precision(pairs: str) -> None:
    s, y = _logistic_pairs() if pairs == "logistic" else _quadratic_pairs()[:2]
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    gen = torch.Generator().manual_seed(7)
    for _ in range(5):
        u = torch.randn(s.shape[0], generator=gen, dtype=F64)
        # Same pairs, H_0 = I / sigma: the two-loop H is exactly B^{-1}.
        torch.testing.assert_close(
            approx.matvec(two_loop_inverse_product(s, y, u, 1.0 / approx.sigma)), u, rtol=1e-10, atol=1e-11
        )
        torch.testing.assert_close(
            two_loop_inverse_product(s, y, approx.matvec(u), 1.0 / approx.sigma), u, rtol=1e-10, atol=1e-11
        )


def test_secant_condition_and_sigma_use_the_newest_step() -> None:
    s, y, _ = _quadratic_pairs()
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    torch.testing.assert_close(approx.matvec(s[:, -1]), y[:, -1], rtol=1e-11, atol=1e-12)
    assert approx.sigma == pytest.approx(float(y[:, -1] @ s[:, -1] / (s[:, -1] @ s[:, -1])), rel=1e-14)


def test_the_two_block_factors_multiply_to_the_middle_matrix() -> None:
    s, y, _ = _quadratic_pairs(m=4)
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    sty = s.T @ y
    d, low = torch.diag(torch.diagonal(sty)), torch.tril(sty, -1)
    middle = torch.cat([torch.cat([-d, low.T], 1), torch.cat([low, approx.sigma * s.T @ s], 1)], 0)
    torch.testing.assert_close(approx.lower @ approx.upper, middle, rtol=1e-11, atol=1e-11)


def _printed_algorithm4(
    s: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    *,
    fix_sigma: bool,
    fix_ldl: bool,
    fix_blocks: bool,
    w_last: torch.Tensor,
) -> torch.Tensor:
    """Algorithm 4 as printed, with each of the three corrections switchable."""
    m = s.shape[1]
    sty = s.T @ y
    dvec = torch.diagonal(sty)
    d, low = torch.diag(dvec), torch.tril(sty, -1)
    denominator = s[:, -1] @ s[:, -1] if fix_sigma else w_last @ w_last
    sigma = float(y[:, -1] @ s[:, -1] / denominator)
    middle = low @ torch.linalg.inv(d) @ low.T if fix_ldl else low @ d @ low.T
    j = torch.linalg.cholesky(sigma * s.T @ s + middle)
    dh, dih = torch.diag(dvec.sqrt()), torch.diag(dvec.rsqrt())
    z = torch.zeros(m, m, dtype=s.dtype)
    if fix_blocks:
        first = torch.cat([torch.cat([-dh, dih @ low.T], 1), torch.cat([z, j.T], 1)], 0)
        second = torch.cat([torch.cat([dh, z], 1), torch.cat([-low @ dih, j], 1)], 0)
    else:  # [[-D^1/2, -D^1/2 L^T], [0, J^T]]^-1 [[-D^1/2, 0], [-D^1/2 L^T, J^T]]^-1 as printed
        first = torch.cat([torch.cat([-dh, -dh @ low.T], 1), torch.cat([z, j.T], 1)], 0)
        second = torch.cat([torch.cat([-dh, z], 1), torch.cat([-dh @ low.T, j.T], 1)], 0)
    p = torch.linalg.solve(first, torch.linalg.solve(second, torch.cat([y.T @ u, sigma * s.T @ u])))
    return sigma * u - torch.cat([y, sigma * s], 1) @ p


def test_each_printed_error_breaks_the_product_and_the_corrected_form_does_not() -> None:
    s, y, _ = _quadratic_pairs(m=3, seed=11)
    w_last = torch.linspace(1.0, 3.0, s.shape[0], dtype=F64)  # an iterate, as the printed sigma reads it
    u = torch.linspace(-1.0, 1.0, s.shape[0], dtype=F64)
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    reference = bfgs_dense(s, y, approx.sigma) @ u

    def rel(**fixes: bool) -> float:
        printed = _printed_algorithm4(s, y, u, w_last=w_last, **fixes)
        return float((printed - reference).norm() / reference.norm())

    assert rel(fix_sigma=True, fix_ldl=True, fix_blocks=True) < 1e-10
    torch.testing.assert_close(approx.matvec(u), reference, rtol=1e-11, atol=1e-12)
    assert rel(fix_sigma=False, fix_ldl=True, fix_blocks=True) > 1e-2  # sigma over w^T w
    assert rel(fix_sigma=True, fix_ldl=False, fix_blocks=True) > 1e-2  # L D L^T
    assert rel(fix_sigma=True, fix_ldl=True, fix_blocks=False) > 1e-2  # the printed block matrices


def test_batched_rows_match_single_vectors_and_float32_stays_close() -> None:
    s, y, _ = _quadratic_pairs()
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    rows = torch.randn(4, s.shape[0], generator=torch.Generator().manual_seed(3), dtype=F64)
    torch.testing.assert_close(approx.matvec(rows), torch.stack([approx.matvec(r) for r in rows]))
    single = CompactLBFGS.from_pairs(s.float(), y.float())
    assert single is not None
    out = single.matvec(rows[0].float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), approx.matvec(rows[0]), rtol=1e-4, atol=1e-4)


def test_pairs_without_positive_curvature_are_dropped() -> None:
    s, y, _ = _quadratic_pairs(m=3)
    bad = y.clone()
    bad[:, 0] = -s[:, 0]  # s^T y < 0: not a valid BFGS pair
    approx = CompactLBFGS.from_pairs(s, bad)
    assert approx is not None and approx.pairs == 2 and approx.dropped == 1
    reference = bfgs_dense(s[:, 1:], y[:, 1:], approx.sigma)
    torch.testing.assert_close(approx.dense(), reference, rtol=1e-11, atol=1e-12)
    assert CompactLBFGS.from_pairs(s, -s) is None
    with pytest.raises(ValueError, match="curvature"):
        lbfgs_hessian_vector(s, -s, s[:, 0])
    zero_step = s.clone()
    zero_step[:, 2] = 0.0
    kept = CompactLBFGS.from_pairs(zero_step, y)
    assert kept is not None and kept.dropped == 1


def test_bad_shapes_are_rejected() -> None:
    with pytest.raises(DimensionMismatchError):
        secant_pairs(torch.zeros(3, 4), torch.zeros(3, 5))
    with pytest.raises(DimensionMismatchError):
        secant_pairs(torch.zeros(1, 4), torch.zeros(1, 4))
    s, y, _ = _quadratic_pairs()
    approx = CompactLBFGS.from_pairs(s, y)
    assert approx is not None
    with pytest.raises(DimensionMismatchError):
        approx.matvec(torch.zeros(s.shape[0] + 1, dtype=F64))
    with pytest.raises(DimensionMismatchError):
        CompactLBFGS.from_pairs(s, y[:, :2])
