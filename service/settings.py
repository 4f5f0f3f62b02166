"""Configuration from ``LETHE_*`` environment variables (``docs/service.md``): embedded by default (its own
Postgres, fakeredis, an in-process worker), ``LETHE_MODE=production`` with servers and Celery workers."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.callback_targets import Network, parse_networks
from service.signing import new_seed, parse_public_key, parse_seed
from service.storage.s3 import parse_s3_url

MIN_TOKEN_LENGTH = 16


def settings_errors(exc: ValidationError) -> list[str]:
    """One line per validation problem, prefixed with the field's variable (``LETHE_PORT``) if any."""
    lines = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        field = ".".join(str(part) for part in error.get("loc", ()))
        lines.append(f"LETHE_{field.upper()}: {message}" if field else message)
    return lines


class Settings(BaseSettings):
    """All knobs of the service; read once at start-up and passed around explicitly."""

    model_config = SettingsConfigDict(env_prefix="LETHE_", extra="ignore")

    mode: Literal["embedded", "production"] = "embedded"
    var_dir: Path = Path("var")
    database_url: str | None = None
    redis_url: str | None = None
    broker_url: str | None = None
    artifact_dir: Path | None = None
    artifact_fsync: bool = True
    artifact_url: str | None = None
    s3_endpoint_url: str | None = None
    worker: Literal["inprocess", "celery"] | None = None

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = "text"
    auto_migrate: bool = True
    demo_model: bool | None = None

    subject_hash_key: str | None = None
    api_tokens: str | None = None
    read_tokens: str | None = None
    redis_prefix: str = "lethe"
    celery_queue: str = "lethe"

    max_upload_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    max_request_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    max_decompressed_bytes: int = Field(2 * 1024**3, ge=1024)
    max_upload_rows: int = Field(1_000_000, ge=1)
    max_upload_cells: int = Field(50_000_000, ge=1)
    deletion_sla_seconds: float = Field(60.0, gt=0)
    max_batch: int = Field(10_000, ge=1)
    max_buckets: int = Field(4096, ge=1, le=65_536)
    idempotency_ttl_hours: float = Field(24.0, gt=0)
    cache_ttl_seconds: float = Field(300.0, gt=0)

    dispatcher_interval_seconds: float = Field(0.5, gt=0)
    reconcile_after_seconds: float = Field(5.0, gt=0)
    stale_job_seconds: float = Field(60.0, gt=0)
    job_heartbeat_seconds: float = Field(2.0, gt=0)
    job_heartbeat_timeout_seconds: float = Field(20.0, gt=0)
    broker_visibility_timeout_seconds: float = Field(300.0, gt=0)
    orphan_sweep_seconds: float = Field(900.0, gt=0)
    orphan_grace_seconds: float = Field(3600.0, gt=0)
    callback_max_attempts: int = Field(5, ge=1, le=50)
    callback_timeout_seconds: float = Field(5.0, gt=0)
    callback_backoff_seconds: float = Field(1.0, ge=0)
    callback_allowed_networks: str | None = None
    callback_signing_key: str | None = None
    receipt_signing_key: str | None = None
    receipt_retired_keys: str | None = None

    worker_metrics_port: int | None = Field(None, ge=1, le=65535)
    worker_liveness_seconds: float = Field(5.0, gt=0)
    torch_threads: int | None = Field(None, ge=1)
    worker_cores: float | None = Field(None, gt=0)  # set by the worker launcher for each process
    gpus: str | None = None
    worker_concurrency: int = Field(4, ge=1, le=256)
    max_job_memory_mb: int = Field(8192, ge=16)
    max_job_seconds: float = Field(6 * 3600.0, gt=0)
    max_hot_store_mb: int = Field(4096, ge=1)
    job_time_factor: float = Field(5.0, ge=1)
    job_time_grace_seconds: float = Field(60.0, ge=0)

    @property
    def api_token_list(self) -> tuple[bytes, ...]:
        """The bearer tokens that may do anything, as bytes for a constant-time comparison."""
        return _token_list(self.api_tokens)

    @property
    def read_token_list(self) -> tuple[bytes, ...]:
        """The bearer tokens that may only read (``LETHE_READ_TOKENS``)."""
        return _token_list(self.read_tokens)

    @cached_property
    def callback_networks(self) -> tuple[Network, ...]:
        """The non-public networks callbacks may reach (public addresses always may)."""
        return parse_networks(self.callback_allowed_networks)

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_lower_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("artifact_dir", mode="before")
    @classmethod
    def _empty_dir_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _stores_and_keys_parse(self) -> Settings:
        """The artifact URL, signing keys and lists, parsed (and kept) now: a bad one stops the start."""
        if self.artifact_url:  # an empty value (a compose file's ${VAR:-}) means unset
            if self.artifact_dir is not None:
                raise ValueError(
                    "set LETHE_ARTIFACT_URL or LETHE_ARTIFACT_DIR, not both: blobs live in one store"
                )
            parse_s3_url(self.artifact_url)
        key = self.callback_signing_key
        if key and (len(key) < MIN_TOKEN_LENGTH or key != key.strip()):
            raise ValueError(
                f"LETHE_CALLBACK_SIGNING_KEY must be at least {MIN_TOKEN_LENGTH} characters, without surrounding "
                "whitespace: use a long random value (`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        if self.receipt_signing_key:  # empty (an unset compose variable) is unset
            try:
                parse_seed(self.receipt_signing_key)
            except ValueError as exc:
                raise ValueError(
                    f"LETHE_RECEIPT_SIGNING_KEY: {exc}; `python -m service.receipts new-key` prints a valid one"
                ) from None
        self.callback_networks, self.retired_receipt_keys  # noqa: B018
        return self

    @cached_property
    def retired_receipt_keys(self) -> list[bytes]:
        """The raw public keys of earlier receipt signing keys, in the order given, without repeats."""
        keys: dict[bytes, None] = {}
        for entry in (e.strip() for e in (self.receipt_retired_keys or "").split(",")):
            if not entry:
                continue
            try:
                keys[parse_public_key(entry)] = None
            except ValueError as exc:
                raise ValueError(
                    f"LETHE_RECEIPT_RETIRED_KEYS: {entry!r}: {exc}; list the public keys "
                    "(GET /v1/receipts/key, `public_key`) of earlier signing keys, separated by commas"
                ) from None
        return list(keys)

    @model_validator(mode="after")
    def _secrets_are_usable(self) -> Settings:
        lists = (("LETHE_API_TOKENS", self.api_token_list), ("LETHE_READ_TOKENS", self.read_token_list))
        for name, tokens in lists:
            weak = [t for t in tokens if len(t) < MIN_TOKEN_LENGTH or any(c in t for c in b" \t")]
            if weak:
                raise ValueError(
                    f"{name}: {len(weak)} token(s) shorter than {MIN_TOKEN_LENGTH} characters or holding "
                    "whitespace; use long random values (for example `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'`), separated by commas"
                )
        if self.read_token_list and not self.api_token_list:
            raise ValueError(
                "LETHE_READ_TOKENS needs LETHE_API_TOKENS: read-only tokens only mean something when the API "
                "requires a token; set LETHE_API_TOKENS too"
            )
        if set(self.read_token_list) & set(self.api_token_list):
            raise ValueError(
                "a token is in both LETHE_API_TOKENS and LETHE_READ_TOKENS: give each token one role"
            )
        key = self.subject_hash_key
        if key and key != key.strip():
            raise ValueError(
                "LETHE_SUBJECT_HASH_KEY has surrounding whitespace: remove it (the key is used as is)"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.job_heartbeat_timeout_seconds < 3 * self.job_heartbeat_seconds:
            raise ValueError(
                "LETHE_JOB_HEARTBEAT_TIMEOUT_SECONDS must be at least 3 x LETHE_JOB_HEARTBEAT_SECONDS: a job "
                "that misses one beat (its row busy, a database blip) must not be presumed dead"
            )
        if self.mode == "production":
            servers = ("LETHE_DATABASE_URL", "LETHE_REDIS_URL", "LETHE_SUBJECT_HASH_KEY")
            values = (self.database_url, self.redis_url, self.subject_hash_key)
            missing = [name for name, value in zip(servers, values) if not value]
            if missing:
                raise ValueError(
                    f"production mode needs {', '.join(missing)}: set them or use LETHE_MODE=embedded"
                )
        return self

    @cached_property
    def effective_database_url(self) -> str:
        """``LETHE_DATABASE_URL``, else the embedded Postgres under ``var_dir`` (started if needed)."""
        if self.database_url:
            return self.database_url
        from service.db.embedded import embedded_database_url

        return embedded_database_url(self.var_dir)

    @cached_property
    def effective_artifact_dir(self) -> Path:
        return self.artifact_dir or self.var_dir / "artifacts"

    @cached_property
    def effective_worker(self) -> str:
        return self.worker or ("inprocess" if self.mode == "embedded" else "celery")

    @cached_property
    def effective_broker_url(self) -> str | None:
        return self.broker_url or self.redis_url

    @cached_property
    def effective_demo_model(self) -> bool:
        return self.demo_model if self.demo_model is not None else self.mode == "embedded"

    @cached_property
    def effective_subject_hash_key(self) -> bytes:
        """The HMAC key for subject hashes: configured, or generated once into ``var_dir`` and kept."""
        if self.subject_hash_key:
            return self.subject_hash_key.encode()
        return self._kept_secret("subject_hash.key", lambda: secrets.token_hex(32)).encode()

    @cached_property
    def effective_receipt_signing_key(self) -> bytes | None:
        """The Ed25519 seed that signs receipts: configured, or (embedded) generated once into ``var_dir``."""
        if self.receipt_signing_key:
            return parse_seed(self.receipt_signing_key)
        if self.mode != "embedded":
            return None
        return parse_seed(self._kept_secret("receipt_signing.key", new_seed))

    def _kept_secret(self, name: str, make: Callable[[], str]) -> str:
        """The secret in ``var_dir/name``, made once by ``make`` (hard-linked: concurrent starts agree)."""
        path = self.var_dir / name
        if path.exists():
            return path.read_text().strip()
        self.var_dir.mkdir(parents=True, exist_ok=True)
        secret = make()
        draft = path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secret)
                out.flush()
                os.fsync(out.fileno())
            os.link(draft, path)
        except FileExistsError:
            return path.read_text().strip()
        finally:
            draft.unlink(missing_ok=True)
        return secret


def _token_list(value: str | None) -> tuple[bytes, ...]:
    return tuple(t.strip().encode() for t in (value or "").split(",") if t.strip())
