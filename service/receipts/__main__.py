"""``python -m service.receipts``: make a signing key, or verify a receipt without trusting the service.

- ``new-key``: print a fresh Ed25519 private key (base64url) for LETHE_RECEIPT_SIGNING_KEY;
- ``verify RECEIPT.json --public-key=KEY``: check the signature of a receipt (the whole answer of
  ``GET /v1/deletions/{id}/receipt``) against a public key (base64url, as ``GET /v1/receipts/key``
  gives it; pin the key you trust rather than fetching it next to the receipt). Repeat
  ``--public-key`` to give the keys of a rotation (``GET /v1/receipts/keys``): the one whose id the
  receipt names is used. With ``--url``, also
  check that the service's audit log holds the event the receipt names: the tool reads that chain over
  the API, recomputes every hash itself (:mod:`service.audit.check`) and looks for the event at the
  receipt's sequence number with the receipt's hash, type and request. Exit status 0 when everything
  checked holds, 1 when something does not, 2 for unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from service.audit.check import check, service_client
from service.audit.schemas import AuditEventOut
from service.receipts.signing import b64url, key_id, new_seed, parse_public_key, verify


def main(argv: list[str] | None = None, client: httpx.Client | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.receipts", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("new-key", help="print a fresh private key for LETHE_RECEIPT_SIGNING_KEY")
    check_ = commands.add_parser(
        "verify", help="verify a receipt's signature (and, with --url, its audit event)"
    )
    check_.add_argument("receipt", type=Path, help="the receipt answer, as JSON ('-': standard input)")
    check_.add_argument(
        "--public-key",
        required=True,
        action="append",
        help="the service's public key (base64url); write --public-key=KEY: a key may begin with -. "
        "Repeatable: the key whose id the receipt names is used",
    )
    check_.add_argument("--url", help="the service: also check its audit log holds the receipt's event")
    check_.add_argument("--token", help="a bearer token for --url (a read-only one will do)")
    args = parser.parse_args(argv)
    if args.command == "new-key":
        print(new_seed())
        return 0
    try:
        text = sys.stdin.read() if str(args.receipt) == "-" else args.receipt.read_text()
        answer = json.loads(text)
        receipt, signature = answer["receipt"], answer["signature"]
        given = {key_id(raw): b64url(raw) for raw in map(parse_public_key, args.public_key)}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"unusable input: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    wanted = receipt.get("key_id")
    if wanted not in given:
        print(f"INVALID: the receipt names key {wanted}, the keys given are {', '.join(given)}")
        return 1
    if not verify(receipt, signature, given[wanted]):
        print("INVALID: the signature does not match the receipt (altered, or signed by another key)")
        return 1
    print(
        f"valid: deletion request {receipt['request_id']} of model {receipt['model_id']}, completed "
        f"{receipt['completed_at']}, signed by key {wanted}"
    )
    if args.url is None and client is None:
        return 0
    try:
        with service_client(args.url, args.token, client) as http:
            problem = logged_problem(http, receipt)
    except httpx.HTTPError as exc:
        print(f"cannot read the audit log: {exc}", file=sys.stderr)
        return 1
    if problem is not None:
        print(f"INVALID: {problem}")
        return 1
    audit = receipt["audit"]
    print(f"logged: event {audit['seq']} of chain {audit['chain']}, whose hashes recompute")
    return 0


def logged_problem(client: httpx.Client, receipt: Mapping[str, Any]) -> str | None:
    """None when the audit log, checked from outside, holds the receipt's ``deletion.completed`` event;
    otherwise what is wrong."""
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
    if (event.hash, event.type, event.request_id) != (
        audit["hash"],
        audit["event_type"],
        receipt["request_id"],
    ):
        return (
            f"event {audit['seq']} of {audit['chain']} is {event.type} of request {event.request_id} with hash "
            f"{event.hash}, not the receipt's"
        )
    return None


if __name__ == "__main__":
    raise SystemExit(main())
