"""``python -m lethe_cli``: the ``lethe`` command."""

from __future__ import annotations

import sys

from lethe_cli.main import main

if __name__ == "__main__":
    sys.exit(main())
