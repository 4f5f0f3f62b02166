"""``python -m service.receipts``: make a signing key, or verify a receipt without trusting the service.

Exit status 0 when everything checked holds, 1 otherwise, 2 for unusable input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from service.audit.check import service_client
from service.receipts.verification import UnusableInput, check_receipt, keys_by_id, split_answer
from service.signing import new_seed


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
        split_answer(answer)
        keys_by_id(args.public_key)
    except UnusableInput as exc:
        print(f"unusable input: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"unusable input: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.url is None and client is None:
        return 0 if check_receipt(answer, args.public_key) else 1
    try:
        with service_client(args.url, args.token, client) as http:
            return 0 if check_receipt(answer, args.public_key, http) else 1
    except httpx.HTTPError as exc:
        print(f"cannot read the audit log: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
