"""``python -m workers`` (workers.launcher): which worker processes a host runs, and how its GPUs are found
without touching CUDA. The processes themselves are started in tests/integration/test_worker_launcher.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes import run_python
from workers.launcher import plan, visible_gpus


def queues(argv: list[str]) -> list[str]:
    return argv[argv.index("-Q") + 1].split(",")


def test_without_gpus_one_cpu_worker_takes_every_lane() -> None:
    (only,) = plan([], queue_prefix="lethe", concurrency=6)

    assert queues(only.argv) == ["lethe.train", "lethe.updates", "lethe.io"]
    assert "--pool=threads" in only.argv and "--concurrency=6" in only.argv
    assert only.env == {}


def test_one_pinned_worker_per_gpu_trains_and_the_cpu_worker_keeps_off_the_gpus() -> None:
    cpu, gpu0, gpu1 = plan(["0", "1"], queue_prefix="q", concurrency=4)

    for worker, gpu in ((gpu0, "0"), (gpu1, "1")):
        assert worker.env == {"CUDA_VISIBLE_DEVICES": gpu}
        assert queues(worker.argv) == ["q.train"]
        assert "--pool=solo" in worker.argv  # one process, one job at a time on its device
        assert f"gpu{gpu}@%h" in worker.argv
    assert queues(cpu.argv) == ["q.updates", "q.io"]
    assert cpu.env == {"CUDA_VISIBLE_DEVICES": "", "LETHE_DEVICE": "cpu"}


def test_each_worker_gets_a_metrics_port_of_its_own_and_the_cpu_worker_the_configured_one() -> None:
    ports = {
        p.name: p.env["LETHE_WORKER_METRICS_PORT"]
        for p in plan(["0", "1"], queue_prefix="q", concurrency=1, metrics_port=9100)
    }
    assert ports == {"cpu": "9100", "gpu0": "9101", "gpu1": "9102"}
    assert all("LETHE_WORKER_METRICS_PORT" not in p.env for p in plan(["0"], queue_prefix="q", concurrency=1))


@pytest.mark.parametrize(
    ("setting", "environ", "devices", "expected"),
    [
        ("2,3", {"CUDA_VISIBLE_DEVICES": "0"}, ["nvidia0"], ["2", "3"]),  # the setting wins
        ("none", {}, ["nvidia0"], []),
        (None, {"CUDA_VISIBLE_DEVICES": "GPU-8f2e, GPU-1a2b"}, [], ["GPU-8f2e", "GPU-1a2b"]),
        (None, {"CUDA_VISIBLE_DEVICES": ""}, ["nvidia0"], []),  # hidden on purpose
        (None, {"CUDA_VISIBLE_DEVICES": "-1"}, ["nvidia0"], []),
        (None, {}, ["nvidia1", "nvidiactl", "nvidia0", "nvidia-uvm", "nvidia10"], ["0", "1", "10"]),
        (None, {}, ["null", "tty"], []),
    ],
)
def test_gpus_come_from_the_setting_then_cuda_visible_devices_then_the_device_files(
    setting: str | None, environ: dict[str, str], devices: list[str], expected: list[str], tmp_path: Path
) -> None:
    for name in devices:
        (tmp_path / name).touch()
    assert visible_gpus(setting, environ, dev=tmp_path) == expected


def test_a_host_without_a_dev_directory_has_no_gpus(tmp_path: Path) -> None:
    assert visible_gpus(None, {}, dev=tmp_path / "missing") == []


_DRY_RUN_WITHOUT_TORCH = """
import json, sys
from workers.launcher import main
main(["--dry-run"])
sys.exit("torch was imported" if "torch" in sys.modules else 0)
"""


def test_the_dry_run_prints_the_plan_and_never_imports_torch() -> None:
    """The launcher only decides and forks: torch (and CUDA) stay for the workers' first job."""
    result = run_python(
        "-c",
        _DRY_RUN_WITHOUT_TORCH,
        timeout=60,
        env={"LETHE_GPUS": "0", "LETHE_CELERY_QUEUE": "x", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = [p["name"] for p in json.loads(result.stdout)]
    assert names == ["cpu", "gpu0"]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "in embedded mode the API runs its jobs itself"),
        ({"LETHE_MODE": "production"}, "production mode needs LETHE_DATABASE_URL"),
        # a field's error names its variable, not pydantic's field
        ({"LETHE_WORKER_CONCURRENCY": "abc"}, "LETHE_WORKER_CONCURRENCY: Input should be a valid integer"),
        (
            {
                "LETHE_MODE": "production",
                "LETHE_DATABASE_URL": "postgresql+psycopg://db/lethe",
                "LETHE_REDIS_URL": "redis://redis:6379/0",
                "LETHE_SUBJECT_HASH_KEY": "k" * 32,
                "LETHE_GPUS": "0,1",
                "LETHE_WORKER_METRICS_PORT": "65535",
            },
            "take ports 65535 to 65537, past 65535",
        ),
    ],
)
def test_the_launcher_refuses_a_setup_without_a_broker_with_a_message(
    environ: dict[str, str], message: str
) -> None:
    result = run_python("-m", "workers", timeout=60, env={"PATH": "", **environ})
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


_UNREACHABLE = {
    "LETHE_MODE": "production",
    "LETHE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/lethe",
    "LETHE_REDIS_URL": "redis://127.0.0.1:1/0",
    "LETHE_SUBJECT_HASH_KEY": "k" * 32,
}


_REFUSED_SETTINGS = [
    ({"LETHE_PORT": "abc"}, "lethe: LETHE_PORT: Input should be a valid integer"),
    ({"LETHE_LOG_LEVEL": "verbose"}, "lethe: LETHE_LOG_LEVEL: Input should be 'critical'"),
    ({"LETHE_MODE": "production"}, "lethe: production mode needs LETHE_DATABASE_URL"),
    ({"LETHE_SUBJECT_HASH_KEY": " key"}, "LETHE_SUBJECT_HASH_KEY has surrounding whitespace"),
]
# service.preflight: what valid settings name must be usable before the service starts
_UNUSABLE_TARGETS = [
    (_UNREACHABLE, "lethe: LETHE_DATABASE_URL: cannot connect to postgresql+psycopg://postgres@127.0.0.1:1"),
    (_UNREACHABLE, "lethe: LETHE_REDIS_URL: cannot reach Redis at 127.0.0.1:1"),
    (
        {**_UNREACHABLE, "LETHE_DATABASE_URL": "not-a-url"},
        "LETHE_DATABASE_URL: 'not-a-url' is not a database URL",
    ),
]


@pytest.mark.parametrize(("environ", "message"), _REFUSED_SETTINGS + _UNUSABLE_TARGETS)
def test_the_service_refuses_a_bad_setting_in_one_line_naming_its_variable(
    environ: dict[str, str], message: str, tmp_path: Path
) -> None:
    result = run_python(
        "-m", "service", timeout=60, env={"PATH": "", "LETHE_VAR_DIR": str(tmp_path), **environ}
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr
    if (environ, message) in _REFUSED_SETTINGS:
        assert not any(tmp_path.iterdir())  # a bad setting is refused before anything is created


def test_the_workers_refuse_servers_they_cannot_reach(tmp_path: Path) -> None:
    result = run_python("-m", "workers", timeout=60, env={"PATH": "", **_UNREACHABLE})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "lethe workers: LETHE_REDIS_URL: cannot reach Redis at 127.0.0.1:1" in result.stderr


def test_the_service_takes_no_arguments_but_help(tmp_path: Path) -> None:
    env = {"PATH": "", "LETHE_VAR_DIR": str(tmp_path)}
    helped = run_python("-m", "service", "--help", timeout=60, env=env)
    assert helped.returncode == 0 and "usage: python -m service" in helped.stdout
    unknown = run_python("-m", "service", "--port", "9000", timeout=60, env=env)
    assert unknown.returncode == 2 and "unrecognized arguments: --port 9000" in unknown.stderr
    assert not any(tmp_path.iterdir())  # neither started the service
