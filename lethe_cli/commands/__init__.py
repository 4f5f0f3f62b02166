"""One module per group of ``lethe`` commands; each has ``register(commands, common)``, which adds its
parsers with a ``run(context, args) -> exit status`` default."""

from __future__ import annotations

import argparse
from typing import TypeAlias

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_command(
    commands: Commands, common: argparse.ArgumentParser, name: str, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """A command's parser, taking the global options too (``lethe models --json`` as well as
    ``lethe --json models``)."""
    return commands.add_parser(
        name,
        help=help,
        description=description or help,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
