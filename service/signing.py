"""Ed25519 signatures over canonical JSON (deletion receipts); keys and signatures unpadded base64url."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SEED_BYTES = 32


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def from_b64url(text: str) -> bytes:
    """Raises ValueError for text that is not base64url."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not base64url: {exc}") from None


def canonical(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def new_seed() -> str:
    """A fresh private key (its 32-byte seed, base64url): a value for LETHE_RECEIPT_SIGNING_KEY."""
    return b64url(secrets.token_bytes(SEED_BYTES))


def parse_seed(text: str, kind: str = "private") -> bytes:
    """The 32-byte seed (``kind`` "public": a public key) from base64url; ValueError naming what is wrong."""
    raw = from_b64url(text.strip())
    if len(raw) != SEED_BYTES:
        raise ValueError(f"an Ed25519 {kind} key is {SEED_BYTES} bytes, this one decodes to {len(raw)}")
    return raw


def parse_public_key(text: str) -> bytes:
    """The raw 32-byte Ed25519 public key from its base64url form; ValueError naming what is wrong."""
    return parse_seed(text, "public")


def public_key_pem(public_key: bytes) -> str:
    """The raw public key as PEM (SubjectPublicKeyInfo), the form most tools read."""
    key = Ed25519PublicKey.from_public_bytes(public_key)
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_id(public_key: bytes) -> str:
    """A short name for a public key: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


class ReceiptSigner:
    """Signs payloads with one Ed25519 key; knows its public half."""

    def __init__(self, seed: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        public = self._key.public_key()
        self.public_key = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public_key_pem = public_key_pem(self.public_key)
        self.key_id = key_id(self.public_key)

    def sign(self, payload: Mapping[str, Any]) -> str:
        return b64url(self._key.sign(canonical(payload)))


def verify(payload: Mapping[str, Any], signature: str, public_key: str) -> bool:
    """Whether ``signature`` (base64url) is the key's (``public_key``: raw, base64url) over ``payload``."""
    try:
        key = Ed25519PublicKey.from_public_bytes(from_b64url(public_key))
        key.verify(from_b64url(signature), canonical(payload))
    except (InvalidSignature, ValueError):
        return False
    return True
