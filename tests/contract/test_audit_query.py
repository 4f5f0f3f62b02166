"""GET /v1/audit/events: a time window that is empty by construction is refused, not answered empty."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_since_not_before_until_is_a_422_naming_both(embedded: TestClient) -> None:
    for since, until in (
        ("2026-12-01T00:00:00Z", "2026-01-01T00:00:00Z"),
        ("2026-05-05T10:00:00", "2026-05-05T12:00:00+02:00"),
    ):
        r = embedded.get("/v1/audit/events", params={"since": since, "until": until})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "validation_error"
        assert "since" in error["message"] and "before until" in error["message"], error


def test_a_real_window_still_answers(embedded: TestClient) -> None:
    everything = embedded.get("/v1/audit/events", params={"limit": 1000}).json()["events"]
    assert everything, "the trained model logged nothing"
    first = everything[0]["at"]
    window = embedded.get(
        "/v1/audit/events", params={"since": first, "until": "9999-01-01T00:00:00Z", "limit": 1000}
    )
    assert window.status_code == 200, window.text
    assert [e["id"] for e in window.json()["events"]] == [e["id"] for e in everything]
