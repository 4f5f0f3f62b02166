"""Idempotency-Key handling (IETF draft semantics)."""
