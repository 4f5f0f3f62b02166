"""The options of :mod:`service.audit.check`, shared with ``lethe audit`` (import-light on purpose)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_options(parser: argparse.ArgumentParser) -> None:
    """Every option of the check but the service's address and token."""
    parser.add_argument("--chain", action="append", help="check this chain only (repeatable); default: all")
    parser.add_argument(
        "--model", type=int, metavar="ID", help="check this model only: its chains, ledger and weights"
    )
    parser.add_argument("--anchors", type=Path, help="heads recorded by an earlier run (--save-anchors)")
    parser.add_argument("--save-anchors", type=Path, help="write the verified heads here, for the next run")
    parser.add_argument(
        "--no-models", action="store_true", help="check the chains only, not the models' ledger and weights"
    )
