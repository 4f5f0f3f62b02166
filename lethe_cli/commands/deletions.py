"""``lethe forget`` and ``lethe deletion``."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from lethe_cli.commands import Commands, add_command
from lethe_cli.context import Context
from lethe_cli.errors import CHECK_FAILED, OK, UsageError
from lethe_cli.follow import follow_deletion, history_line


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    forget = add_command(
        commands,
        common,
        "forget",
        "ask a model to forget owners or samples",
        "Submit a deletion request (POST /v1/models/{id}/deletions) under a fresh Idempotency-Key (or "
        "--key, to retry a request safely); prints the request's id and when it is expected to be done.",
    )
    forget.add_argument("model_id", type=int, metavar="MODEL_ID")
    forget.add_argument("--owner", action="append", default=[], metavar="ID", help="an owner id (repeatable)")
    forget.add_argument(
        "--sample", action="append", default=[], metavar="ID", help="a sample id (repeatable)"
    )
    forget.add_argument("--callback-url", metavar="URL", help="POSTed the outcome when it ends")
    forget.add_argument("--key", help="the Idempotency-Key (default: a fresh UUID, printed)")
    forget.add_argument(
        "--wait", action="store_true", help="follow it until it ends; exit 1 unless completed"
    )
    forget.set_defaults(run=forget_command)

    show = add_command(
        commands,
        common,
        "deletion",
        "show a deletion request",
        "Show a deletion request (GET /v1/deletions/{id}). --wait: follow it, a line per state, until it is "
        "completed (exit 0), failed or canceled (exit 1).",
    )
    show.add_argument("request_id", type=int, metavar="REQUEST_ID")
    show.add_argument("--wait", action="store_true", help="follow it until it ends")
    show.set_defaults(run=deletion_command)


def forget_command(context: Context, args: argparse.Namespace) -> int:
    if not args.owner and not args.sample:
        raise UsageError("forget needs at least one --owner or --sample")
    body: dict[str, Any] = {}
    if args.owner:
        body["owner_ids"] = args.owner
    if args.sample:
        body["sample_ids"] = args.sample
    if args.callback_url:
        body["callback_url"] = args.callback_url
    key = args.key or str(uuid.uuid4())
    accepted = context.api.post(
        f"/v1/models/{args.model_id}/deletions", json=body, headers={"Idempotency-Key": key}
    )
    context.out.emit(
        accepted,
        f"deletion request {accepted['id']} on model {accepted['model_id']}: {accepted['state']}, expected by "
        f"{accepted['expected_by']} (Idempotency-Key {key})",
    )
    return finish(context, accepted["id"]) if args.wait else OK


def deletion_command(context: Context, args: argparse.Namespace) -> int:
    if args.wait:
        return finish(context, args.request_id)
    request = context.api.get(f"/v1/deletions/{args.request_id}")
    context.out.emit(request, *describe(request))
    return OK


def finish(context: Context, request_id: int) -> int:
    """Follow the request; 0 when it completed, 1 (its reason printed) when it failed or was canceled."""
    request = follow_deletion(context, request_id)
    context.out.say(summary(request))
    if request["state"] == "completed":
        return OK
    context.out.error(f"deletion request {request_id} {request['state']}: {request.get('failure_reason')}")
    return CHECK_FAILED


def summary(request: dict[str, Any]) -> str:
    """``deletion request 4 on model 2: completed at ..., version 3 (unlearned, certified)``."""
    line = f"deletion request {request['id']} on model {request['model_id']}: {request['state']}"
    if request.get("completed_at"):
        line += f" at {request['completed_at']}"
    version = request.get("version")
    if version:
        guarantee = (version.get("certificate") or {}).get("guarantee")
        line += f", version {version['seq']} ({version['kind']}{', ' + guarantee if guarantee else ''})"
    if request.get("failure_reason"):
        line += f": {request['failure_reason']}"
    return line


def describe(request: dict[str, Any]) -> list[str]:
    lines = [summary(request), f"  {request['num_samples']} samples, expected by {request['expected_by']}"]
    lines += [history_line(entry) for entry in request.get("history") or []]
    callback = request.get("callback")
    if callback:
        lines.append(f"  callback {callback['url']}: {callback['state']}, {callback['attempts']} attempts")
    return lines
