"""``lethe receipt``: fetch a completed deletion's signed receipt, save it, verify it.

Verification is :func:`service.receipts.verification.check_receipt`, the code of
``python -m service.receipts verify``: the signature against the public keys (the ones given with
``--public-key``, else those the service publishes), then the audit event the receipt names, in a chain
whose hashes are recomputed here."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lethe_cli.commands import Commands, add_command
from lethe_cli.context import Context
from lethe_cli.errors import CHECK_FAILED, OK, UsageError


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = add_command(
        commands,
        common,
        "receipt",
        "fetch, save and verify a deletion's signed receipt",
        "Fetch the receipt of a completed deletion (GET /v1/deletions/{id}/receipt), or read a saved one "
        "(--file). --verify checks its Ed25519 signature and finds its event in the audit log, whose chain's "
        "hashes are recomputed here (exit 1 if anything does not hold). Pin the key you trust with "
        "--public-key=KEY; without it the keys the service publishes (GET /v1/receipts/keys) are used.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("request_id", type=int, nargs="?", metavar="REQUEST_ID", help="the deletion request")
    source.add_argument("--file", type=Path, help="a saved receipt instead ('-': standard input)")
    parser.add_argument(
        "--owner", action="append", default=[], metavar="ID", help="name this owner id in the receipt"
    )
    parser.add_argument(
        "--sample", action="append", default=[], metavar="ID", help="name this sample id in the receipt"
    )
    parser.add_argument("--save", type=Path, metavar="FILE", help="write the receipt (the API's JSON) here")
    parser.add_argument("--verify", action="store_true", help="verify the signature and the audit event")
    parser.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a public key to verify with (base64url; write --public-key=KEY: a key may begin with -); "
        "repeatable, the one the receipt names is used",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="verify the signature only, without the service (needs --public-key)",
    )
    parser.set_defaults(run=receipt_command)


def receipt_command(context: Context, args: argparse.Namespace) -> int:
    # here: it loads the audit log's tables and the signature library, which other commands need not
    from service.receipts.verification import UnusableInput, check_receipt

    if args.offline and not args.public_key:
        raise UsageError("--offline needs --public-key=KEY: there is no service to read the keys from")
    if args.file is not None and (args.owner or args.sample):
        raise UsageError("--owner and --sample name ids in a receipt fetched from the service, not in --file")
    answer = read(args.file) if args.file is not None else fetch(context, args)
    if args.save is not None:
        try:
            args.save.write_text(json.dumps(answer, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {args.save}: {exc.strerror or exc}") from exc
    context.out.emit(answer, *describe(answer))
    if args.save is not None:
        context.out.say(f"saved to {args.save}")
    if not args.verify:
        return OK
    keys = args.public_key or published_keys(context)
    findings: list[str] = []
    try:
        ok = check_receipt(answer, keys, None if args.offline else context.api.http, findings.append)
    except UnusableInput as exc:
        raise UsageError(str(exc)) from exc
    finally:
        for line in findings:
            context.out.say(line)
    context.out.emit({"valid": ok, "findings": findings})
    return OK if ok else CHECK_FAILED


def fetch(context: Context, args: argparse.Namespace) -> Any:
    params: dict[str, Any] = {}
    if args.owner:
        params["owner_id"] = args.owner
    if args.sample:
        params["sample_id"] = args.sample
    return context.api.get(f"/v1/deletions/{args.request_id}/receipt", **params)


def read(path: Path) -> Any:
    try:
        return json.loads(sys.stdin.read() if str(path) == "-" else path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read a receipt from {path}: {exc}") from exc


def published_keys(context: Context) -> list[str]:
    """The public keys the service publishes (current and retired); said in human output, since a check
    against keys fetched next to the receipt trusts the service for them."""
    keys = [k["public_key"] for k in context.api.get("/v1/receipts/keys")["keys"]]
    context.out.say(
        f"checking against the {len(keys)} key(s) the service publishes; pin one with --public-key=KEY"
    )
    return keys


def describe(answer: Any) -> list[str]:
    """A few lines of what the receipt states."""
    try:
        receipt = answer["receipt"]
        lines = [
            (
                f"receipt of deletion request {receipt['request_id']} on model {receipt['model_id']}: completed "
                f"{receipt['completed_at']}, {receipt['num_samples']} samples"
            )
        ]
        version = receipt.get("version")
        if version:
            lines.append(
                f"  version {version['seq']} ({version['kind']}), guarantee {version['guarantee']}, weights "
                f"sha256 {version['weights_sha256']}"
            )
        elif receipt.get("model_deleted"):
            lines.append("  the model itself was deleted")
        for subject in receipt.get("subjects", []):
            named = f" = {subject['id']}" if subject.get("id") else ""
            lines.append(f"  {subject['kind']} {subject['hash']}{named}")
        audit = receipt.get("audit")
        if audit:
            lines.append(f"  audit: {audit['event_type']}, event {audit['seq']} of chain {audit['chain']}")
        lines.append(f"  signed by key {receipt['key_id']} ({answer.get('algorithm', 'Ed25519')})")
    except (KeyError, TypeError):
        return ["not a receipt (no receipt, or fields missing)"]
    return lines
