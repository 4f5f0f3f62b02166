"""``python -m service.openapi > openapi.yaml``: the app's OpenAPI document as YAML (deterministic)."""

from __future__ import annotations

import sys
from typing import Any

import yaml

from service.app import create_app


def schema() -> dict[str, Any]:
    return create_app().openapi()


def dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=True, allow_unicode=True, width=120)


if __name__ == "__main__":
    sys.stdout.write(dump(schema()))
