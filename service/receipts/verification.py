"""Verify a receipt without trusting the service: its signature, and (with a client) its audit event."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from service.audit.check import check
from service.audit.schemas import AuditEventOut
from service.signing import b64url, key_id, parse_public_key, verify


class UnusableInput(ValueError):
    """The receipt or a key cannot be read at all (not JSON, fields missing, not a key)."""


def split_answer(answer: Any) -> tuple[dict[str, Any], str]:
    """The receipt and its signature out of an answer of ``GET /v1/deletions/{id}/receipt``."""
    try:
        receipt, signature = answer["receipt"], answer["signature"]
    except (KeyError, TypeError) as exc:
        raise UnusableInput(f"not a receipt answer: {type(exc).__name__}: {exc}") from exc
    if not isinstance(receipt, dict) or not isinstance(signature, str):
        raise UnusableInput("not a receipt answer: 'receipt' must be an object, 'signature' a string")
    return receipt, signature


def keys_by_id(public_keys: Sequence[str]) -> dict[str, str]:
    try:
        return {key_id(raw): b64url(raw) for raw in map(parse_public_key, public_keys)}
    except (ValueError, TypeError) as exc:
        raise UnusableInput(f"not a public key: {type(exc).__name__}: {exc}") from exc


def check_receipt(
    answer: Any,
    public_keys: Sequence[str],
    client: httpx.Client | None = None,
    say: Callable[[str], None] = print,
) -> bool:
    """Whether the receipt is signed by the key it names and (with ``client``) logged; ``say``: findings."""
    receipt, signature = split_answer(answer)
    given = keys_by_id(public_keys)
    wanted = receipt.get("key_id")
    if wanted not in given:
        say(f"INVALID: the receipt names key {wanted}, the keys given are {', '.join(given)}")
        return False
    if not verify(receipt, signature, given[wanted]):
        say("INVALID: the signature does not match the receipt (altered, or signed by another key)")
        return False
    say(
        f"valid: deletion request {receipt['request_id']} of model {receipt['model_id']}, completed "
        f"{receipt['completed_at']}, signed by key {wanted}"
    )
    if client is None:
        return True
    problem = logged_problem(client, receipt)
    if problem is not None:
        say(f"INVALID: {problem}")
        return False
    audit = receipt["audit"]
    say(f"logged: event {audit['seq']} of chain {audit['chain']}, whose hashes recompute")
    return True


def logged_problem(client: httpx.Client, receipt: Mapping[str, Any]) -> str | None:
    """What is wrong with the receipt's audit event, checked from outside; None: nothing."""
    audit = receipt.get("audit")
    if not audit:
        return "the receipt names no audit event to check"
    read: dict[str, list[AuditEventOut]] = {}
    (report,) = check(client, [audit["chain"]], read=read)
    if not report.ok:
        return f"the audit chain {audit['chain']} does not verify: {report.problem}"
    event = next((e for e in read.get(audit["chain"], []) if e.seq == audit["seq"]), None)
    if event is None:
        return f"the audit chain {audit['chain']} has no event {audit['seq']}"
    expected = (audit["hash"], audit["event_type"], receipt["request_id"])
    if (event.hash, event.type, event.request_id) != expected:
        return (
            f"event {audit['seq']} of {audit['chain']} is {event.type} of request {event.request_id} with hash "
            f"{event.hash}, not the receipt's"
        )
    return None
