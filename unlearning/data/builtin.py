"""The built-in datasets: MNIST (IDX files), Forest Covertype, scikit-learn's bundled sets and seeded
synthetic blobs, as :class:`Dataset` objects.

* MNIST IDX files (gzip or plain), parsed with numpy only: :func:`load_mnist_idx`, and disjoint seeded
  subsets of it: :func:`mnist_subsets`.
* The Forest Covertype file of the shared data folder: :func:`load_covertype`.
* scikit-learn's bundled toy sets (no download): :func:`load_sklearn`.
* Seeded Gaussian blobs for tests and for when a real file is missing: :func:`make_synthetic`.

The real files live in the shared data folder (:func:`~unlearning.data.files.shared_data_dir`); nothing
is ever downloaded. Every loader raises :class:`FileNotFoundError` for a missing file and
:class:`InvalidDatasetError` with a message that names the problem for a malformed one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from unlearning.data.dataset import Dataset
from unlearning.data.files import read_bytes, require_file, shared_data_dir
from unlearning.data.splits import subsample, train_test_subsets
from unlearning.data.uploads import load_table
from unlearning.errors import InvalidConfigError, InvalidDatasetError

__all__ = [
    "SKLEARN_DATASETS",
    "load_covertype",
    "load_mnist_idx",
    "load_sklearn",
    "make_synthetic",
    "mnist_subsets",
]

_IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions (count, rows, cols)
_IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension (count)

COVERTYPE_LABEL_COLUMN = "Cover_Type"
COVERTYPE_NUM_CLASSES = 7

SKLEARN_DATASETS = ("digits", "breast_cancer", "wine", "iris")


# --------------------------------------------------------------------------------------------------
# MNIST (IDX)
# --------------------------------------------------------------------------------------------------


def _parse_idx(raw: bytes, *, expected_magic: int, source: Path) -> np.ndarray:
    """Parse one IDX file of unsigned bytes.

    Format: a big-endian int32 magic number (0x0000 0x08 ndim; 2051 for images, 2049 for labels), then
    ``ndim`` big-endian uint32 sizes, then ``prod(sizes)`` bytes in C order.
    """
    if len(raw) < 4:
        raise InvalidDatasetError(f"{source} is too short ({len(raw)} bytes) to be an IDX file")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise InvalidDatasetError(
            f"{source} has IDX magic number {magic}, expected {expected_magic}: "
            "it is not the right kind of IDX file (2051 = images, 2049 = labels) or it is corrupt"
        )
    ndim = raw[3]
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise InvalidDatasetError(f"{source} is truncated inside its IDX header")
    dims = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    expected = math.prod(dims)
    actual = len(raw) - header_len
    if actual != expected:
        raise InvalidDatasetError(
            f"{source} declares shape {dims} ({expected} bytes of data) but holds {actual} bytes: "
            "the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(dims)


def _indexed_ids(prefix: str, n: int) -> tuple[str, ...]:
    """``prefix-00000`` .. : zero padded to at least 5 digits so ids sort in row order."""
    width = max(5, len(str(max(n - 1, 0))))
    return tuple(f"{prefix}-{i:0{width}d}" for i in range(n))


def _grouped_owner_ids(n: int, samples_per_owner: int) -> tuple[str, ...]:
    """Row i belongs to ``owner-{i // samples_per_owner}`` (zero padded like the sample ids)."""
    if samples_per_owner < 1:
        raise InvalidConfigError(f"samples_per_owner must be >= 1, got {samples_per_owner}")
    num_owners = -(-n // samples_per_owner)
    width = max(5, len(str(max(num_owners - 1, 0))))
    return tuple(f"owner-{i // samples_per_owner:0{width}d}" for i in range(n))


def load_mnist_idx(
    directory: str | Path | None = None,
    images: str = "t10k-images-idx3-ubyte.gz",
    labels: str = "t10k-labels-idx1-ubyte.gz",
    flatten: bool = False,
    *,
    samples_per_owner: int = 1,
) -> Dataset:
    """Load MNIST from a pair of IDX files (gzip-compressed or plain), with numpy only.

    ``directory`` defaults to ``shared_data_dir() / "mnist"`` (the official 10k test split). Pixels are
    scaled from 0..255 to [0, 1] float32; the feature shape is ``(1, rows, cols)`` (one channel, 28x28
    for MNIST) or ``(rows * cols,)`` when ``flatten``. Sample ids are ``mnist-00000``, ``mnist-00001``, ..
    (the row index in the file, zero padded); owners are assigned deterministically: row i belongs to
    ``owner-{i // samples_per_owner}`` (zero padded), so the default gives every image its own owner.
    A wrong magic number, a size that does not match the header, differing image and label counts or a
    corrupt gzip stream raise :class:`InvalidDatasetError`.
    """
    folder = Path(directory) if directory is not None else shared_data_dir() / "mnist"
    image_path = require_file(folder / images, "MNIST image file")
    label_path = require_file(folder / labels, "MNIST label file")
    pixels = _parse_idx(read_bytes(image_path), expected_magic=_IDX_IMAGES_MAGIC, source=image_path)
    targets = _parse_idx(read_bytes(label_path), expected_magic=_IDX_LABELS_MAGIC, source=label_path)
    if pixels.shape[0] != targets.shape[0]:
        raise InvalidDatasetError(
            f"{image_path} holds {pixels.shape[0]} images but {label_path} holds {targets.shape[0]} labels"
        )
    n = int(pixels.shape[0])
    features = pixels.astype(np.float32) / np.float32(255.0)
    features = features.reshape(n, -1) if flatten else features.reshape(n, 1, *pixels.shape[1:])
    return Dataset(
        sample_ids=_indexed_ids("mnist", n),
        owner_ids=_grouped_owner_ids(n, samples_per_owner),
        features=features,
        labels=targets.astype(np.int64),
        num_classes=10,
        name="mnist",
    )



def mnist_subsets(
    n_train: int = 1000,
    n_test: int | None = None,
    seed: int = 0,
    *,
    directory: str | Path | None = None,
    flatten: bool = False,
    stratify: bool = False,
) -> tuple[Dataset, Dataset]:
    """Disjoint seeded (train, test) subsets of MNIST, as in the papers' "n = 1,000" setting.

    ``n_test`` defaults to floor(0.4 * n_train) (400 for n_train = 1000). The shared data folder holds only
    the official 10,000-image MNIST *test* split, so both subsets are drawn from it (disjoint): say so
    when comparing with a paper that drew its training subset from the official training split. The draw
    is :func:`train_test_subsets` on :func:`load_mnist_idx` (ids ``mnist-00000``..
    name the row in that file, so a subset is reproducible from its ids alone).
    """
    if n_test is None:
        n_test = (2 * n_train) // 5
    full = load_mnist_idx(directory, flatten=flatten)
    return train_test_subsets(full, n_train, n_test, seed, stratify=stratify)

# --------------------------------------------------------------------------------------------------
# Covertype
# --------------------------------------------------------------------------------------------------


def load_covertype(path: str | Path | None = None, n: int | None = None, seed: int = 0) -> Dataset:
    """Load Forest Covertype (54 features already min-max scaled to [0, 1], 7 classes).

    ``path`` defaults to ``shared_data_dir() / "covertype" / "test.csv.gz"`` (92,962 rows). The label
    column ``Cover_Type`` (1..7) becomes 0..6 and ``num_classes`` is always 7, so a subsample missing a
    class still has the right output size. Sample ids are ``cov-{i}`` with i the row index in the file
    (stable whatever ``n`` is); each row is its own owner. With ``n`` the result is
    ``subsample(full, n, seed)`` (see :func:`unlearning.data.splits.subsample`).
    """
    source = Path(path) if path is not None else shared_data_dir() / "covertype" / "test.csv.gz"
    full = load_table(
        require_file(source, "Covertype file"),
        id_column=None,
        owner_column=None,
        label_column=COVERTYPE_LABEL_COLUMN,
        num_classes=COVERTYPE_NUM_CLASSES,
        label_offset=1,
        id_prefix="cov",
        name="covertype",
    )
    return full if n is None else subsample(full, n, seed)




# --------------------------------------------------------------------------------------------------


def _min_max_scale(x: np.ndarray) -> np.ndarray:
    """Scale each column to [0, 1]; a constant column becomes all zeros (nothing to scale)."""
    low = x.min(axis=0)
    span = x.max(axis=0) - low
    return (x - low) / np.where(span > 0, span, 1.0)


def load_sklearn(name: str) -> Dataset:
    """Load one of scikit-learn's bundled datasets: "digits", "breast_cancer", "wine" or "iris".

    They ship inside the scikit-learn wheel (no download). Features are min-max scaled to [0, 1] per
    column over the whole set ((x - min) / (max - min); a constant column becomes 0), so they sit on the
    same scale as the other loaders' features. Sample ids are ``{name}-{i}``; each row is its own owner.
    """
    from sklearn import datasets  # imported lazily: scikit-learn is slow to import

    loaders: dict[str, Callable[..., Any]] = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
    }
    if name not in loaders:
        raise InvalidDatasetError(
            f"unknown scikit-learn dataset {name!r}: choose one of {list(SKLEARN_DATASETS)}"
        )
    bunch = loaders[name]()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    ids = tuple(f"{name}-{i}" for i in range(len(y)))
    names = tuple(str(t) for t in bunch.target_names)
    return Dataset(
        sample_ids=ids,
        owner_ids=ids,
        features=_min_max_scale(x),
        labels=y,
        num_classes=len(names),
        name=name,
        # iris: setosa, versicolor, virginica; digits' names are its indices, so it needs none
        class_names=None if names == tuple(str(i) for i in range(len(names))) else names,
    )


def make_synthetic(
    n: int,
    num_features: int,
    num_classes: int,
    seed: int,
    separation: float = 3.0,
    *,
    samples_per_owner: int = 1,
) -> Dataset:
    """Seeded Gaussian-blob classification data (for tests, and when a real file is missing).

    Algorithm, with ``rng = numpy.random.Generator(numpy.random.PCG64(seed))``:

    1. class centres: ``c = rng.standard_normal((num_classes, num_features))``, each row rescaled to
       Euclidean norm ``separation`` (so every centre lies at that distance from the origin);
    2. labels: ``rng.permutation(np.arange(n) % num_classes)`` (balanced: class sizes differ by at most 1);
    3. features: ``c[labels] + rng.standard_normal((n, num_features))`` (unit-variance noise), float32.

    Larger ``separation`` makes the classes easier to tell apart. Sample ids are ``syn-00000``, ..;
    owners are ``owner-{i // samples_per_owner}`` as in :func:`load_mnist_idx`. name="synthetic".
    """
    if n < 1 or num_features < 1 or num_classes < 2:
        raise InvalidConfigError(
            f"need n >= 1, num_features >= 1 and num_classes >= 2; got n={n}, num_features={num_features}, "
            f"num_classes={num_classes}"
        )
    if not (separation >= 0 and math.isfinite(separation)):
        raise InvalidConfigError(f"separation must be a finite number >= 0, got {separation}")
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = rng.standard_normal((num_classes, num_features))
    centres *= separation / np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.permutation(np.arange(n) % num_classes)
    features = centres[labels] + rng.standard_normal((n, num_features))
    return Dataset(
        sample_ids=_indexed_ids("syn", n),
        owner_ids=_grouped_owner_ids(n, samples_per_owner),
        features=features.astype(np.float32),
        labels=labels,
        num_classes=num_classes,
        name="synthetic",
    )
