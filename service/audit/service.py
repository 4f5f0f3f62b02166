"""Audit log: chain names and verification."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.audit.chain import GENESIS, HASHED_FIELDS, event_hash
from service.audit.repository import AuditRepository
from service.audit.schemas import AuditEventOut
from service.db.tables import AuditEvent
from service.errors import NotFound
from service.schemas import MAX_DB_INT

SYSTEM_CHAIN = "system"


def model_chain(model_id: int) -> str:
    """The chain of a model's lifecycle: training, versions, the application of deletions, retraining."""
    return f"model:{model_id}"


def completions_chain(model_id: int) -> str:
    """The chain of the model's ``deletion.completed`` events (its own head lock)."""
    return f"model:{model_id}:completions"


def chains_of_model(model_id: int) -> list[str]:
    return [model_chain(model_id), requests_chain(model_id), completions_chain(model_id)]


def request_version_events(
    event_type: str, model_id: int, version_id: int, seq: int, request_ids: Iterable[int]
) -> list[dict[str, Any]]:
    """One event per request that version ``seq`` answers (``deletion.applied``, ``deletion.completed``)."""
    fixed = {"event_type": event_type, "model_id": model_id, "version_id": version_id}
    return [{**fixed, "request_id": r, "payload": {"version_seq": seq}} for r in request_ids]


def requests_chain(model_id: int) -> str:
    """The chain of what clients did to a model: deletions received and canceled, callbacks."""
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


ChainedEvent = AuditEvent | AuditEventOut  # what verification reads: stored, or read over the API


def rehash(prev_hash: str, event: ChainedEvent) -> str:
    """The hash ``event`` must carry after ``prev_hash`` (:func:`service.audit.chain.event_hash`)."""
    return event_hash(prev_hash, {name: getattr(event, name) for name in HASHED_FIELDS})


def verify_events(
    chain: str,
    events: Iterable[ChainedEvent],
    head_seq: int,
    head_hash: str,
    anchors: Mapping[int, str] | None = None,
) -> ChainReport:
    """Recompute ``chain``'s hashes (seq order) against its head and ``anchors`` (seq -> hash)."""
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
        return bad(
            f"an anchor names event {max(anchors)}, the chain has {count}: events were removed", count + 1
        )
    return ChainReport(chain, count, head_seq, head_hash, True)


CHAIN_MISSING = "chain missing"
_CHAIN_NAME = re.compile(r"[^\x00-\x1f\x7f]+")
_MODEL_CHAIN = re.compile(r"model:([1-9][0-9]{0,9})")


def verify(
    repo: AuditRepository, *, chain: str | None = None, model_id: int | None = None
) -> list[ChainReport]:
    """``GET /v1/audit/verify``: every chain, or ``chain`` and ``model_id``'s (a missing head fails)."""
    if chain is not None and not _CHAIN_NAME.fullmatch(chain):  # Postgres refuses NUL in a query
        raise NotFound(f"chain {chain!r} does not exist: chain names are printable")
    wanted = None
    if chain is not None or model_id is not None:
        wanted = ([chain] if chain is not None else []) + (chains_of_model(model_id) if model_id else [])
    heads = repo.heads(wanted)
    present = {h.chain for h in heads}
    missing = {name: why for name, why in _expected(repo, wanted).items() if name not in present}
    if model_id is not None and not (present | set(missing)) & set(chains_of_model(model_id)):
        raise NotFound(f"model {model_id} does not exist and the audit log names no such model")
    if chain is not None and chain not in present and chain not in missing:
        raise NotFound(
            f"chain {chain!r} does not exist (it has no events): chains are 'system', 'model:<id>', "
            "'model:<id>:requests' and 'model:<id>:completions' (the last two once the model has had a "
            "deletion request); GET /v1/audit/verify lists every chain"
        )
    reports = [verify_events(h.chain, repo.chain_events(h.chain), h.seq, h.hash) for h in heads]
    reports += [_missing_report(name, events, why) for name, (events, why) in missing.items()]
    return sorted(reports, key=lambda r: r.chain)


def _missing_report(chain: str, events: int, why: str) -> ChainReport:
    left = f"{events} of its events are left" if events else "none of its events are left"
    problem = f"{CHAIN_MISSING}: {why}, but the chain has no head ({left}): it was removed"
    return ChainReport(chain, events, head_seq=0, head_hash="", ok=False, problem=problem, first_bad_seq=1)


def _expected(repo: AuditRepository, chains: list[str] | None) -> dict[str, tuple[int, str]]:
    """Chains (among ``chains``; None: all) that must have a head -> (events left, why)."""
    events = repo.events_per_chain(chains)
    expected = {name: (n, "the log holds events of this chain") for name, n in events.items()}

    model_ids: list[int] | None = None
    if chains is not None:
        model_ids = [int(m.group(1)) for c in chains if (m := _MODEL_CHAIN.fullmatch(c))]
        model_ids = [m for m in model_ids if m <= MAX_DB_INT]  # larger ids are never stored
        if not model_ids:
            return expected
    registered_ids, named_ids = repo.models_known(model_ids)
    for known in sorted(registered_ids | named_ids):
        name = model_chain(known)
        if name not in expected:
            why = "is registered" if known in registered_ids else "is named by audit events"
            expected[name] = (0, f"model {known} {why}")
    return expected
