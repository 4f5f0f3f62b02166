"""Hostile uploads through the API (embedded app): a gzip bomb is a 413 naming the setting, refused while it
streams; rows and feature values past their limits are a 413; a forged NPZ header is a 422, never a 500;
one stray label cannot make a many-class table; ids follow one rule (NFC, case kept, invisible and
bidirectional control characters refused) at upload and at deletion."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.errors import ApiError
from service.graphs import upload as graph_upload
from service.runtime import Runtime
from service.settings import Settings
from tests.contract.conftest import api_error
from tests.databases import fresh_database_url

HEADER = b"sample_id,owner_id,x,label\n"
NFC = "jos\u00e9"
NFD = "jose\u0301"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An embedded app with small upload limits: 8 MiB decompressed, 20,000 rows, 40,000 feature values."""
    settings = Settings(
        mode="embedded",
        var_dir=tmp_path_factory.mktemp("hostile"),
        database_url=fresh_database_url(),
        demo_model=False,
        max_upload_bytes=1024 * 1024,
        max_decompressed_bytes=8 * 1024 * 1024,
        max_upload_rows=20_000,
        max_upload_cells=40_000,
    )
    with TestClient(create_app(runtime=Runtime(settings))) as http:
        yield http


def _count(client: TestClient) -> int:
    return len(client.get("/v1/datasets", params={"limit": 500}).json()["datasets"])


def _upload(client: TestClient, filename: str, data: bytes, **params: Any) -> Any:
    return client.post(
        "/v1/datasets", files={"file": (filename, data, "application/octet-stream")}, params=params
    )


def _gzip(header: bytes, unit: bytes, decompressed: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = unit * ((1 << 20) // len(unit))
    return (
        packer.compress(header)
        + b"".join(packer.compress(block) for _ in range(decompressed // len(block)))
        + packer.flush()
    )


def _csv(rows: list[tuple[str, str, float, object]]) -> bytes:
    lines = [f'"{s}","{o}",{x},{label}' for s, o, x, label in rows]
    return HEADER + ("\n".join(lines) + "\n").encode()


def _erase(client: TestClient, dataset_id: int, key: str, **subjects: list[str]) -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/deletions", json=subjects, headers={"Idempotency-Key": key}
    )


def test_a_gzip_bomb_is_refused_with_a_413_naming_the_setting(client: TestClient) -> None:
    before = _count(client)
    blank = _gzip(HEADER + b"a,u,1,0\n", b"\n", 64 << 20)  # 64 MiB of blank lines: only the byte cap trips
    message = api_error(_upload(client, "bomb.csv.gz", blank), 413, "payload_too_large")
    assert "bomb.csv.gz decompresses to more than 8,388,608 bytes" in message
    assert "LETHE_MAX_DECOMPRESSED_BYTES" in message and "/tmp" not in message
    rows = _gzip(HEADER, b"a,u,1,0\n", 64 << 20)  # valid rows: the row cap trips first
    message = api_error(_upload(client, "rows.csv.gz", rows), 413, "payload_too_large")
    assert "more than 20,000 data rows" in message and "LETHE_MAX_UPLOAD_ROWS" in message
    zeros = _gzip(b"", b"\0", 64 << 20)
    assert "binary data" in api_error(_upload(client, "zeros.csv.gz", zeros), 422, "invalid_dataset")
    assert _count(client) == before


def test_a_graph_parsed_whole_has_a_text_bound_of_its_own(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _count(client)
    head = b'{"format": "lethe.node_graph.v1", "num_classes": 2, "num_features": 1, "nodes": ['
    graph = _gzip(head, b" ", 16 << 20)  # 16 MiB of whitespace inside the JSON
    message = api_error(_upload(client, "g.json.gz", graph), 413, "payload_too_large")
    assert "LETHE_MAX_DECOMPRESSED_BYTES" in message  # the deployment's 8 MiB is the tighter bound
    monkeypatch.setattr(graph_upload, "MAX_GRAPH_TEXT_BYTES", 4 << 20)
    message = api_error(_upload(client, "g.json.gz", graph), 413, "payload_too_large")
    assert "at most 4,194,304 bytes of text" in message and "NPZ graph format" in message
    assert _count(client) == before


def test_feature_values_past_the_limit_are_a_413(client: TestClient) -> None:
    wide = b"sample_id,owner_id," + b",".join(b"f%d" % i for i in range(10)) + b",label\n"
    body = wide + b"".join(b"s%d,o,%s,0\n" % (i, b",".join([b"1"] * 10)) for i in range(5000))
    message = api_error(_upload(client, "wide.csv", body), 413, "payload_too_large")
    assert "more than 40,000 feature values" in message and "LETHE_MAX_UPLOAD_CELLS" in message


def _npy_header(shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 64


def _forged(**extra: bytes) -> bytes:
    labels = io.BytesIO()
    np.save(labels, np.zeros(2, dtype=np.int64))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("features.npy", _npy_header((10**9, 1000)))
        archive.writestr("labels.npy", labels.getvalue())
        for name, data in extra.items():
            archive.writestr(f"{name}.npy", data)
    return buf.getvalue()


def test_a_forged_npz_header_is_a_422_naming_the_claim_and_the_limit(client: TestClient) -> None:
    message = api_error(_upload(client, "forged.npz", _forged()), 422, "invalid_dataset")
    assert "forged.npz: array 'features' claims shape (1000000000, 1000)" in message
    assert "8,388,608 bytes" in message and "/tmp" not in message
    graph_format = io.BytesIO()
    np.save(graph_format, np.array("lethe.node_graph.v1"))
    graph = _forged(format=graph_format.getvalue())  # told apart as a graph archive: the same check
    assert "claims shape" in api_error(_upload(client, "g.npz", graph), 422, "invalid_dataset")


def test_one_stray_label_cannot_make_a_100000_class_table(client: TestClient) -> None:
    rows = [(f"s{i}", f"o{i}", float(i), i % 3) for i in range(1999)] + [("s1999", "o", 1.0, 99999)]
    message = api_error(_upload(client, "labels.csv", _csv(rows)), 422, "invalid_dataset")
    assert "label 99999 at data row 1999" in message and "2,000 classes" in message
    declared = [(f"s{i}", f"o{i}", float(i), i % 3) for i in range(2000)]
    message = api_error(
        _upload(client, "declared.csv", _csv(declared), num_classes=100_000), 422, "invalid_dataset"
    )
    assert "num_classes=100,000 for 2,000 rows" in message
    ok = _upload(client, "ok.csv", _csv(declared))
    assert ok.status_code == 201 and ok.json()["num_classes"] == 3, ok.text


def test_nfd_and_nfc_forms_are_one_subject_at_upload_and_at_deletion(client: TestClient) -> None:
    rows = [(NFD, NFD, 1.0, 0), ("b", NFC, 2.0, 1), ("c", "Alice", 3.0, 0), ("d", "alice", 4.0, 1)]
    r = _upload(client, "ids.csv", _csv(rows))
    assert r.status_code == 201, r.text
    dataset = r.json()["id"]
    # One deletion in the other form forgets both rows of the owner, and the NFD-named sample.
    erased = _erase(client, dataset, "nfc-1", owner_ids=[NFD])
    assert erased.status_code == 200 and erased.json()["erased_rows"] == 2, erased.text
    # Case is kept: 'alice' is not 'Alice'.
    erased = _erase(client, dataset, "nfc-2", owner_ids=["alice"])
    assert erased.status_code == 200 and erased.json()["erased_rows"] == 1, erased.text
    assert client.get(f"/v1/datasets/{dataset}").json()["erased_rows"] == 3


def test_ids_that_are_one_id_once_normalised_are_refused(client: TestClient) -> None:
    rows = [(NFC, "u", 1.0, 0), ("b", "u", 2.0, 1), (NFD, "v", 3.0, 0)]
    message = api_error(_upload(client, "dup.csv", _csv(rows)), 422, "invalid_dataset")
    assert "rows 0 and 2" in message and "NFC" in message


@pytest.mark.parametrize(("value", "code"), [("a\u200bb", "U+200B"), ("x\u202ey", "U+202E")])
def test_invisible_characters_are_refused_at_upload_and_at_deletion(
    client: TestClient, value: str, code: str
) -> None:
    rows = [("a", "u", 1.0, 0), ("b", value, 2.0, 1)]
    message = api_error(_upload(client, "bidi.csv", _csv(rows)), 422, "invalid_dataset")
    assert "column 'owner_id', row 1" in message and code in message and "position 1" in message
    r = _upload(client, "fine.csv", _csv([("a", "u", 1.0, 0), ("b", "v", 2.0, 1)]))
    assert r.status_code == 201, r.text
    message = api_error(
        _erase(client, r.json()["id"], f"bidi-{code}", owner_ids=["u", value]), 422, "validation_error"
    )
    assert "owner_ids.1" in message and code in message and "position 1" in message
    assert value not in message  # the refusal names the character, not the subject


def test_graph_ids_are_normalised_too(client: TestClient) -> None:
    graph = {
        "format": "lethe.node_graph.v1",
        "num_classes": 2,
        "num_features": 1,
        "nodes": [
            {"id": NFD, "label": 0, "split": "train", "owner": NFD, "features": [1.0]},
            {"id": "b", "label": 1, "split": "train", "owner": "bob", "features": [0.0]},
        ],
        "edges": [[NFD, "b"]],
    }
    r = client.post(
        "/v1/datasets", files={"file": ("g.json", json.dumps(graph).encode(), "application/json")}
    )
    assert r.status_code == 201, r.text
    graph["nodes"][1]["id"] = NFC  # type: ignore[index]
    graph["edges"] = [[NFD, NFC]]
    message = api_error(
        client.post(
            "/v1/datasets", files={"file": ("g.json", json.dumps(graph).encode(), "application/json")}
        ),
        422,
        "invalid_dataset",
    )
    assert "NFC" in message
    graph["nodes"][1]["id"] = "b\u200b"  # type: ignore[index]
    graph["edges"] = [[NFD, "b\u200b"]]
    message = api_error(
        client.post(
            "/v1/datasets", files={"file": ("g.json", json.dumps(graph).encode(), "application/json")}
        ),
        422,
        "invalid_dataset",
    )
    assert "node id" in message and "U+200B" in message


def test_the_upload_folder_holds_no_decompressed_copy(tmp_path: Path) -> None:
    """parse_upload streams the gzip file: the folder it is given holds the upload only."""
    from service.datasets import service

    path = tmp_path / "upload"
    path.write_bytes(_gzip(HEADER + b"a,u,1,0\n", b"\n", 16 << 20))
    options = service.UploadOptions(None, None, "sample_id", "owner_id", "label", None, None, None, None)
    limits = service.read_limits(Settings(max_decompressed_bytes=4 << 20))
    with pytest.raises(ApiError) as info:
        service.parse_upload(path, "csv", "bomb.csv.gz", options, limits)
    assert info.value.status == 413
    assert [p.stat().st_size for p in tmp_path.iterdir()] == [path.with_suffix(".csv").stat().st_size]
