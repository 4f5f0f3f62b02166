"""Loaders and splits: real shared files, tables in every format, bad inputs, seeded draws."""

from __future__ import annotations

import csv
import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from unlearning.data import (
    Dataset,
    load_covertype,
    load_mnist_idx,
    load_sklearn,
    load_table,
    make_synthetic,
    mnist_subsets,
    shared_data_dir,
    subsample,
    train_test_split,
    train_test_subsets,
)
from unlearning.errors import InvalidConfigError, InvalidDatasetError

MNIST_DIR = shared_data_dir() / "mnist"
COVERTYPE_FILE = shared_data_dir() / "covertype" / "test.csv.gz"
# Class counts of the official MNIST 10k test split (a check that does not depend on the md5).
MNIST_TEST_CLASS_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _skip_unless(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"shared data file {path} is missing")


@pytest.fixture(scope="module")
def mnist() -> Dataset:
    _skip_unless(MNIST_DIR / "t10k-images-idx3-ubyte.gz")
    return load_mnist_idx()


@pytest.fixture(scope="module")
def covertype() -> Dataset:
    # The full file is 92,962 rows (about 1 s to parse): load it once for the whole module.
    _skip_unless(COVERTYPE_FILE)
    return load_covertype()


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _write_idx(path: Path, magic: int, array: np.ndarray, *, compress: bool = False) -> Path:
    raw = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    raw += array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def _small_idx_pair(folder: Path, n: int = 6, compress: bool = False) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 4, 3))
    labels = np.arange(n) % 10
    suffix = ".gz" if compress else ""
    _write_idx(folder / f"img{suffix}", 2051, images, compress=compress)
    _write_idx(folder / f"lab{suffix}", 2049, labels, compress=compress)
    return f"img{suffix}", f"lab{suffix}"


# --- shared_data_dir -------------------------------------------------------------------------------


def test_shared_data_dir_defaults_next_to_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LETHE_DATA_DIR", raising=False)
    project_root = Path(__file__).resolve().parents[2]
    assert (project_root / "pyproject.toml").exists()
    assert shared_data_dir() == project_root.parent / "shared" / "data"


def test_shared_data_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LETHE_DATA_DIR", str(tmp_path / "nowhere"))
    assert shared_data_dir() == tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="LETHE_DATA_DIR"):
        load_mnist_idx()


# --- MNIST -----------------------------------------------------------------------------------------


def test_real_mnist_shapes_and_labels(mnist: Dataset) -> None:
    assert len(mnist) == 10_000 and mnist.name == "mnist"
    assert mnist.feature_shape == (1, 28, 28) and mnist.features.dtype == np.float32
    assert mnist.features.min() == 0.0 and mnist.features.max() == 1.0
    assert np.bincount(mnist.labels).tolist() == MNIST_TEST_CLASS_COUNTS
    assert mnist.sample_ids[0] == "mnist-00000" and mnist.sample_ids[-1] == "mnist-09999"
    assert mnist.owner_ids[0] == "owner-00000" and len(set(mnist.owner_ids)) == 10_000


def test_real_mnist_flatten_and_owner_groups() -> None:
    _skip_unless(MNIST_DIR / "t10k-images-idx3-ubyte.gz")
    flat = load_mnist_idx(flatten=True, samples_per_owner=10)
    assert flat.feature_shape == (784,)
    assert len(set(flat.owner_ids)) == 1000
    assert flat.samples_of_owners(["owner-00001"]) == tuple(f"mnist-{i:05d}" for i in range(10, 20))


@pytest.mark.parametrize("compress", [False, True])
def test_idx_plain_and_gzip(tmp_path: Path, compress: bool) -> None:
    images, labels = _small_idx_pair(tmp_path, compress=compress)
    ds = load_mnist_idx(tmp_path, images, labels)
    assert len(ds) == 6 and ds.feature_shape == (1, 4, 3)
    assert ds.labels.tolist() == [0, 1, 2, 3, 4, 5]


def test_idx_wrong_magic(tmp_path: Path) -> None:
    _write_idx(tmp_path / "img", 2049, np.zeros((3, 2, 2)))  # label magic on an image file
    _write_idx(tmp_path / "lab", 2049, np.zeros(3))
    with pytest.raises(InvalidDatasetError, match="magic number 2049, expected 2051"):
        load_mnist_idx(tmp_path, "img", "lab")


def test_idx_truncated_data(tmp_path: Path) -> None:
    images, labels = _small_idx_pair(tmp_path)
    raw = (tmp_path / images).read_bytes()
    (tmp_path / images).write_bytes(raw[:-5])
    with pytest.raises(InvalidDatasetError, match="truncated or corrupt"):
        load_mnist_idx(tmp_path, images, labels)


def test_idx_corrupt_gzip(tmp_path: Path) -> None:
    images, labels = _small_idx_pair(tmp_path, compress=True)
    raw = (tmp_path / images).read_bytes()
    (tmp_path / images).write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InvalidDatasetError, match="not a readable gzip file"):
        load_mnist_idx(tmp_path, images, labels)


def test_idx_count_mismatch(tmp_path: Path) -> None:
    _write_idx(tmp_path / "img", 2051, np.zeros((3, 2, 2)))
    _write_idx(tmp_path / "lab", 2049, np.zeros(4))
    with pytest.raises(InvalidDatasetError, match="3 images but .* 4 labels"):
        load_mnist_idx(tmp_path, "img", "lab")


def test_idx_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="MNIST image file not found"):
        load_mnist_idx(tmp_path)


# --- Covertype -------------------------------------------------------------------------------------


def test_real_covertype(covertype: Dataset) -> None:
    assert len(covertype) == 92_962 and covertype.feature_shape == (54,)
    assert covertype.num_classes == 7 and set(np.unique(covertype.labels).tolist()) == set(range(7))
    assert covertype.features.min() >= 0.0 and covertype.features.max() <= 1.0
    assert covertype.sample_ids[:2] == ("cov-0", "cov-1") and covertype.owner_ids == covertype.sample_ids


def test_covertype_subsample_keeps_file_ids(covertype: Dataset) -> None:
    part = subsample(covertype, 300, seed=3)
    assert len(part) == 300 and part.num_classes == 7
    rows = covertype.indices_of(part.sample_ids)
    assert np.array_equal(part.features, covertype.features[rows])
    assert part.sample_ids == tuple(f"cov-{i}" for i in rows)


def test_covertype_loader_subsample_argument(tmp_path: Path) -> None:
    # A small file in the Covertype layout: exercises load_covertype(n=...) without the 93k-row parse.
    rows: list[list[object]] = [[i / 10, 1 - i / 10, i % 7 + 1] for i in range(10)]
    path = _write_csv(tmp_path / "cov.csv", ["a", "b", "Cover_Type"], rows)
    ds = load_covertype(path, n=4, seed=1)
    assert len(ds) == 4 and ds.num_classes == 7 and ds.name == "covertype"
    assert ds.sample_ids == load_covertype(path, n=4, seed=1).sample_ids
    assert all(s.startswith("cov-") for s in ds.sample_ids)


# --- CSV -------------------------------------------------------------------------------------------

HEADER = ["sample_id", "owner_id", "f1", "f2", "label"]
ROWS: list[list[object]] = [
    ["a", "u1", 0.5, 1.0, "cat"],
    ["b", "u1", 0.25, -2.0, "dog"],
    ["c", "u2", 1.5, 3.0, "cat"],
]


def test_csv_round_trip(tmp_path: Path) -> None:
    ds = load_table(_write_csv(tmp_path / "t.csv", HEADER, ROWS))
    assert ds.sample_ids == ("a", "b", "c") and ds.owner_ids == ("u1", "u1", "u2")
    assert np.allclose(ds.features, [[0.5, 1.0], [0.25, -2.0], [1.5, 3.0]])
    assert ds.labels.tolist() == [0, 1, 0] and ds.num_classes == 2  # sorted: cat=0, dog=1
    assert ds.class_names == ("cat", "dog")
    assert ds.name == "t"
    assert ds.take([1]).class_names == ("cat", "dog") and ds.without(["a"]).class_names == ("cat", "dog")


def test_csv_whole_number_labels_are_integers_and_others_are_refused(tmp_path: Path) -> None:
    rows: list[list[object]] = [["a", "u", 1, 2, "1.0"], ["b", "u", 2, 3, "0.0"], ["c", "v", 3, 4, "2e0"]]
    ds = load_table(_write_csv(tmp_path / "w.csv", HEADER, rows))
    assert ds.labels.tolist() == [1, 0, 2] and ds.num_classes == 3 and ds.class_names is None
    rows[2][4] = "0.5"  # a score, not a class
    with pytest.raises(InvalidDatasetError, match="label 0.5 at data row 2 .* is not a whole number"):
        load_table(_write_csv(tmp_path / "f.csv", HEADER, rows))


def test_csv_empty_label_is_refused(tmp_path: Path) -> None:
    rows = [list(r) for r in ROWS]
    rows[1][4] = " "
    with pytest.raises(InvalidDatasetError, match="label of data row 1 .* is empty"):
        load_table(_write_csv(tmp_path / "e.csv", HEADER, rows))


def test_class_names_must_be_distinct_and_at_most_one_per_class() -> None:
    args = (("a", "b"), ("u", "u"), np.zeros((2, 1)), np.array([0, 1]), 2)
    assert Dataset(*args, class_names=("no", "yes")).class_names == ("no", "yes")
    for names in (("x", "x"), ("a", "b", "c")):
        with pytest.raises(InvalidDatasetError, match="class names for 2 classes"):
            Dataset(*args, class_names=names)


def test_sklearn_sets_name_their_classes_unless_the_names_are_the_indices() -> None:
    assert load_sklearn("iris").class_names == ("setosa", "versicolor", "virginica")
    assert load_sklearn("digits").class_names is None


def test_csv_gzip_and_generated_ids(tmp_path: Path) -> None:
    plain = _write_csv(tmp_path / "t.csv", ["x", "y", "label"], [[1, 2, 3], [4, 5, 1], [7, 8, 2]])
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    ds = load_table(gz, id_column=None, owner_column=None, label_offset=1)
    assert ds.sample_ids == ("row-0", "row-1", "row-2") and ds.owner_ids == ds.sample_ids
    assert ds.labels.tolist() == [2, 0, 1] and ds.num_classes == 3


def test_csv_corrupt_gzip(tmp_path: Path) -> None:
    plain = _write_csv(tmp_path / "t.csv", HEADER, ROWS * 200)
    packed = gzip.compress(plain.read_bytes())
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InvalidDatasetError, match="not a readable CSV file"):
        load_table(gz)


def test_csv_feature_columns_and_num_classes(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", HEADER, ROWS)
    ds = load_table(path, feature_columns=["f2"], num_classes=5)
    assert ds.feature_shape == (1,) and ds.features[:, 0].tolist() == [1.0, -2.0, 3.0]
    assert ds.num_classes == 5


def test_csv_max_rows(tmp_path: Path) -> None:
    ds = load_table(_write_csv(tmp_path / "t.csv", HEADER, ROWS), max_rows=2)
    assert ds.sample_ids == ("a", "b")


def test_csv_missing_column_named(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", HEADER, ROWS)
    with pytest.raises(InvalidDatasetError, match=r"\['target'\] not found.*'f1', 'f2'"):
        load_table(path, label_column="target")


def test_csv_missing_id_column_hints_none(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", ["f1", "label"], [[1, 0], [2, 1]])
    with pytest.raises(InvalidDatasetError, match="sample_id.*id_column=None"):
        load_table(path)


def test_csv_non_numeric_feature_names_column_and_row(tmp_path: Path) -> None:
    rows = [list(r) for r in ROWS]
    rows[2][3] = "high"
    path = _write_csv(tmp_path / "t.csv", HEADER, rows)
    with pytest.raises(InvalidDatasetError, match=r"column 'f2' has non-numeric value 'high' at data row 2"):
        load_table(path)


def test_csv_duplicate_ids(tmp_path: Path) -> None:
    rows = [list(r) for r in ROWS]
    rows[2][0] = "a"
    path = _write_csv(tmp_path / "t.csv", HEADER, rows)
    with pytest.raises(InvalidDatasetError, match="'a'.*rows 0 and 2.*unique"):
        load_table(path)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_csv_non_finite_features(tmp_path: Path, bad: str) -> None:
    rows = [list(r) for r in ROWS]
    rows[1][2] = bad
    path = _write_csv(tmp_path / "t.csv", HEADER, rows)
    with pytest.raises(InvalidDatasetError, match="'b'.*NaN or infinite"):
        load_table(path)


def test_csv_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("")
    with pytest.raises(InvalidDatasetError, match="is empty"):
        load_table(path)


def test_csv_header_only(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", HEADER, [])
    with pytest.raises(InvalidDatasetError, match="no data rows"):
        load_table(path)


def test_csv_ragged_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("sample_id,owner_id,f1,label\na,u,1,0\nb,u,2\n")
    with pytest.raises(InvalidDatasetError, match="data row 1 .*3 fields, the header has 4"):
        load_table(path)


def test_csv_negative_label_after_offset(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", ["f", "label"], [[1, 0], [2, 1]])
    with pytest.raises(InvalidDatasetError, match="label -1 at data row 0.*label_offset=1"):
        load_table(path, id_column=None, owner_column=None, label_offset=1)


def test_unsupported_suffix_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{}")
    with pytest.raises(InvalidDatasetError, match="unsupported file type"):
        load_table(path)
    with pytest.raises(FileNotFoundError, match="table file not found"):
        load_table(tmp_path / "absent.csv")


# --- NPZ and Parquet -------------------------------------------------------------------------------


def test_npz_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    features = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    np.savez(
        path,
        features=features,
        labels=np.array([0, 2, 1]),
        sample_ids=np.array(["x", "y", "z"]),
        num_classes=np.array(4),
    )
    ds = load_table(path)
    assert ds.sample_ids == ("x", "y", "z") and ds.owner_ids == ds.sample_ids
    assert ds.feature_shape == (2, 2) and np.array_equal(ds.features, features)
    assert ds.num_classes == 4 and ds.name == "d"


def test_npz_refuses_object_arrays(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    ids = np.array(["x", "y"], dtype=object)
    np.savez(path, features=np.zeros((2, 2)), labels=np.array([0, 1]), sample_ids=ids)
    with pytest.raises(InvalidDatasetError, match="'sample_ids' is an object"):
        load_table(path)


def test_npz_refuses_bytes_ids(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, features=np.zeros((2, 2)), labels=np.array([0, 1]), owner_ids=np.array([b"a", b"b"]))
    with pytest.raises(InvalidDatasetError, match="'owner_ids'.*unicode"):
        load_table(path)


def test_npz_missing_arrays_listed(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, X=np.zeros((2, 2)), labels=np.array([0, 1]))
    with pytest.raises(InvalidDatasetError, match=r"\['features'\] not found.*\['X', 'labels'\]"):
        load_table(path)


def test_parquet_round_trip_and_type_check(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"sample_id": ["p", "q"], "f": [0.1, 0.2], "g": [1, 2], "label": ["b", "a"]})
    pq.write_table(table, tmp_path / "d.parquet")
    ds = load_table(tmp_path / "d.parquet", owner_column=None)
    assert ds.sample_ids == ("p", "q") and ds.labels.tolist() == [1, 0] and ds.class_names == ("a", "b")
    assert np.allclose(ds.features, [[0.1, 1.0], [0.2, 2.0]])
    bad = pa.table({"f": ["x", "y"], "label": [0, 1]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(InvalidDatasetError, match="column 'f' has type string"):
        load_table(tmp_path / "bad.parquet", id_column=None, owner_column=None)


# --- scikit-learn and synthetic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rows", "features", "classes"),
    [("digits", 1797, 64, 10), ("breast_cancer", 569, 30, 2), ("wine", 178, 13, 3), ("iris", 150, 4, 3)],
)
def test_sklearn_loaders(name: str, rows: int, features: int, classes: int) -> None:
    ds = load_sklearn(name)
    assert (len(ds), ds.num_features, ds.num_classes) == (rows, features, classes)
    assert ds.features.min() == 0.0 and ds.features.max() == 1.0
    assert ds.sample_ids[0] == f"{name}-0" and ds.name == name


def test_sklearn_unknown_name() -> None:
    with pytest.raises(InvalidDatasetError, match="unknown scikit-learn dataset 'mnist'"):
        load_sklearn("mnist")


def test_make_synthetic_seeded_and_balanced() -> None:
    a = make_synthetic(300, 8, 3, seed=5)
    b = make_synthetic(300, 8, 3, seed=5)
    c = make_synthetic(300, 8, 3, seed=6)
    assert np.array_equal(a.features, b.features) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.features, c.features)
    assert np.bincount(a.labels).tolist() == [100, 100, 100]
    assert a.feature_shape == (8,) and a.sample_ids[0] == "syn-00000"


def test_make_synthetic_separation_makes_classes_separable() -> None:
    ds = make_synthetic(600, 10, 4, seed=0, separation=8.0)
    centroids = np.stack([ds.features[ds.labels == c].mean(axis=0) for c in range(4)])
    nearest = np.argmin(((ds.features[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (nearest == ds.labels).mean() > 0.95


def test_make_synthetic_rejects_bad_config() -> None:
    with pytest.raises(InvalidConfigError, match="num_classes >= 2"):
        make_synthetic(10, 2, 1, seed=0)


# --- splits ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def blobs() -> Dataset:
    # Imbalanced classes (120 / 60 / 20) so that stratification is visible.
    base = make_synthetic(200, 3, 3, seed=1)
    labels = np.repeat([0, 1, 2], [120, 60, 20])
    return Dataset(base.sample_ids, base.owner_ids, base.features, labels, 3, name="blobs")


def test_subsample_deterministic(blobs: Dataset) -> None:
    a, b, c = subsample(blobs, 50, seed=7), subsample(blobs, 50, seed=7), subsample(blobs, 50, seed=8)
    assert a.sample_ids == b.sample_ids and a.sample_ids != c.sample_ids
    assert len(set(a.sample_ids)) == 50
    assert list(blobs.indices_of(a.sample_ids)) == sorted(blobs.indices_of(a.sample_ids))  # original order


def test_subsample_matches_documented_algorithm(blobs: Dataset) -> None:
    perm = np.random.Generator(np.random.PCG64(11)).permutation(len(blobs))
    assert subsample(blobs, 30, seed=11).sample_ids == blobs.take(np.sort(perm[:30])).sample_ids


def test_subsample_stratified_proportions(blobs: Dataset) -> None:
    part = subsample(blobs, 50, seed=2, stratify=True)
    assert np.bincount(part.labels).tolist() == [30, 15, 5]


def test_subsample_too_large_or_bad_seed(blobs: Dataset) -> None:
    with pytest.raises(InvalidConfigError, match=r"n must be an integer in \[1, 200\], got 201"):
        subsample(blobs, 201, seed=0)
    with pytest.raises(InvalidConfigError, match="seed"):
        subsample(blobs, 5, seed=-1)
    assert subsample(blobs, 200, seed=0).sample_ids == blobs.sample_ids


@pytest.mark.parametrize(("test_size", "expected"), [(0.25, 50), (40, 40), (0.29, 58)])
@pytest.mark.parametrize("stratify", [False, True])
def test_train_test_split_disjoint_and_covering(
    blobs: Dataset, test_size: float, expected: int, stratify: bool
) -> None:
    train, test = train_test_split(blobs, test_size, seed=4, stratify=stratify)
    assert len(test) == expected and len(train) == len(blobs) - expected
    assert set(train.sample_ids).isdisjoint(test.sample_ids)
    assert set(train.sample_ids) | set(test.sample_ids) == set(blobs.sample_ids)
    again = train_test_split(blobs, test_size, seed=4, stratify=stratify)
    assert again[1].sample_ids == test.sample_ids
    assert train_test_split(blobs, test_size, seed=5, stratify=stratify)[1].sample_ids != test.sample_ids


def test_train_test_split_stratified_counts(blobs: Dataset) -> None:
    _, test = train_test_split(blobs, 0.2, seed=0, stratify=True)
    assert np.bincount(test.labels).tolist() == [24, 12, 4]


@pytest.mark.parametrize("bad", [0, 200, 0.0, 1.0, 0.001, True])
def test_train_test_split_bad_size(blobs: Dataset, bad: float) -> None:
    with pytest.raises(InvalidConfigError, match="test_size"):
        train_test_split(blobs, bad, seed=0)


@pytest.mark.parametrize("stratify", [False, True])
def test_train_test_subsets_disjoint(blobs: Dataset, stratify: bool) -> None:
    train, test = train_test_subsets(blobs, 100, 60, seed=9, stratify=stratify)
    assert (len(train), len(test)) == (100, 60)
    assert set(train.sample_ids).isdisjoint(test.sample_ids)
    with pytest.raises(InvalidConfigError, match="n_test"):
        train_test_subsets(blobs, 150, 51, seed=9)


def test_mnist_subsets_paper_setting() -> None:
    _skip_unless(MNIST_DIR / "t10k-images-idx3-ubyte.gz")
    train, test = mnist_subsets(1000, seed=0)
    assert (len(train), len(test)) == (1000, 400)
    assert set(train.sample_ids).isdisjoint(test.sample_ids)
    again_train, again_test = mnist_subsets(1000, 400, seed=0)
    assert again_train.sample_ids == train.sample_ids and again_test.sample_ids == test.sample_ids
    assert mnist_subsets(1000, 400, seed=1)[0].sample_ids != train.sample_ids


@pytest.mark.parametrize(("sample_ids", "owner_ids", "needle"), [
    (["a", "", "c"], ["u", "u", "v"], "sample id of row 1"),
    (["a", "b", "c"], ["u", "v", ""], "owner id of row 2"),
])
def test_an_empty_id_names_its_row(sample_ids: list[str], owner_ids: list[str], needle: str) -> None:
    with pytest.raises(InvalidDatasetError, match=needle):
        Dataset(tuple(sample_ids), tuple(owner_ids), np.zeros((3, 2)), np.array([0, 1, 0]), 2)
