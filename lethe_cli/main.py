"""``lethe``: the Lethe API from a shell. Global options go before or after the command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import httpx

from lethe_cli.api import Api, decode
from lethe_cli.commands import audit, datasets, deletions, models, receipts
from lethe_cli.context import Context
from lethe_cli.errors import EXIT_CODES, INTERRUPTED, REFUSED, UNREACHABLE, USAGE, CliError, Refused
from lethe_cli.output import Output

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0

DESCRIPTION = """Use a Lethe service from a shell: upload a dataset, register a model and watch it train,
forget an owner, fetch and verify the deletion's signed receipt, check the audit log."""

EXAMPLES = (
    """example:
  lethe upload people.csv --name people              # dataset 2: 60 rows, table
  lethe register --dataset 2 --set epochs=5 --wait   # model 2 ... ready
  lethe forget 2 --owner u7 --wait                   # deletion request 1 ... completed
  lethe receipt 1 --owner u7 --save receipt.json --verify
  lethe audit --model 2

environment:
  LETHE_URL    the service (--url), default """
    + DEFAULT_URL
    + """
  LETHE_TOKEN  a bearer token (--token), when the service sets LETHE_API_TOKENS"""
)


def _common() -> argparse.ArgumentParser:
    """The global options, accepted before and after the command (SUPPRESS: one given after the command
    does not reset one given before it)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("global options")
    group.add_argument("--url", default=argparse.SUPPRESS, help=f"the service (env LETHE_URL; {DEFAULT_URL})")
    group.add_argument(
        "--token", default=argparse.SUPPRESS, help="bearer token sent as Authorization (env LETHE_TOKEN)"
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine output: the API's JSON, one object per line",
    )
    group.add_argument(
        "--timeout",
        type=_positive,
        default=argparse.SUPPRESS,
        help=f"seconds to wait for each HTTP answer ({DEFAULT_TIMEOUT:g})",
    )
    group.add_argument(
        "--interval",
        type=_positive,
        default=argparse.SUPPRESS,
        help="seconds between two polls of watch and --wait (0.5)",
    )
    return common


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="lethe",
        description=DESCRIPTION,
        epilog=EXIT_CODES + "\n\n" + EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (datasets, models, deletions, receipts, audit):
        module.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    """Run one command; returns its exit status (``lethe --help`` lists them). ``transport``: tests'."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return exc.code if isinstance(exc.code, int) else USAGE
    out = Output(getattr(args, "json", False))
    url = getattr(args, "url", None) or os.environ.get("LETHE_URL") or DEFAULT_URL
    token = getattr(args, "token", None) or os.environ.get("LETHE_TOKEN") or None
    api = Api(url, token, getattr(args, "timeout", DEFAULT_TIMEOUT), transport)
    context = Context(api, out, getattr(args, "interval", 0.5))
    try:
        return _run(context, args)
    except Refused as exc:
        out.error(f"the API refused the request: {exc.message}", {"status": exc.status, **exc.body})
        return REFUSED
    except CliError as exc:
        out.error(exc.message)
        return exc.exit_code
    except httpx.TimeoutException as exc:
        out.error(f"no answer from {api.url} within {api.http.timeout.read}s: {type(exc).__name__}")
        return UNREACHABLE
    except httpx.HTTPError as exc:
        out.error(f"cannot reach {api.url}: {exc or type(exc).__name__}")
        return UNREACHABLE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return INTERRUPTED
    finally:
        api.close()


def _run(context: Context, args: argparse.Namespace) -> int:
    try:
        return int(args.run(context, args))
    except httpx.HTTPStatusError as exc:  # from the audit and receipt checks, which raise_for_status
        decode(exc.response)  # raises Refused (4xx) or Unreachable (5xx)
        raise
