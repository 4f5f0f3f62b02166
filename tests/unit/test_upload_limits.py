"""Uploaded tables are read as streams under ReadLimits: a gzip bomb is refused while it decompresses and
nothing is written, rows and feature values are capped per block, NPZ headers are checked before any
array is allocated (a forged shape is a 422-class error, never an allocation), and class counts are
bounded by the rows."""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unlearning.data import load_table
from unlearning.data.csv_table import CSV_BLOCK_BYTES, read_csv
from unlearning.data.files import open_decompressed
from unlearning.data.limits import Limit, ReadLimits, TooLargeError, class_limit
from unlearning.data.npz_table import check_npz
from unlearning.errors import InvalidDatasetError

HEADER = "sample_id,owner_id,x,y,label\n"


def _gzip_bomb(path: Path, header: bytes, unit: bytes, decompressed: int) -> Path:
    """A gzip file of ``header`` then ``unit`` repeated to about ``decompressed`` bytes, written in pieces."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = unit * ((1 << 20) // len(unit))
    with path.open("wb") as out:
        out.write(packer.compress(header))
        for _ in range(decompressed // len(block)):
            out.write(packer.compress(block))
        out.write(packer.flush())
    return path


def _rows(n: int, start: int = 0) -> str:
    return "".join(f"s{i},o{i // 3},{i * 0.5},{-i},{i % 3}\n" for i in range(start, start + n))


# --- decompression is capped while it streams ------------------------------------------------------


def test_a_gzip_bomb_is_refused_while_streaming_and_nothing_is_written(tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "bomb.csv.gz", HEADER.encode(), b"\n", 64 << 20)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(TooLargeError, match="decompresses to more than 4,194,304 bytes") as info:
        load_table(bomb, limits=ReadLimits(max_bytes=4 << 20))
    assert info.value.limit is Limit.BYTES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.csv.gz"]  # no decompressed copy


def test_the_decompressed_stream_stops_at_the_cap(tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "zeros.gz", b"", b"\0", 16 << 20)
    read = 0
    with pytest.raises(TooLargeError), open_decompressed(bomb, ReadLimits(max_bytes=1 << 20)) as stream:
        while chunk := stream.read(1 << 16):
            read += len(chunk)
    assert read <= (1 << 20) + (1 << 20)  # at most one buffer past the cap was ever decompressed
    plain = tmp_path / "plain.csv"
    plain.write_bytes(b"a" * 5000)
    with (
        pytest.raises(TooLargeError, match="holds more than 4,096 bytes"),
        open_decompressed(plain, ReadLimits(max_bytes=4096)) as stream,
    ):
        stream.read()


def test_a_binary_bomb_is_named_binary_not_empty(tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "zeros.csv.gz", b"", b"\0", 8 << 20)
    with pytest.raises(InvalidDatasetError, match="binary data"):
        load_table(bomb, limits=ReadLimits(max_bytes=1 << 30))


# --- rows and feature values are capped per block ----------------------------------------------------


def test_rows_past_the_cap_are_refused_at_the_first_block_past_it(tmp_path: Path) -> None:
    # A bomb of valid rows: the row cap trips long before the decompressed cap.
    bomb = _gzip_bomb(tmp_path / "rows.csv.gz", HEADER.encode(), b"s,o,1,2,0\n", 256 << 20)
    limits = ReadLimits(max_bytes=1 << 30, max_rows=50_000)
    with pytest.raises(TooLargeError, match="more than 50,000 data rows") as info:
        load_table(bomb, limits=limits)
    assert info.value.limit is Limit.ROWS


def test_feature_values_past_the_cap_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _rows(1000))
    with pytest.raises(TooLargeError, match="more than 1,000 feature values") as info:
        load_table(path, limits=ReadLimits(max_cells=1000))
    assert info.value.limit is Limit.CELLS
    assert len(load_table(path, limits=ReadLimits(max_rows=1000, max_cells=2000))) == 1000


def test_a_long_id_is_refused_in_the_block_that_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _rows(10) + "o" * 300 + ",u,1,2,0\n")
    with pytest.raises(
        InvalidDatasetError, match=r"column 'sample_id', row 10 .*at most 256 characters, this"
    ):
        load_table(path, limits=ReadLimits(max_text_chars=256))


# --- the streamed CSV keeps the accepted format and its messages --------------------------------------


def test_a_multi_block_gzip_csv_streams_to_the_same_dataset(tmp_path: Path) -> None:
    text = "\ufeff" + HEADER + "\n" + _rows(80_000) + '"s-quoted",o,1.5,2,0\n'
    plain = tmp_path / "t.csv"
    plain.write_text(text)
    packed = tmp_path / "t.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    assert len(text) > 2 * CSV_BLOCK_BYTES  # several blocks
    a, b = load_table(plain), load_table(packed)
    assert len(a) == 80_001 and a.sample_ids == b.sample_ids and a.sample_ids[-1] == "s-quoted"
    assert a.features.dtype == np.float32 and np.array_equal(a.features, b.features)
    assert a.features[7].tolist() == [3.5, -7.0] and a.num_classes == 3
    assert len(load_table(packed, max_rows=10)) == 10


def test_bad_cells_in_a_later_block_are_named_by_column_and_data_row(tmp_path: Path) -> None:
    body = _rows(50_000)
    path = tmp_path / "t.csv"
    path.write_text(HEADER + body + "bad,u,1,high,0\n" + _rows(10, 50_001))
    with pytest.raises(
        InvalidDatasetError, match="column 'y' has non-numeric value 'high' at data row 50000"
    ):
        load_table(path)
    path.write_text(HEADER + body + "bad,u,,1,0\n")
    with pytest.raises(InvalidDatasetError, match="column 'x' has a missing value .* at data row 50000"):
        load_table(path)
    path.write_text(HEADER + body + "bad,u,1\n")
    with pytest.raises(InvalidDatasetError, match="data row 50000 .* has 3 fields, the header has 5"):
        load_table(path)


def test_a_row_longer_than_a_block_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "a,u,1,2," + "9" * (2 * CSV_BLOCK_BYTES + 10) + "\n")
    with pytest.raises(InvalidDatasetError, match="longer than"):
        read_csv(
            path,
            id_column="sample_id",
            owner_column="owner_id",
            label_column="label",
            feature_columns=None,
            max_rows=None,
        )


def test_parquet_declared_rows_are_checked_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": np.arange(5000.0), "label": np.arange(5000) % 2}), path)
    with pytest.raises(TooLargeError, match="more than 1,000 data rows"):
        load_table(path, id_column=None, owner_column=None, limits=ReadLimits(max_rows=1000))
    ds = load_table(path, id_column=None, owner_column=None, limits=ReadLimits(max_rows=5000))
    assert len(ds) == 5000 and ds.features.dtype == np.float32


# --- NPZ headers before allocation ----------------------------------------------------------------


def _npy(shape: tuple[int, ...], dtype: str = "<f8", payload: bytes = b"\0" * 64) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + payload


def _archive(path: Path, **entries: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(f"{name}.npy", data)
    return path


def test_a_forged_npz_header_is_refused_before_allocation(tmp_path: Path) -> None:
    labels = io.BytesIO()
    np.save(labels, np.zeros(2, dtype=np.int64))
    path = _archive(tmp_path / "forged.npz", features=_npy((10**9, 1000)), labels=labels.getvalue())
    with pytest.raises(InvalidDatasetError) as info:
        load_table(path, limits=ReadLimits(max_bytes=2 << 30))
    message = str(info.value)
    assert not isinstance(info.value, TooLargeError)
    assert "(1000000000, 1000)" in message and "8,000,000,000,000 bytes" in message
    assert "holds 64 bytes" in message and "2,147,483,648" in message  # the claim, the entry, the limit
    with pytest.raises(InvalidDatasetError, match="claims shape"):
        load_table(path)  # without limits too: the claim is checked against the entry


def test_npz_rows_cells_ids_and_total_size_are_checked_from_the_headers(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    ids = np.array([f"s{i}" for i in range(100)])
    np.savez(path, features=np.zeros((100, 5)), labels=np.arange(100) % 2, sample_ids=ids)
    with pytest.raises(TooLargeError, match="more than 99 data rows"):
        load_table(path, limits=ReadLimits(max_rows=99))
    with pytest.raises(TooLargeError, match="more than 499 feature values"):
        load_table(path, limits=ReadLimits(max_cells=499))
    with pytest.raises(TooLargeError, match="decompresses to more than 1,000 bytes"):
        load_table(path, limits=ReadLimits(max_bytes=1000))
    with pytest.raises(InvalidDatasetError, match="'sample_ids' holds strings of up to 3 characters"):
        load_table(path, limits=ReadLimits(max_text_chars=2))
    assert len(load_table(path, limits=ReadLimits(max_rows=100, max_cells=500, max_text_chars=3))) == 100


def test_npz_object_arrays_are_refused_from_their_header(tmp_path: Path) -> None:
    path = tmp_path / "o.npz"
    owners = np.array(["a", None], dtype=object)
    np.savez(path, features=np.zeros((2, 2)), labels=np.array([0, 1]), owner_ids=owners)
    with pytest.raises(InvalidDatasetError, match="'owner_ids' is an object .pickled. array"):
        check_npz(path, ReadLimits())


# --- class counts are bounded by the rows -----------------------------------------------------------


def test_class_limit_is_the_rows_with_a_small_table_allowance() -> None:
    assert class_limit(2) == 1_000 and class_limit(2_000) == 2_000 and class_limit(10**7) == 100_000


def test_one_huge_label_cannot_make_a_many_class_table(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _rows(1999) + "last,u,1,2,99999\n")
    with pytest.raises(
        InvalidDatasetError, match=r"label 99999 at data row 1999 .*100,000 classes for 2,000 rows"
    ):
        load_table(path)
    with pytest.raises(InvalidDatasetError, match=r"num_classes=100,000 for 2,000 rows, more than the 2,000"):
        load_table(_ok(tmp_path), num_classes=100_000)
    named = tmp_path / "named.csv"
    named.write_text(HEADER + _rows(1999) + "last,u,1,2,c99999\n")
    ds = load_table(named)  # as names the labels are numbered 0..k-1
    assert ds.num_classes == 4 and ds.class_names == ("0", "1", "2", "c99999")


def _ok(tmp_path: Path) -> Path:
    path = tmp_path / "ok.csv"
    path.write_text(HEADER + _rows(2000))
    return path


def test_an_npz_num_classes_scalar_is_bounded_by_the_rows_too(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, features=np.zeros((10, 2)), labels=np.arange(10) % 2, num_classes=np.array(5000))
    with pytest.raises(InvalidDatasetError, match="num_classes=5,000 for 10 rows, more than the 1,000"):
        load_table(path)


def test_a_label_of_a_thousand_digits_is_refused_without_converting_it(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _rows(3) + "big,u,1,2," + "9" * 1000 + "\n")
    with pytest.raises(InvalidDatasetError, match="data row 3 .* integer of 1,000 digits: too large"):
        load_table(path)
