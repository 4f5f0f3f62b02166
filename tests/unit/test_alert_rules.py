"""The alerting set-up in ``ops/`` holds: ``promtool`` accepts the rule file and the Prometheus config (with
the rule and target files it names) and passes the rules' unit tests (``ops/alerts.test.yml``); the worker
targets are the metrics ports the launcher gives the compose worker; compose mounts every file the config
names beside it.

``promtool``: see :mod:`tests.prometheus_tools` (skipped where it cannot be installed, failed under CI
where it could).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus_tools import prometheus_tool
from workers.launcher import plan

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
_IN_CONTAINER = Path("/etc/prometheus")  # where docker-compose mounts the config and its files


@pytest.fixture(scope="module")
def promtool() -> str:
    return prometheus_tool("promtool")


def _run(promtool: str, *args: str) -> str:
    """Run ``promtool args`` in ``ops/``; assert it succeeded and return its output."""
    done = subprocess.run(
        [promtool, *args], check=False, cwd=OPS, capture_output=True, text=True, timeout=120
    )
    output = f"{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def _load(name: str) -> Any:
    return (
        yaml.safe_load((OPS / name).read_text())
        if name.endswith(".yml")
        else json.loads((OPS / name).read_text())
    )


def _files_named_by_config() -> list[str]:
    """The rule files and file_sd target files ``ops/prometheus.yml`` names (relative to it)."""
    config = _load("prometheus.yml")
    sd = [f for job in config["scrape_configs"] for c in job.get("file_sd_configs", []) for f in c["files"]]
    return [*config["rule_files"], *sd]


def test_the_rule_file_is_valid(promtool: str) -> None:
    assert "SUCCESS" in _run(promtool, "check", "rules", "alerts.yml")


def test_the_prometheus_config_and_the_files_it_names_are_valid(promtool: str) -> None:
    # check config parses the rule files and the file_sd files; a missing target file is only a WARNING
    output = _run(promtool, "check", "config", "prometheus.yml")
    assert "WARNING" not in output, output


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_say(promtool: str) -> None:
    assert "SUCCESS" in _run(promtool, "test", "rules", "alerts.test.yml")


def test_every_alert_has_a_unit_test_a_severity_and_a_runbook() -> None:
    rules = [r for group in _load("alerts.yml")["groups"] for r in group["rules"]]
    tested = {t["alertname"] for case in _load("alerts.test.yml")["tests"] for t in case["alert_rule_test"]}
    for rule in rules:
        assert rule["alert"] in tested, f"{rule['alert']} has no test in ops/alerts.test.yml"
        assert "for" in rule and rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]


def test_the_worker_targets_are_the_ports_of_the_compose_workers() -> None:
    # the compose worker has no GPU: its launcher runs the CPU, retrain and train workers on 9100 + i
    ports = [
        int(p.env["LETHE_WORKER_METRICS_PORT"])
        for p in plan([], queue_prefix="q", concurrency=1, metrics_port=9100)
    ]
    targets = [t for group in _load("workers.json") for t in group["targets"]]
    assert targets == [f"worker:{port}" for port in ports]


def test_compose_mounts_every_file_the_config_names_beside_it() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = set(compose["services"]["prometheus"]["volumes"])
    for name in ["prometheus.yml", *_files_named_by_config()]:
        assert f"./ops/{name}:{_IN_CONTAINER / name}:ro" in mounts, name
    alertmanager = compose["services"]["alertmanager"]
    assert "./ops/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro" in alertmanager["volumes"]
    assert alertmanager["profiles"] == ["monitoring"] and "healthcheck" in alertmanager
    targets = _load("prometheus.yml")["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"]
