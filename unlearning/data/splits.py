"""Seeded subsets and train/test splits of a :class:`Dataset`, and seeded partitions of an index range.

Every random draw comes from one generator, ``numpy.random.Generator(numpy.random.PCG64(seed))``, and
from one call on it: ``perm = rng.permutation(len(dataset))``. The functions only decide which rows of
that permutation to keep, so a result can be reproduced from its docstring and the seed alone:

* plain draw of k rows from an ordered candidate list: its first k entries;
* stratified draw of k rows: class c gets a quota k_c (below) and the draw keeps, for every class, the
  first k_c rows of that class in candidate order.

Quotas (largest remainder): with m_c rows of class c among the M candidates, k_c = floor(k * m_c / M),
and the k - sum(k_c) leftover rows go, one each, to the classes with the largest remainders
(k * m_c mod M), ties to the smaller class index. Then k_c <= m_c, so the draw always succeeds.

Every returned subset keeps the rows in their original dataset order (the selected indices are sorted),
so training code that wants a shuffled order shuffles with its own seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from unlearning.data.dataset import Dataset
from unlearning.errors import InvalidConfigError, InvalidDatasetError


def _rng(seed: int) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise InvalidConfigError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.Generator(np.random.PCG64(int(seed)))


def _quotas(counts: np.ndarray, k: int) -> np.ndarray:
    """Largest-remainder allocation of k rows over classes with ``counts`` rows (exact integer maths)."""
    total = int(counts.sum())
    scaled = k * counts.astype(np.int64)
    quotas = scaled // total
    remainders = scaled % total
    leftover = k - int(quotas.sum())
    # Stable sort on -remainder: equal remainders keep ascending class order.
    winners = np.argsort(-remainders, kind="stable")[:leftover]
    quotas[winners] += 1
    return quotas


def _draw(labels: np.ndarray, k: int, candidates: np.ndarray, stratify: bool) -> np.ndarray:
    """k row indices from ``candidates`` (already in random order), plain or stratified by label."""
    if not stratify:
        return candidates[:k]
    candidate_labels = labels[candidates]
    counts = np.bincount(candidate_labels)
    quotas = _quotas(counts, k)
    picked = [candidates[candidate_labels == c][: quotas[c]] for c in range(len(counts))]
    return np.concatenate(picked)


def _check_count(what: str, k: int, available: int) -> int:
    if isinstance(k, bool) or not isinstance(k, Integral) or not 1 <= k <= available:
        raise InvalidConfigError(f"{what} must be an integer in [1, {available}], got {k!r}")
    return int(k)


def subsample(dataset: Dataset, n: int, seed: int, stratify: bool = False) -> Dataset:
    """A seeded random subset of ``n`` distinct rows, in their original order.

    ``perm = Generator(PCG64(seed)).permutation(len(dataset))``; the subset is ``perm[:n]`` (or, with
    ``stratify``, the first k_c rows of each class c in ``perm`` with the largest-remainder quotas of the
    module docstring, so class proportions are kept to within one row), sorted. ``n`` larger than the
    dataset (or < 1) raises :class:`InvalidConfigError`; ``n == len(dataset)`` returns every row.
    """
    n = _check_count("n", n, len(dataset))
    perm = _rng(seed).permutation(len(dataset))
    return dataset.take(np.sort(_draw(dataset.labels, n, perm, stratify)))


def _test_count(test_size: float, n: int) -> int:
    """An int is a row count; a float in (0, 1) a fraction, giving floor(test_size * n) rows."""
    if isinstance(test_size, bool):
        raise InvalidConfigError(f"test_size must be a row count or a fraction in (0, 1), got {test_size!r}")
    if isinstance(test_size, Integral):
        return _check_count("test_size", test_size, n - 1)
    if isinstance(test_size, Real) and 0 < float(test_size) < 1:
        # Round before flooring so that binary noise (0.29 * 100 = 28.999...) does not lose a row.
        k = math.floor(round(float(test_size) * n, 9))
        if 1 <= k <= n - 1:
            return k
    raise InvalidConfigError(
        f"test_size={test_size!r} on {n} rows: give a row count in [1, {n - 1}] or a fraction in (0, 1) "
        "that leaves at least one row on each side"
    )


def train_test_split(
    dataset: Dataset, test_size: float, seed: int, stratify: bool = False
) -> tuple[Dataset, Dataset]:
    """Split every row into a disjoint (train, test) pair that together cover the dataset.

    ``test_size`` is a row count or a fraction in (0, 1) (floor(test_size * n) rows; both sides must keep
    at least one row). ``perm = Generator(PCG64(seed)).permutation(n)``; the test rows are ``perm[:k]``
    (stratified: the first k_c rows of each class in ``perm``, quotas as in the module docstring) and the
    train rows are all the others. Both keep their original order.
    """
    k = _test_count(test_size, len(dataset))
    perm = _rng(seed).permutation(len(dataset))
    test_idx = np.sort(_draw(dataset.labels, k, perm, stratify))
    train_mask = np.ones(len(dataset), dtype=bool)
    train_mask[test_idx] = False
    return dataset.take(np.flatnonzero(train_mask)), dataset.take(test_idx)


def train_test_subsets(
    dataset: Dataset, n_train: int, n_test: int, seed: int, stratify: bool = False
) -> tuple[Dataset, Dataset]:
    """Two disjoint seeded subsets of ``n_train`` and ``n_test`` rows (the rest of the rows unused).

    ``perm = Generator(PCG64(seed)).permutation(len(dataset))``. Without ``stratify``: train = ``perm[:n_train]``,
    test = ``perm[n_train:n_train + n_test]``. With ``stratify``: train is the stratified draw of
    ``n_train`` from ``perm``; test is the stratified draw of ``n_test`` from the rows of ``perm`` not in
    train (same order), its quotas computed from the class counts of those remaining rows. Both sorted.
    """
    n_train = _check_count("n_train", n_train, len(dataset) - 1)
    n_test = _check_count("n_test", n_test, len(dataset) - n_train)
    perm = _rng(seed).permutation(len(dataset))
    train_idx = _draw(dataset.labels, n_train, perm, stratify)
    rest = perm[~np.isin(perm, train_idx)]
    test_idx = _draw(dataset.labels, n_test, rest, stratify)
    return dataset.take(np.sort(train_idx)), dataset.take(np.sort(test_idx))


def split_indices(n: int, fractions: Sequence[float], seed: int) -> list[np.ndarray]:
    """A seeded random partition of range(n) into consecutive parts of the given fractions (last takes the rest)."""
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-9) or any(f <= 0 for f in fractions):
        raise InvalidDatasetError(f"split fractions must be positive and sum to 1, got {list(fractions)}")
    perm = np.random.default_rng(seed).permutation(n)
    cuts = np.round(np.cumsum(fractions)[:-1] * n).astype(int)
    return [np.sort(part) for part in np.split(perm, cuts)]
