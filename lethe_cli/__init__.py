"""``lethe``, the command line of the Lethe API (installed as a console script; also
``python -m lethe_cli``). It talks HTTP to a running service; ``lethe --help`` lists the commands
and the exit statuses."""

from __future__ import annotations

from lethe_cli.main import main

__all__ = ["main"]
