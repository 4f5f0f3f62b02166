"""Table uploads refuse ids no deletion request could name, and a file name's control characters never
reach the dataset's name (embedded app)."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from service.db.tables import ID_LENGTH
from tests.contract.conftest import api_error

HEADER = "sample_id,owner_id,x,label\n"


def _count(client: TestClient) -> int:
    return len(client.get("/v1/datasets", params={"limit": 500}).json()["datasets"])


def _upload(client: TestClient, filename: str, data: bytes, **params: Any) -> Any:
    return client.post(
        "/v1/datasets", files={"file": (filename, data, "application/octet-stream")}, params=params
    )


def _csv(first_id: str, first_owner: str) -> bytes:
    return f'{HEADER}"{first_id}","{first_owner}",1,0\nb,u,2,1\nc,v,3,0\n'.encode()


def _npz(sample_ids: list[str], owner_ids: list[str]) -> bytes:
    buf = io.BytesIO()
    n = len(sample_ids)
    np.savez(
        buf,
        features=np.arange(2 * n, dtype=np.float64).reshape(n, 2),
        labels=np.arange(n) % 2,
        sample_ids=np.asarray(sample_ids),
        owner_ids=np.asarray(owner_ids),
    )
    return buf.getvalue()


def _parquet(sample_ids: list[str], owner_ids: list[str]) -> bytes:
    n = len(sample_ids)
    table = pa.table(
        {
            "key": sample_ids,
            "who": owner_ids,
            "x": [float(i) for i in range(n)],
            "label": [i % 2 for i in range(n)],
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_a_csv_id_longer_than_a_deletion_can_name_is_refused_and_shown_cut(client: TestClient) -> None:
    before = _count(client)
    long_id = "s" * (ID_LENGTH + 1)
    message = api_error(_upload(client, "t.csv", _csv(long_id, "o")), 422, "invalid_dataset")
    assert "column 'sample_id'" in message and f"at most {ID_LENGTH} characters" in message
    assert "row 0" in message and f"{ID_LENGTH + 1} characters" in message
    assert long_id not in message and "s" * 80 in message  # the id, cut
    assert _count(client) == before  # nothing stored

    owner = api_error(_upload(client, "t.csv", _csv("a", "o" * 300)), 422, "invalid_dataset")
    assert "column 'owner_id'" in owner and "owner id" in owner
    # ID_LENGTH itself is fine.
    assert _upload(client, "ok.csv", _csv("s" * ID_LENGTH, "o" * ID_LENGTH)).status_code == 201


def test_a_csv_id_with_a_control_character_is_refused_naming_the_column(client: TestClient) -> None:
    before = _count(client)
    message = api_error(_upload(client, "t.csv", _csv("a", "own\ter")), 422, "invalid_dataset")
    assert "column 'owner_id'" in message and "'own\\ter'" in message and "control character" in message
    renamed = api_error(
        _upload(
            client,
            "t.csv",
            b'id,who,x,label\n"a\x01",u,1,0\nb,u,2,1\n',
            id_column="id",
            owner_column="who",
        ),
        422,
        "invalid_dataset",
    )
    assert "column 'id'" in renamed and "'a\\x01'" in renamed
    assert _count(client) == before


def test_empty_and_reserved_ids_are_refused(client: TestClient) -> None:
    empty = api_error(
        _upload(client, "t.csv", b"sample_id,owner_id,x,label\na,,1,0\n"), 422, "invalid_dataset"
    )
    assert "empty" in empty
    reserved = api_error(_upload(client, "t.csv", _csv("~erased:3", "o")), 422, "invalid_dataset")
    assert "'~erased:'" in reserved


def test_npz_and_parquet_ids_are_checked_too(client: TestClient) -> None:
    before = _count(client)
    npz = api_error(_upload(client, "t.npz", _npz(["a", "b"], ["u", "v\x7f"])), 422, "invalid_dataset")
    assert "array 'owner_ids'" in npz and "row 1" in npz and "control character" in npz
    npz_empty = api_error(_upload(client, "t.npz", _npz(["a", ""], ["u", "v"])), 422, "invalid_dataset")
    assert "empty" in npz_empty
    parquet = api_error(
        _upload(
            client, "t.parquet", _parquet(["a", "b" * 300], ["u", "v"]), id_column="key", owner_column="who"
        ),
        422,
        "invalid_dataset",
    )
    assert "column 'key'" in parquet and f"at most {ID_LENGTH}" in parquet
    assert _count(client) == before
    ok = _upload(client, "t.parquet", _parquet(["a", "b"], ["u", "v"]), id_column="key", owner_column="who")
    assert ok.status_code == 201, ok.text


def test_every_stored_subject_can_be_named_by_a_deletion(client: TestClient) -> None:
    """What an upload accepts, a deletion accepts: the dataset erases the subject itself (no model)."""
    r = _upload(client, "fine.csv", _csv("s" * ID_LENGTH, "ünïcødé owner"))
    assert r.status_code == 201, r.text
    erased = client.post(
        f"/v1/datasets/{r.json()['id']}/deletions",
        json={"owner_ids": ["ünïcødé owner"], "sample_ids": ["s" * ID_LENGTH]},
        headers={"Idempotency-Key": "upload-ids-1"},
    )
    assert erased.status_code == 200 and erased.json()["erased_rows"] == 1, erased.text


def _multipart(filename: bytes, data: bytes) -> tuple[bytes, dict[str, str]]:
    """A multipart body with the file name as raw bytes (httpx percent-encodes control characters)."""
    body = (
        b'--XBOUNDARYX\r\nContent-Disposition: form-data; name="file"; filename="'
        + filename
        + b'"\r\nContent-Type: text/csv\r\n\r\n'
        + data
        + b"\r\n--XBOUNDARYX--\r\n"
    )
    return body, {"content-type": "multipart/form-data; boundary=XBOUNDARYX"}


def test_a_file_name_with_control_characters_gives_a_printable_dataset_name(client: TestClient) -> None:
    body, headers = _multipart(b"a\x01b\tc.csv", _csv("a", "o"))
    r = client.post("/v1/datasets", content=body, headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "abc"
    assert client.get(f"/v1/datasets/{r.json()['id']}").json()["name"] == "abc"

    named = client.post("/v1/datasets", content=body, headers=headers, params={"name": "chosen"})
    assert named.status_code == 201 and named.json()["name"] == "chosen"  # an explicit name still wins
    refused = client.post("/v1/datasets", content=body, headers=headers, params={"name": "a\x01b"})
    assert refused.status_code == 422  # and an explicit one is held to its pattern, as before

    only_control, headers = _multipart(b"\x01\x02", _csv("a", "o"))
    r = client.post("/v1/datasets", content=only_control, headers=headers, params={"format": "csv"})
    assert r.status_code == 201 and r.json()["name"] == "upload", r.text


TU = b"2\n3 0\n0 2 1 2\n1 1 0\n0 1 0\n2 1\n1 1 1\n0 1 0\n"  # two small graphs, TU text format


def test_graph_names_from_a_file_name_or_the_file_are_printable_too(client: TestClient) -> None:
    body, headers = _multipart(b"g\x1bx.txt", TU)
    r = client.post("/v1/datasets", content=body, headers=headers, params={"format": "tu"})
    assert r.status_code == 201 and r.json()["name"] == "gx", r.text
    graph = {
        "format": "lethe.node_graph.v1",
        "name": "ti\tny",
        "num_classes": 2,
        "num_features": 1,
        "nodes": [
            {"id": "a", "label": 0, "split": "train", "owner": "alice", "features": [1.0]},
            {"id": "b", "label": 1, "split": "train", "owner": "bob", "features": [0.0]},
        ],
        "edges": [["a", "b"]],
    }
    r = client.post(
        "/v1/datasets", files={"file": ("g.json", json.dumps(graph).encode(), "application/json")}
    )
    assert r.status_code == 201 and r.json()["name"] == "tiny", r.text
