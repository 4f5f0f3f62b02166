"""``lethe``, the command line of the Lethe API (installed as a console script; also
``python -m service.cli``). It talks HTTP to a running service; ``lethe --help`` lists the commands
and the exit statuses."""

from __future__ import annotations

from service.cli.main import main

__all__ = ["main"]
