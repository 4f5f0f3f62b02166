"""An audit event's hash: ``sha256(prev_hash || canonical_json(event))`` (sorted keys, no spaces, ASCII)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC
from typing import Any

GENESIS = "0" * 64
HASHED_FIELDS = ("chain", "chain_seq", "at", "event_type", "model_id", "request_id", "version_id", "payload")
_KEYS = {"chain_seq": "seq", "event_type": "type"}  # the hashed JSON's name of a field, where it differs


def event_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    """The hash of ``event``'s :data:`HASHED_FIELDS` (``at`` to the microsecond, UTC) after ``prev_hash``."""
    body = {_KEYS.get(name, name): event[name] for name in HASHED_FIELDS}
    body["at"] = body["at"].astimezone(UTC).isoformat(timespec="microseconds")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256((prev_hash + text).encode()).hexdigest()
