"""``python -m service``: the API on uvicorn (embedded mode unless LETHE_MODE=production).

A bad setting or an unusable target (:mod:`service.preflight`) exits with status 2, one line per problem."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType

import uvicorn
from pydantic import ValidationError

from service import logs, preflight
from service.app import create_app
from service.db.embedded import stop_embedded
from service.settings import Settings, settings_errors


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)  # no options: --help, and an unknown argument is an error, not ignored
    try:
        settings = Settings()
    except ValidationError as exc:
        return preflight.refuse("lethe", settings_errors(exc))
    if found := preflight.problems(settings):
        return preflight.refuse("lethe", found)
    logs.configure(settings.log_level, settings.log_format)
    logging.getLogger(__name__).info(
        "starting Lethe in %s mode: database %s, worker %s",
        settings.mode,
        settings.effective_database_url.split("@")[-1],
        settings.effective_worker,
    )
    # uvicorn shuts down gracefully on SIGTERM, then restores the previous handler and raises the signal
    # again: with this handler the process then exits through the ``finally`` below and its exit
    # handlers (the default one would kill it there, leaving the embedded Postgres running).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,  # json: ours
        )
    finally:
        if not settings.database_url:  # the embedded server is this process's: it stops with it
            stop_embedded(settings.var_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
