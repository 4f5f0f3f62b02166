"""Text kept at rest names subjects by position in the request or by keyed hash: stored answers, failure
reasons and the access log (service.subjects.Redactor, service.api.access_log)."""

from __future__ import annotations

import logging

from service.api.access_log import SubjectQueryFilter
from service.db.tables import DeletionRequest
from service.idempotency.service import at_rest
from service.jobs.request_lifecycle import reason_at_rest
from service.subjects import HASH_SHOWN, Redactor, SubjectHasher, hashed_names, request_positions

HASHER = SubjectHasher(b"k" * 32)


def test_positions_name_the_first_place_each_id_appears() -> None:
    body = {
        "owner_ids": ["a", "b", "a"],
        "sample_ids": ["b", "c"],
        "edges": [["c", "d"]],
        "graph_nodes": [["g", "n"]],
        "callback_url": "https://x.example/'a'",
    }
    assert request_positions(body) == {
        "a": "owner_ids[0]",
        "b": "owner_ids[1]",
        "c": "sample_ids[1]",
        "d": "edges[0][1]",
        "g": "graph_nodes[0][0]",
        "n": "graph_nodes[0][1]",
    }
    bulk = {"items": [{"owner_ids": ["x"]}, {"sample_ids": ["y", "x"]}]}
    assert request_positions(bulk) == {"x": "items[0].owner_ids[0]", "y": "items[1].sample_ids[0]"}


def test_a_stored_answer_quotes_no_id_the_request_names() -> None:
    payload = {"owner_ids": ["user0048@clinic.example"], "sample_ids": ["o'brien", "s1", "s10"]}
    answer = {
        "error": {
            "code": "already_forgotten",
            "message": "owner 'user0048@clinic.example' was already forgotten by request 59; "
            "sample \"o'brien\" and sample 's10' and 's1' too (request 's1x' is another thing)",
        }
    }
    stored = at_rest(payload).json(answer)
    message = stored["error"]["message"]
    assert "user0048" not in message and "o'brien" not in message and "'s10'" not in message
    assert message == (
        "owner owner_ids[0] was already forgotten by request 59; sample sample_ids[0] and sample "
        "sample_ids[2] and sample_ids[1] too (request 's1x' is another thing)"
    )
    assert answer["error"]["message"].startswith("owner 'user0048")  # the live answer is left as it is


def test_an_answer_without_quotes_is_not_looked_at() -> None:
    calls: list[int] = []

    def names() -> dict[str, str]:
        calls.append(1)
        return {"x": "owner_ids[0]"}

    redactor = Redactor(names)
    body = {"id": 7, "state": "queued", "results": [{"index": 0, "status": 202}], "at": "2024-01-01"}
    assert redactor.json(body) == body and not calls
    assert redactor.text("owner 'x'") == "owner owner_ids[0]" and calls == [1]
    assert redactor.text("owner 'x' and 'x'") == "owner owner_ids[0] and owner_ids[0]" and calls == [1]


def test_hashed_names_are_prefixes_of_the_keyed_hashes() -> None:
    names = hashed_names(HASHER, ["alice"], ["s1", "alice"])
    assert names["alice"] == f"h:{HASHER.owner('alice')[:HASH_SHOWN]}"  # an owner too: the owner hash
    assert names["s1"] == f"h:{HASHER.sample('s1')[:HASH_SHOWN]}"
    assert (
        Redactor(names).text("sample 's1' was already forgotten")
        == f"sample {names['s1']} was already forgotten"
    )


def test_the_access_log_names_queried_subjects_by_hash() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        (
            "127.0.0.1:5",
            "GET",
            "/v1/audit/events?owner_id=user0048%40clinic.example&limit=5&sample_id=s1",
            "1.1",
            200,
        ),
        None,
    )
    assert SubjectQueryFilter(HASHER).filter(record)
    owner, sample = HASHER.owner("user0048@clinic.example"), HASHER.sample("s1")
    assert record.getMessage() == (
        f'127.0.0.1:5 - "GET /v1/audit/events?owner_id=h:{owner[:HASH_SHOWN]}&limit=5'
        f'&sample_id=h:{sample[:HASH_SHOWN]} HTTP/1.1" 200'
    )
    plain = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, "%s", ("/v1/models?limit=5",), None
    )
    assert SubjectQueryFilter(HASHER).filter(plain) and plain.getMessage() == "/v1/models?limit=5"


class _Models:
    def samples_of_owners(self, model_id: int, owners: list[str]) -> dict[str, list[str]]:
        return {"alice": ["alice-1", "alice-2"]} if "alice" in owners else {}


class _Uow:
    hasher = HASHER
    models = _Models()


def test_a_failure_reason_names_the_requests_subjects_by_hash() -> None:
    request = DeletionRequest(
        id=3, subjects={"owner_ids": ["alice"], "sample_ids": ["s9"], "edges": [["n1", "n2"]]}
    )
    reason = (
        "sample 'alice-2' was already forgotten in this budget epoch; owner 'alice', sample 's9', "
        "edge ['n1', 'n2'], model 'm'"
    )
    kept = reason_at_rest(_Uow(), 1, request, reason)  # type: ignore[arg-type]
    names = hashed_names(HASHER, ["alice"], ["alice-2", "s9", "n1", "n2"])
    assert kept == (
        f"sample {names['alice-2']} was already forgotten in this budget epoch; owner {names['alice']}, "
        f"sample {names['s9']}, edge [{names['n1']}, {names['n2']}], model 'm'"
    )
