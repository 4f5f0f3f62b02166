"""``python -m service.receipts``: make a signing key, or verify a receipt without trusting the service.

- ``new-key``: print a fresh Ed25519 private key (base64url) for LETHE_RECEIPT_SIGNING_KEY;
- ``verify RECEIPT.json --public-key=KEY``: check the signature of a receipt (the whole answer of
  ``GET /v1/deletions/{id}/receipt``) against a public key (base64url, as ``GET /v1/receipts/key``
  gives it; pin the key you trust rather than fetching it next to the receipt). Exit status 0 when
  the signature holds, 1 when it does not, 2 for unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from service.receipts.signing import from_b64url, key_id, new_seed, verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.receipts", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("new-key", help="print a fresh private key for LETHE_RECEIPT_SIGNING_KEY")
    check = commands.add_parser("verify", help="verify a receipt's signature")
    check.add_argument("receipt", type=Path, help="the receipt answer, as JSON ('-': standard input)")
    check.add_argument(
        "--public-key", required=True, help="the service's public key (base64url); write --public-key=KEY: a key may begin with -"
    )
    args = parser.parse_args(argv)
    if args.command == "new-key":
        print(new_seed())
        return 0
    try:
        text = sys.stdin.read() if str(args.receipt) == "-" else args.receipt.read_text()
        answer = json.loads(text)
        receipt, signature = answer["receipt"], answer["signature"]
        wanted = key_id(from_b64url(args.public_key))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"unusable input: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if receipt.get("key_id") != wanted:
        print(f"INVALID: the receipt names key {receipt.get('key_id')}, the key given is {wanted}")
        return 1
    if not verify(receipt, signature, args.public_key):
        print("INVALID: the signature does not match the receipt (altered, or signed by another key)")
        return 1
    print(
        f"valid: deletion request {receipt['request_id']} of model {receipt['model_id']}, completed "
        f"{receipt['completed_at']}, signed by key {wanted}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
