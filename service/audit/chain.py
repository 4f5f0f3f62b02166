"""How an audit event is hashed into its chain.

``hash = sha256(prev_hash || canonical_json(event))``, canonical JSON: sorted keys, no whitespace, ASCII.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
EVENT_FIELDS = ("event_type", "model_id", "request_id", "version_id", "payload")  # what an event names


def canonical_time(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def event_hash(
    prev_hash: str,
    *,
    chain: str,
    chain_seq: int,
    at: datetime,
    event_type: str,
    model_id: int | None,
    request_id: int | None,
    version_id: int | None,
    payload: dict[str, Any],
) -> str:
    body = json.dumps(
        {
            "chain": chain,
            "seq": chain_seq,
            "at": canonical_time(at),
            "type": event_type,
            "model_id": model_id,
            "request_id": request_id,
            "version_id": version_id,
            "payload": payload,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    )
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()
