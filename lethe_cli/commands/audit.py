"""``lethe audit``: the audit log checked from outside, by :mod:`service.audit.check` (the code of
``python -m service.audit.check``, with the same options)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from lethe_cli.commands import Commands, add_command
from lethe_cli.context import Context
from lethe_cli.errors import CHECK_FAILED, OK, UsageError
from service.audit.options import add_options

DESCRIPTION = """Check the audit log without trusting the service: every event of every chain (--chain:
those only; --model: one model's) is read over the API and its hash recomputed here, each chain's end
compared with the head the service reports and with the anchors of an earlier run (--anchors). Then each
model's versions against its ledger, the log's release events and the weights served. Exit status 1 if
anything fails. The same check as `python -m service.audit.check`."""


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = add_command(
        commands,
        common,
        "audit",
        "check the audit log, the ledger and the weights served, from outside",
        DESCRIPTION,
    )
    add_options(parser)
    parser.set_defaults(run=audit_command)


def audit_command(context: Context, args: argparse.Namespace) -> int:
    from service.audit import check  # here: it loads the audit log's tables, which other commands need not

    try:
        anchors = check.anchors_of(args.anchors)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    outcome = check.run_options(context.api.http, args, anchors)
    if context.out.json:
        for report in outcome.chains:
            context.out.emit(asdict(report))
        for model in outcome.models:
            context.out.emit({**asdict(model), "ok": model.ok})
    for line in outcome.lines():
        context.out.say(line)
    if args.save_anchors:
        context.out.say(f"anchors saved to {args.save_anchors}")
    return OK if outcome.ok else CHECK_FAILED
