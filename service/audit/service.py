"""Audit log: chain names and verification."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from service.audit.chain import GENESIS, event_hash
from service.audit.repository import AuditRepository

SYSTEM_CHAIN = "system"


def model_chain(model_id: int) -> str:
    """The chain of a model's lifecycle: training, versions, the application of deletions, retraining."""
    return f"model:{model_id}"


def completions_chain(model_id: int) -> str:
    """The chain of the model's completed deletions (``deletion.completed``, one per request).

    A chain of its own, like :func:`requests_chain`, so that completing one version (which holds its
    chain's head across the unlinks of the version's garbage) and recording the next (which appends to
    the model's chain) never wait for each other's lock on one chain head when two worker processes do
    them at once (``bench/README.md``, items 29 and 30).
    """
    return f"model:{model_id}:completions"


def chains_of_model(model_id: int) -> list[str]:
    """Every chain a model's events go to."""
    return [model_chain(model_id), requests_chain(model_id), completions_chain(model_id)]


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


class ChainedEvent(Protocol):
    """What verification reads of an event: a row of ``audit_events``, or one exported through the API
    (service.audit.check)."""

    @property
    def chain(self) -> str: ...
    @property
    def chain_seq(self) -> int: ...
    @property
    def at(self) -> datetime: ...
    @property
    def event_type(self) -> str: ...
    @property
    def model_id(self) -> int | None: ...
    @property
    def request_id(self) -> int | None: ...
    @property
    def version_id(self) -> int | None: ...
    @property
    def payload(self) -> dict[str, Any]: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


def rehash(prev_hash: str, event: ChainedEvent) -> str:
    """The hash ``event`` must carry after ``prev_hash`` (:func:`service.audit.chain.event_hash`)."""
    return event_hash(
        prev_hash,
        chain=event.chain,
        chain_seq=event.chain_seq,
        at=event.at,
        event_type=event.event_type,
        model_id=event.model_id,
        request_id=event.request_id,
        version_id=event.version_id,
        payload=event.payload,
    )


def verify_events(
    chain: str,
    events: Iterable[ChainedEvent],
    head_seq: int,
    head_hash: str,
    anchors: Mapping[int, str] | None = None,
) -> ChainReport:
    """Recompute every hash of ``chain`` (its events in sequence order) and compare the last one with the
    chain's head. ``anchors`` (sequence number -> hash, recorded by an auditor earlier) must still be the
    hashes at those positions: a chain rewritten whole, every hash recomputed, verifies on its own, but
    not against what was seen before."""
    prev, expected_seq, count = GENESIS, 1, 0
    anchors = anchors or {}

    def bad(problem: str, seq: int | None) -> ChainReport:
        return ChainReport(chain, count, head_seq, head_hash, False, problem, seq)

    for event in events:
        if event.chain_seq != expected_seq:
            return bad(
                f"sequence jumps from {expected_seq - 1} to {event.chain_seq}: events are missing",
                expected_seq,
            )
        if event.prev_hash != prev:
            return bad(f"event {event.chain_seq} does not link to its predecessor", event.chain_seq)
        digest = rehash(prev, event)
        if digest != event.hash:
            return bad(
                f"event {event.chain_seq} was altered: its hash does not match its content", event.chain_seq
            )
        if anchors.get(event.chain_seq, digest) != digest:
            return bad(
                f"event {event.chain_seq} is not the event recorded earlier (its hash differs from the "
                "anchor): the chain was rewritten",
                event.chain_seq,
            )
        prev, expected_seq, count = digest, expected_seq + 1, count + 1
    if count != head_seq or prev != head_hash:
        return bad(
            f"the chain ends at event {count} but its head says {head_seq}: events were removed", count + 1
        )
    if anchors and max(anchors) > count:
        return bad(f"an anchor names event {max(anchors)}, the chain has {count}: events were removed", count + 1)
    return ChainReport(chain, count, head_seq, head_hash, True)


def verify_chain(repo: AuditRepository, chain: str, head_seq: int, head_hash: str) -> ChainReport:
    """:func:`verify_events` over the chain as stored."""
    return verify_events(chain, repo.chain_events(chain), head_seq, head_hash)


def verify_all(repo: AuditRepository, chains: list[str] | None = None) -> list[ChainReport]:
    return [verify_chain(repo, h.chain, h.seq, h.hash) for h in repo.heads(chains)]
