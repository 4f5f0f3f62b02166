"""Check a Lethe deployment's audit log from outside: ``python -m service.audit.check --url URL``.

``GET /v1/audit/verify`` is the service checking itself. An auditor should not have to trust that: this
tool reads the events over the API (``GET /v1/audit/events?chain=...``), recomputes every hash itself and
compares the end of each chain with the head the service reports. Each event's hash is

    sha256(prev_hash || canonical JSON of {chain, seq, at, type, model_id, request_id, version_id, payload})

(sorted keys, no whitespace, ASCII; ``at`` as ISO 8601 UTC with microseconds: ``service/audit/chain.py``,
about 50 lines, is the whole definition), so altering, inserting, removing or reordering events shows.

A service that rewrote a chain whole, recomputing every hash, would pass that check. Anchors catch it:
``--save-anchors FILE`` records each chain's head as verified now, and a later run with
``--anchors FILE`` requires those events still to have those hashes (keep the file where the service
cannot write it). Exit status 0 when every chain checked is intact, 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from service.audit.schemas import AuditEventOut
from service.audit.service import ChainReport, verify_events

_PAGE = 1000


def heads(client: httpx.Client) -> dict[str, tuple[int, str]]:
    """Each chain's head as the service reports it: chain -> (last sequence number, last hash)."""
    response = client.get("/v1/audit/verify")
    response.raise_for_status()
    return {c["chain"]: (int(c["head_seq"]), c["head_hash"]) for c in response.json()["chains"]}


def chain_events(client: httpx.Client, chain: str) -> Iterator[AuditEventOut]:
    """Every event of ``chain``, in sequence order, paged through the API."""
    after: int | None = None
    while True:
        params: dict[str, Any] = {"chain": chain, "limit": _PAGE}
        if after is not None:
            params["after_id"] = after
        response = client.get("/v1/audit/events", params=params)
        response.raise_for_status()
        page = response.json()
        items = page["events"]
        yield from sorted((AuditEventOut.model_validate(e) for e in items), key=lambda e: e.seq)
        if page["next_after_id"] is None or not items:
            return
        after = int(page["next_after_id"])


def check(
    client: httpx.Client,
    chains: list[str] | None = None,
    anchors: Mapping[str, Mapping[int, str]] | None = None,
) -> list[ChainReport]:
    """Verify ``chains`` (default: every chain the service reports) against the service's heads and the
    ``anchors`` (chain -> sequence number -> hash). A chain anchored earlier that the service no longer
    reports is a failure: the whole chain was removed."""
    anchors = anchors or {}
    reported = heads(client)
    wanted = chains if chains is not None else sorted(reported | {c: (0, "") for c in anchors})
    reports = []
    for chain in wanted:
        if chain not in reported:
            reports.append(ChainReport(chain, 0, 0, "", False, "the service reports no such chain", 1))
            continue
        head_seq, head_hash = reported[chain]
        reports.append(
            verify_events(chain, chain_events(client, chain), head_seq, head_hash, anchors.get(chain))
        )
    return reports


def load_anchors(path: Path) -> dict[str, dict[int, str]]:
    """``{"model:1": {"seq": 12, "hash": "..."}, ...}`` (what :func:`save_anchors` writes)."""
    raw = json.loads(path.read_text())
    return {chain: {int(anchor["seq"]): str(anchor["hash"])} for chain, anchor in raw.items()}


def save_anchors(path: Path, reports: list[ChainReport]) -> None:
    """Each intact chain's head, as anchors for the next check."""
    anchors = {r.chain: {"seq": r.head_seq, "hash": r.head_hash} for r in reports if r.ok and r.head_seq}
    path.write_text(json.dumps(anchors, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None, client: httpx.Client | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.audit.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", help="the service, e.g. http://lethe.internal:8000")
    parser.add_argument("--token", help="a bearer token, when the service requires one (LETHE_API_TOKENS)")
    parser.add_argument("--chain", action="append", help="check this chain only (repeatable); default: all")
    parser.add_argument("--anchors", type=Path, help="heads recorded by an earlier run (--save-anchors)")
    parser.add_argument("--save-anchors", type=Path, help="write the verified heads here, for the next run")
    args = parser.parse_args(argv)
    if client is None and not args.url:
        parser.error("--url is required")
    try:
        anchors = load_anchors(args.anchors) if args.anchors else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        parser.error(f"cannot read the anchors in {args.anchors}: {exc}")
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    own = client is None
    client = client or httpx.Client(base_url=args.url, headers=headers, timeout=30)
    try:
        reports = check(client, args.chain, anchors)
    except httpx.HTTPError as exc:
        print(f"cannot read the audit log: {exc}", file=sys.stderr)
        return 1
    finally:
        if own:
            client.close()
    for r in reports:
        if r.ok:
            print(f"ok      {r.chain}: {r.events} events, head {r.head_seq} {r.head_hash}")
        else:
            print(f"FAILED  {r.chain}: {r.problem} (first bad event: {r.first_bad_seq})")
    if args.save_anchors:
        save_anchors(args.save_anchors, reports)
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
