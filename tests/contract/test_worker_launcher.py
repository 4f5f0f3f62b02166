"""``python -m workers`` (workers.launcher): which worker processes a host runs, and how its GPUs are found
without touching CUDA. The processes themselves are started in tests/integration/test_worker_launcher.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.processes import run_python
from workers.launcher import RestartPolicy, WorkerProcess, plan, supervise, visible_gpus


def queues(argv: list[str]) -> list[str]:
    return argv[argv.index("-Q") + 1].split(",")


def test_without_gpus_trainings_retrains_and_updates_each_have_a_process() -> None:
    cpu, retrain, train = plan([], queue_prefix="lethe", concurrency=6)

    assert queues(cpu.argv) == ["lethe.updates", "lethe.io"]
    assert queues(retrain.argv) == ["lethe.retrain"]  # a retrain never waits behind a first training
    assert queues(train.argv) == ["lethe.train"]
    for worker in (cpu, retrain, train):
        assert "--pool=threads" in worker.argv and "--concurrency=6" in worker.argv
        assert worker.env == {}


def test_one_pinned_worker_per_gpu_trains_and_the_cpu_worker_keeps_off_the_gpus() -> None:
    cpu, retrain, gpu0, gpu1 = plan(["0", "1"], queue_prefix="q", concurrency=4)

    for worker, gpu in ((gpu0, "0"), (gpu1, "1")):
        assert worker.env == {"CUDA_VISIBLE_DEVICES": gpu}
        assert queues(worker.argv) == ["q.train"]
        assert "--pool=solo" in worker.argv  # one process, one job at a time on its device
        assert f"gpu{gpu}@%h" in worker.argv
    assert queues(retrain.argv) == ["q.retrain"] and retrain.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert queues(cpu.argv) == ["q.updates", "q.io"]
    assert cpu.env == {"CUDA_VISIBLE_DEVICES": "", "LETHE_DEVICE": "cpu"}


def test_each_worker_gets_a_metrics_port_of_its_own_and_the_cpu_worker_the_configured_one() -> None:
    ports = {
        p.name: p.env["LETHE_WORKER_METRICS_PORT"]
        for p in plan(["0", "1"], queue_prefix="q", concurrency=1, metrics_port=9100)
    }
    assert ports == {"cpu": "9100", "retrain": "9101", "gpu0": "9102", "gpu1": "9103"}
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
    assert names == ["cpu", "retrain", "gpu0"]


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
            "take ports 65535 to 65538, past 65535",
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


FAST = RestartPolicy(first_delay=0.01, max_delay=0.05, max_per_minute=3)


def _process(name: str, code: str, tmp_path: Path) -> WorkerProcess:
    """A stand-in worker running ``code``; each start appends a line to ``<tmp_path>/<name>.starts``."""
    starts = tmp_path / f"{name}.starts"
    script = f"open({str(starts)!r}, 'a').write('x\\n'); {code}"
    return WorkerProcess(name, [sys.executable, "-c", script], {})


def _starts(tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_restart_delay_doubles_up_to_its_cap_and_gives_up_past_the_bound_per_minute() -> None:
    policy = RestartPolicy(first_delay=1.0, max_delay=5.0, max_per_minute=4)
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, None]


def test_a_worker_that_exits_is_restarted_until_it_exits_too_often_and_the_others_then_stop(
    tmp_path: Path,
) -> None:
    crashing = _process("crashing", "raise SystemExit(3)", tmp_path)
    steady = _process("steady", "import time; time.sleep(60)", tmp_path)
    started = time.monotonic()
    status = supervise([crashing, steady], {}, FAST)
    assert status == 3
    assert _starts(tmp_path, "crashing") == FAST.max_per_minute + 1  # the first start and each restart
    assert _starts(tmp_path, "steady") == 1  # never restarted: it kept running until stopped
    assert time.monotonic() - started < 30  # the steady one was stopped, not waited for


def test_a_worker_that_died_once_is_back_and_a_stop_signal_still_stops_all_with_status_0(
    tmp_path: Path,
) -> None:
    once = tmp_path / "died-once"
    code = f"import os, time; p = {str(once)!r}; " + (
        "os.path.exists(p) or (open(p, 'w').close(), os._exit(9)); time.sleep(60)"
    )
    flaky = _process("flaky", code, tmp_path)

    def stop_once_back() -> None:
        deadline = time.monotonic() + 20
        while _starts(tmp_path, "flaky") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # supervise's handler: stop every worker, then return 0

    stopper = threading.Thread(target=stop_once_back)
    stopper.start()
    assert supervise([flaky], {}, FAST) == 0  # signal handlers are installed from the main thread only
    stopper.join()
    assert _starts(tmp_path, "flaky") == 2
