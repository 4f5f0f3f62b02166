"""What can go wrong in a ``lethe`` command, and the exit status each outcome gives."""

from __future__ import annotations

from typing import Any

OK = 0
CHECK_FAILED = 1  # a check did not hold: audit, receipt, a model that failed, a deletion that failed
USAGE = 2  # bad arguments (argparse's own status), a local file that cannot be read
REFUSED = 3  # the API answered 4xx
UNREACHABLE = 4  # no answer: connection refused, timeout, or 5xx
INTERRUPTED = 130  # Ctrl-C

EXIT_CODES = f"""exit status:
  {OK}  ok
  {CHECK_FAILED}  a check failed: audit or receipt verification, a model that failed to train,
     a deletion that failed or was canceled
  {USAGE}  usage error: bad arguments, a local file that cannot be read
  {REFUSED}  the API refused the request (4xx): its error code and message are printed
  {UNREACHABLE}  the API could not be reached, timed out or failed (5xx)"""


class CliError(Exception):
    """An error that ends the command with ``exit_code``, ``message`` printed to standard error."""

    exit_code = UNREACHABLE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CliError):
    exit_code = USAGE


class Unreachable(CliError):
    """No usable answer: the connection failed, timed out, or the service answered 5xx or not JSON."""

    exit_code = UNREACHABLE


class Refused(CliError):
    """The API answered 4xx with ``{"error": {"code": ..., "message": ...}}``."""

    exit_code = REFUSED

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.api_message = status, code, message
        self.body = body if body is not None else {"error": {"code": code, "message": message}}


def refusal(status: int, body: Any, text: str = "") -> Refused:
    """The :class:`Refused` of an error answer, whatever its body (the API's shape, or anything else)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        return Refused(status, str(error["code"]), str(error.get("message", "")), body)
    return Refused(status, f"http_{status}", text.strip()[:300] or "(no message)", None)
