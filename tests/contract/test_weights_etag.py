"""GET /v1/models/{id}/weights with If-None-Match: 304 while the served weights are the ones the caller
holds, the new weights (200) once a deletion released others."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.runtime import Runtime
from tests.contract.conftest import forget_owner


def _weights(client: TestClient, if_none_match: str | None = None) -> tuple[int, str, str, bytes]:
    headers = {"If-None-Match": if_none_match} if if_none_match is not None else {}
    r = client.get("/v1/models/1/weights", headers=headers)
    return r.status_code, r.headers["ETag"], r.headers["X-Model-Version"], r.content


def test_a_poll_with_the_current_etag_answers_304_until_the_weights_change(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, _ = fresh
    status, etag, seq, body = _weights(client)
    assert status == 200 and body and seq == "1"
    assert etag == f'"{client.get("/v1/models/1/versions/1").json()["weights_sha256"]}"'

    for held in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        assert _weights(client, held) == (304, etag, "1", b""), held
    assert _weights(client, '"other"')[0] == 200

    forget_owner(client, "owner-00003")
    status, new_etag, seq, body = _weights(client, etag)
    assert status == 200 and body and seq == "2" and new_etag != etag
    assert _weights(client, new_etag) == (304, new_etag, "2", b"")
