"""Audit log: chain names and verification."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.audit.chain import GENESIS, event_hash
from service.audit.repository import AuditRepository

SYSTEM_CHAIN = "system"


def model_chain(model_id: int) -> str:
    """The chain of a model's lifecycle: training, versions, the application and completion of deletions."""
    return f"model:{model_id}"


def request_version_events(
    event_type: str, model_id: int, version_id: int, seq: int, request_ids: Iterable[int]
) -> list[dict[str, Any]]:
    """One event per request that version ``seq`` answers (``deletion.applied``, ``deletion.completed``)."""
    return [
        {
            "event_type": event_type,
            "model_id": model_id,
            "request_id": request_id,
            "version_id": version_id,
            "payload": {"version_seq": seq},
        }
        for request_id in request_ids
    ]


def requests_chain(model_id: int) -> str:
    """The chain of what clients did to a model: deletions received and canceled, callbacks.

    A separate chain so that accepting requests (the API, many per second) and applying them (the
    worker) never wait for each other's lock on one chain head.
    """
    return f"model:{model_id}:requests"


@dataclass(frozen=True)
class ChainReport:
    chain: str
    events: int
    head_seq: int
    head_hash: str
    ok: bool
    problem: str | None = None
    first_bad_seq: int | None = None


def verify_chain(repo: AuditRepository, chain: str, head_seq: int, head_hash: str) -> ChainReport:
    """Recompute every hash of ``chain`` and compare the last one with the chain's head row."""
    prev, expected_seq, count = GENESIS, 1, 0

    def bad(problem: str, seq: int | None) -> ChainReport:
        return ChainReport(chain, count, head_seq, head_hash, False, problem, seq)

    for event in repo.chain_events(chain):
        if event.chain_seq != expected_seq:
            return bad(
                f"sequence jumps from {expected_seq - 1} to {event.chain_seq}: events are missing",
                expected_seq,
            )
        if event.prev_hash != prev:
            return bad(f"event {event.chain_seq} does not link to its predecessor", event.chain_seq)
        digest = event_hash(
            prev,
            chain=event.chain,
            chain_seq=event.chain_seq,
            at=event.at,
            event_type=event.event_type,
            model_id=event.model_id,
            request_id=event.request_id,
            version_id=event.version_id,
            payload=event.payload,
        )
        if digest != event.hash:
            return bad(
                f"event {event.chain_seq} was altered: its hash does not match its content", event.chain_seq
            )
        prev, expected_seq, count = digest, expected_seq + 1, count + 1
    if count != head_seq or prev != head_hash:
        return bad(
            f"the chain ends at event {count} but its head says {head_seq}: events were removed", count + 1
        )
    return ChainReport(chain, count, head_seq, head_hash, True)


def verify_all(repo: AuditRepository, chains: list[str] | None = None) -> list[ChainReport]:
    return [verify_chain(repo, h.chain, h.seq, h.hash) for h in repo.heads(chains)]
