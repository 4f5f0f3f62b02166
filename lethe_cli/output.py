"""What ``lethe`` prints: short human lines by default, or with ``--json`` the API's JSON, one object per
line. Progress and errors go to standard error, results to standard output."""

from __future__ import annotations

import json
import sys
from typing import Any

from tqdm import tqdm

BAR = "{desc} {percentage:3.0f}%|{bar:30}|"


class Output:
    def __init__(self, json_mode: bool) -> None:
        self.json = json_mode

    def emit(self, obj: Any, *lines: str) -> None:
        """A result: ``obj`` as one JSON line in --json mode, else the human ``lines``."""
        if self.json:
            print(json.dumps(obj, separators=(",", ":")), flush=True)
        else:
            for line in lines:
                self.say(line)

    def say(self, line: str) -> None:
        """A human line (nothing in --json mode), written around any progress bar on screen."""
        if not self.json:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()

    def error(self, message: str, obj: Any = None) -> None:
        """To standard error: ``obj`` as JSON in --json mode when given, else ``lethe: message``."""
        if self.json and obj is not None:
            print(json.dumps(obj, separators=(",", ":")), file=sys.stderr, flush=True)
        else:
            print(f"lethe: {message}", file=sys.stderr, flush=True)

    def bar(self, description: str) -> tqdm[Any]:
        """A 0-100 % bar on standard error; off in --json mode and when standard error is no terminal."""
        return tqdm(
            total=100,
            desc=description,
            file=sys.stderr,
            disable=True if self.json else None,
            bar_format=BAR,
            leave=False,
        )
