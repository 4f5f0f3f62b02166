"""The deployment files point at things that exist, and worker processes start without touching CUDA."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from service.settings import Settings
from tests.processes import run_python

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _check_command(command: list[str]) -> None:
    program = command[0]
    if program in ("python", "python3"):
        assert command[1] == "-m", command
        module = command[2]
        assert _module_exists(module), f"module {module} does not exist"
        assert (
            _module_exists(f"{module}.__main__")
            or (ROOT / module.replace(".", "/")).with_suffix(".py").exists()
        )
    elif program == "celery":
        assert shutil.which("celery", path=str(Path(sys.executable).parent)), "celery is not installed"
        app = command[command.index("-A") + 1]
        module = importlib.import_module(app)
        assert hasattr(module, "app"), f"{app} defines no Celery app"
    else:
        pytest.fail(f"unexpected program {program!r} in a compose command")


def test_compose_has_the_four_services() -> None:
    assert {"api", "worker", "postgres", "redis"} <= set(COMPOSE["services"])


@pytest.mark.parametrize("name", ["api", "worker"])
def test_each_built_service_command_exists_in_the_project(name: str) -> None:
    service = COMPOSE["services"][name]
    assert service["build"] == "."
    _check_command(service["command"])


def test_compose_only_sets_real_settings() -> None:
    fields = {f"LETHE_{f.upper()}" for f in Settings.model_fields}
    env = {
        k
        for s in COMPOSE["services"].values()
        for k in (s.get("environment") or {})
        if k.startswith("LETHE_")
    }
    assert env and env <= fields, env - fields


def test_dockerfile_runs_the_api() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^CMD \["python", "-m", "service"\]$', text, re.MULTILINE)
    assert "ARG BASE_IMAGE" in text  # a build argument selects a CUDA base
    for path in re.findall(r"^COPY (\S+) ", text, re.MULTILINE):
        if not path.startswith("--"):
            assert (ROOT / path).exists(), f"Dockerfile copies {path}, which does not exist"


def test_the_wheel_ships_the_service_not_the_benchmarks() -> None:
    """``bench`` (the benchmarks and their baselines) runs from a checkout; the wheel and the image hold
    the library, the service, the workers and the ``lethe`` command line only."""
    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_namespace_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))
    assert {p.split(".")[0] for p in packages} == {"unlearning", "service", "workers", "lethe_cli"}
    assert not re.search(r"^COPY bench\b", (ROOT / "Dockerfile").read_text(), re.MULTILINE)


_NO_CUDA_PROBE = """
import sys, torch
calls = []
def probe(name):
    def record(*args, **kwargs):
        calls.append(name)
        return False if name == "is_available" else 0
    return record
# Anything that would initialise (or query) CUDA while the app is imported is recorded.
for name in ("_lazy_init", "init", "is_available", "device_count", "current_device"):
    setattr(torch.cuda, name, probe(name))
import workers.celery_app
assert workers.celery_app.tasks, "no tasks registered"
sys.exit(f"CUDA touched before the fork: {calls}" if calls or torch.cuda.is_initialized() else 0)
"""


def test_worker_import_does_not_touch_cuda() -> None:
    """Celery forks its pool after importing the app: nothing may initialise, or even probe, CUDA by then."""
    result = run_python("-c", _NO_CUDA_PROBE, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
