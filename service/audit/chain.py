"""How an audit event is hashed into its chain.

``hash = sha256(prev_hash || canonical_json(event))`` where the canonical JSON has sorted keys, no
whitespace and ASCII only, and covers every column a reader relies on. Changing, inserting, deleting
or reordering any event breaks the chain from that point; truncating the tail is caught by the chain's
head row.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64


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
