"""The recovery settings a deployment relies on: every docker-compose service restarts after it exits and
reports its health; the broker returns a dead worker's messages within minutes and reconnects forever;
a job's heartbeat timeout leaves room for missed beats."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_compose_service_has_a_restart_policy_and_a_healthcheck() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"postgres", "redis", "api", "worker"} <= set(services)
    for name, service in services.items():
        assert service.get("restart") in {"unless-stopped", "always"}, name
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"}, name
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "workers.alive" in " ".join(services["worker"]["healthcheck"]["test"])


def test_the_broker_returns_unacknowledged_messages_within_minutes_and_reconnects_forever() -> None:
    from workers.celery_app import app

    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.broker_transport_options["visibility_timeout"] <= 600
    assert conf.broker_connection_retry and conf.broker_connection_max_retries is None
    assert conf.worker_prefetch_multiplier == 1


def test_a_heartbeat_timeout_shorter_than_three_beats_is_refused() -> None:
    with pytest.raises(ValidationError, match="LETHE_JOB_HEARTBEAT_TIMEOUT_SECONDS"):
        Settings(job_heartbeat_seconds=5, job_heartbeat_timeout_seconds=10)
    settings = Settings()
    assert settings.job_heartbeat_timeout_seconds >= 3 * settings.job_heartbeat_seconds
    assert settings.job_heartbeat_timeout_seconds < 60  # a dead job is re-run within the deletion deadline
