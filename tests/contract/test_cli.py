"""``lethe``, the command line (lethe_cli): its arguments and exit statuses against a mock API, then the
whole flow of the README's "Command line" against ``python -m service`` started as ``make run`` starts it.

Exit statuses: 0 ok, 1 a check failed, 2 usage, 3 the API refused (4xx), 4 no usable answer."""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.stack import api_process
from lethe_cli import main
from lethe_cli.commands.models import hyperparameter, model_body
from service.signing import ReceiptSigner, b64url, new_seed, parse_seed

Handler = Callable[[httpx.Request], httpx.Response]


def run(argv: list[str], handler: Handler) -> int:
    return main(argv, transport=httpx.MockTransport(handler))


def error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


def model(
    state: str, phase: str = "done", percent: float = 100.0, error: str | None = None
) -> dict[str, Any]:
    return {
        "id": 7,
        "name": "m",
        "dataset_id": 2,
        "method": "hessian_free",
        "family": "logistic_regression",
        "hyperparameters": {"epochs": 5},
        "privacy": {"epsilon": 1.0, "delta": 0.001},
        "release_mode": "audited",
        "budget_epoch": 1,
        "train_size": 60,
        "current_version": 1 if state == "ready" else None,
        "status": {"state": state, "phase": phase, "percent": percent, "eta_seconds": 3.0, "error": error},
    }


def deletion(state: str, history: list[str], reason: str | None = None) -> dict[str, Any]:
    return {
        "id": 4,
        "model_id": 7,
        "state": state,
        "num_samples": 2,
        "history": [
            {"state": s, "at": f"2025-01-01T00:00:0{i}Z", "detail": None} for i, s in enumerate(history)
        ],
        "version": {"seq": 2, "kind": "unlearned", "certificate": {"guarantee": "certified"}}
        if state == "completed"
        else None,
        "failure_reason": reason,
        "callback": None,
        "expected_by": "2025-01-01T00:01:00Z",
        "created_at": "2025-01-01T00:00:00Z",
        "completed_at": "2025-01-01T00:00:09Z" if state == "completed" else None,
    }


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("epochs=5", ("epochs", 5)),
        ("lr=0.1", ("lr", 0.1)),
        ("hidden=[64, 32]", ("hidden", [64, 32])),
        ("clip_mode=batch", ("clip_mode", "batch")),  # not JSON: a string
        ("flag=true", ("flag", True)),
        ("note=a=b", ("note", "a=b")),
        (" epochs =3", ("epochs", 3)),
    ],
)
def test_set_reads_values_as_json_when_they_parse(text: str, expected: tuple[str, Any]) -> None:
    assert hyperparameter(text) == expected


@pytest.mark.parametrize("text", ["epochs", "=5", ""])
def test_set_without_a_key_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        hyperparameter(text)


def test_register_sends_only_the_options_given() -> None:
    args = argparse.Namespace(
        name=None,
        dataset=3,
        hyperparameters=[("epochs", 2), ("lr", 0.1)],
        method="langevin",
        family=None,
        release_mode="certified",
        seed=None,
        epsilon=0.5,
        delta=None,
    )
    assert model_body(args) == {
        "name": "model-of-dataset-3",
        "dataset_id": 3,
        "hyperparameters": {"epochs": 2, "lr": 0.1},
        "method": "langevin",
        "release_mode": "certified",
        "privacy": {"epsilon": 0.5},
    }


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no command
        ["frobnicate"],
        ["watch"],  # MODEL_ID missing
        ["watch", "seven"],
        ["register", "--dataset", "1", "--set", "epochs"],
        ["register", "--dataset", "1", "--release-mode", "loose"],
        ["--timeout", "0", "models"],
        ["receipt"],  # neither REQUEST_ID nor --file
        ["receipt", "1", "--file", "r.json"],
    ],
)
def test_bad_arguments_exit_2_without_calling_the_api(argv: list[str]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"called the API: {request.url}")

    assert run(argv, refuse) == 2


def test_help_lists_the_commands_and_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("upload", "register", "watch", "models", "forget", "deletion", "receipt", "audit"):
        assert command in out
    assert "LETHE_URL" in out and "LETHE_TOKEN" in out
    assert "3  the API refused the request (4xx)" in out


def test_global_options_go_before_or_after_the_command_and_default_to_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"models": [model("ready")], "next_after_id": None})

    monkeypatch.setenv("LETHE_URL", "http://lethe.example:9000")
    monkeypatch.setenv("LETHE_TOKEN", "from-the-environment")
    assert run(["models"], answer) == 0
    assert run(["--url", "http://other:1", "models", "--token", "given"], answer) == 0
    assert run(["models", "--json"], answer) == 0
    first, second = seen[:2]
    assert str(first.url).startswith("http://lethe.example:9000/v1/models")
    assert first.headers["authorization"] == "Bearer from-the-environment"
    assert str(second.url).startswith("http://other:1/v1/models")
    assert second.headers["authorization"] == "Bearer given"
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "STATE", "VERSION", "METHOD", "FAMILY", "DATASET", "NAME"]
    assert out[1].split() == ["7", "ready", "1", "hessian_free", "logistic_regression", "2", "m"]
    assert json.loads(out[-1])["id"] == 7  # --json: the API's object, one a line

    monkeypatch.delenv("LETHE_TOKEN")
    assert run(["models"], answer) == 0
    assert "authorization" not in seen[-1].headers


# -- exit statuses ------------------------------------------------------------------------------


def test_a_refusal_exits_3_with_the_api_s_code_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return error(404, "not_found", "model 99 does not exist")

    assert run(["models", "99"], refuse) == 3
    assert "404 not_found: model 99 does not exist" in capsys.readouterr().err
    assert run(["--json", "watch", "99"], refuse) == 3
    assert json.loads(capsys.readouterr().err) == {
        "status": 404,
        "error": {"code": "not_found", "message": "model 99 does not exist"},
    }

    def not_lethe(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text="Forbidden")

    assert run(["models"], not_lethe) == 3
    assert "403 http_403: Forbidden" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (httpx.ConnectError("Connection refused"), "cannot reach http://127.0.0.1:8000"),
        (httpx.ReadTimeout("timed out"), "no answer from http://127.0.0.1:8000 within"),
        (httpx.Response(500, json={"error": {"code": "internal", "message": "boom"}}), "500 internal: boom"),
        (httpx.Response(502, text="<html>bad gateway</html>"), "502"),
        (httpx.Response(200, text="<html>not json</html>"), "no JSON"),
    ],
)
def test_no_usable_answer_exits_4(
    failure: Exception | httpx.Response,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("LETHE_URL", raising=False)

    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(failure, Exception):
            raise failure
        return failure

    assert run(["models"], answer) == 4
    assert said in capsys.readouterr().err


def test_an_unreadable_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError("called the API")

    assert run(["upload", str(tmp_path / "missing.csv")], refuse) == 2
    assert "cannot read" in capsys.readouterr().err
    assert run(["audit", "--anchors", str(tmp_path / "missing.json")], refuse) == 2
    assert run(["forget", "7"], refuse) == 2  # neither --owner nor --sample


def test_upload_sends_the_file_and_the_column_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t.csv"
    table.write_text("id,user,y,a\nr1,w1,0,0.5\n")
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            201, json={"id": 3, "name": "t", "num_rows": 1, "kind": "table", "num_classes": 2}
        )

    argv = ["upload", str(table), "--id-column", "id", "--owner-column", "user", "--label-column", "y"]
    assert run([*argv, "--num-classes", "2"], answer) == 0
    (request,) = seen
    assert request.method == "POST" and request.url.path == "/v1/datasets"
    assert dict(request.url.params) == {
        "id_column": "id",
        "owner_column": "user",
        "label_column": "y",
        "num_classes": "2",
    }
    body = request.read()
    assert b'name="file"; filename="t.csv"' in body and b"r1,w1,0,0.5" in body
    assert capsys.readouterr().out.strip() == "dataset 3 (t): 1 rows, table, 2 classes"


def test_watch_follows_the_phases_until_ready_or_failed(capsys: pytest.CaptureFixture[str]) -> None:
    answers = iter([model("queued", "queued", 0), model("training", "epochs", 40), model("ready")])

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models/7"
        return httpx.Response(200, json=next(answers))

    assert run(["watch", "7", "--interval", "0.001"], answer) == 0
    out = capsys.readouterr().out
    assert "model 7: training (epochs)" in out and "model 7 is ready: version 1" in out

    failed = iter([model("training", "epochs", 10), model("failed", "failed", 10, "loss became NaN")])
    assert run(["watch", "7", "--interval", "0.001"], lambda r: httpx.Response(200, json=next(failed))) == 1
    assert "model 7 failed: loss became NaN" in capsys.readouterr().err


def test_register_with_wait_posts_the_model_then_watches_it(capsys: pytest.CaptureFixture[str]) -> None:
    posted: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(json.loads(request.content))
            return httpx.Response(202, json=model("queued", "queued", 0))
        return httpx.Response(200, json=model("ready"))

    argv = ["register", "--dataset", "2", "--name", "m", "--set", "epochs=5", "--epsilon", "2", "--wait"]
    assert run(argv, answer) == 0
    assert posted == [
        {"name": "m", "dataset_id": 2, "hyperparameters": {"epochs": 5}, "privacy": {"epsilon": 2.0}}
    ]
    assert "model 7 is ready" in capsys.readouterr().out


def test_forget_sends_an_idempotency_key_and_wait_exits_1_when_the_deletion_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sent: list[httpx.Request] = []
    states = iter(
        [
            deletion("queued", ["received", "queued"]),
            deletion("failed", ["received", "queued", "applying", "failed"], "the update diverged"),
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            sent.append(request)
            return httpx.Response(
                202,
                json={"id": 4, "model_id": 7, "state": "queued", "expected_by": "2025-01-01T00:01:00Z"},
            )
        return httpx.Response(200, json=next(states))

    argv = ["forget", "7", "--owner", "u1", "--owner", "u2", "--sample", "s9", "--interval", "0.001"]
    assert run([*argv, "--wait"], answer) == 1
    out, err = capsys.readouterr()
    assert "deletion request 4 on model 7: queued" in out
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("  2025")] == [
        "received",
        "queued",
        "applying",
        "failed",
    ]
    assert "deletion request 4 failed: the update diverged" in err
    assert json.loads(sent[0].content) == {"owner_ids": ["u1", "u2"], "sample_ids": ["s9"]}
    assert uuid.UUID(sent[0].headers["idempotency-key"]).version == 4
    assert run([*argv, "--key", "retry-1"], answer) == 0
    assert sent[1].headers["idempotency-key"] == "retry-1"
    assert "retry-1" in capsys.readouterr().out


def test_deletion_wait_exits_0_once_completed(capsys: pytest.CaptureFixture[str]) -> None:
    states = iter([deletion("applying", ["received", "queued", "applying"])])
    done = deletion("completed", ["received", "queued", "applying", "applied", "completed"])
    assert (
        run(
            ["deletion", "4", "--wait", "--interval", "0.001"],
            lambda r: httpx.Response(200, json=next(states, done)),
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("  2025") == 5  # each state once
    assert "deletion request 4 on model 7: completed" in out and "version 2 (unlearned, certified)" in out


@pytest.fixture
def signed_receipt() -> Iterator[tuple[dict[str, Any], str]]:
    signer = ReceiptSigner(parse_seed(new_seed()))
    receipt = {
        "type": "lethe.deletion-receipt",
        "format": 1,
        "key_id": signer.key_id,
        "request_id": 4,
        "model_id": 7,
        "completed_at": "2025-01-01T00:00:09Z",
        "num_samples": 2,
        "subjects": [{"kind": "owner", "hash": "ab" * 32, "id": "u1"}],
        "version": None,
        "model_deleted": True,
        "audit": None,
    }
    yield (
        {"receipt": receipt, "signature": signer.sign(receipt), "key_id": signer.key_id},
        b64url(signer.public_key),
    )


def test_receipt_verify_exits_1_when_the_signature_does_not_hold(
    signed_receipt: tuple[dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer, public = signed_receipt
    saved = tmp_path / "r.json"

    def api(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/deletions/4/receipt"
        assert request.url.params.get_list("owner_id") == ["u1"]
        return httpx.Response(200, json=answer)

    argv = ["receipt", "4", "--owner", "u1", "--save", str(saved), "--verify", "--offline"]
    assert run([*argv, f"--public-key={public}"], api) == 0
    assert json.loads(saved.read_text()) == answer
    assert "valid: deletion request 4 of model 7" in capsys.readouterr().out

    forged = {**answer, "receipt": {**answer["receipt"], "num_samples": 1}}
    saved.write_text(json.dumps(forged))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError("called the API")

    assert (
        run(["receipt", "--file", str(saved), "--verify", "--offline", f"--public-key={public}"], refuse) == 1
    )
    assert "INVALID: the signature does not match" in capsys.readouterr().out
    saved.write_text("{not json")
    assert (
        run(["receipt", "--file", str(saved), "--verify", "--offline", f"--public-key={public}"], refuse) == 2
    )
    assert (
        run(["receipt", "--file", str(saved), "--verify", "--offline"], refuse) == 2
    )  # no key to check with


# -- end to end -----------------------------------------------------------------------------------

_SCRIPT = Path(sys.executable).parent / "lethe"
LETHE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "lethe_cli"]


def write_table(path: Path, rows: int = 60) -> None:
    rng = random.Random(0)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sample_id", "owner_id", "label", "f1", "f2", "f3"])
        for i in range(rows):
            y = i % 2
            out.writerow(
                [
                    f"s{i}",
                    f"u{i // 2}",
                    y,
                    round(y + rng.random(), 3),
                    round(rng.random(), 3),
                    round(rng.random() - y, 3),
                ]
            )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_whole_flow_against_a_running_service(tmp_path: Path) -> None:
    """upload, register --wait, forget --wait, receipt --verify, audit: the README's "Command line"."""
    write_table(tmp_path / "people.csv")
    service_env = {
        **os.environ,
        "LETHE_MODE": "embedded",
        "LETHE_VAR_DIR": str(tmp_path / "var"),
        "LETHE_DEMO_MODEL": "false",  # the embedded demo trains first otherwise: here only the CLI's model
        "LETHE_DEVICE": "cpu",
    }
    with api_process(service_env, tmp_path / "api.log") as (base, _):
        env = {**os.environ, "LETHE_URL": base}
        env.pop("LETHE_TOKEN", None)

        def lethe(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*LETHE, *argv, "--interval", "0.1"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
            )

        upload = lethe("upload", "people.csv", "--name", "people")
        assert upload.returncode == 0, upload.stderr
        dataset = int(upload.stdout.split()[1])
        assert upload.stdout.strip() == f"dataset {dataset} (people): 60 rows, table, 2 classes"

        register = lethe(
            "register", "--dataset", str(dataset), "--name", "people-lr", "--set", "epochs=3", "--wait"
        )
        assert register.returncode == 0, register.stdout + register.stderr
        model_id = int(register.stdout.split()[1])
        assert f"model {model_id} is ready: version 1, 60 training samples" in register.stdout

        listed = lethe("models", "--json")
        assert listed.returncode == 0, listed.stderr
        (mine,) = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (mine["id"], mine["name"], mine["status"]["state"]) == (model_id, "people-lr", "ready")
        assert mine["hyperparameters"]["epochs"] == 3

        forget = lethe("forget", str(model_id), "--owner", "u7", "--wait")
        assert forget.returncode == 0, forget.stdout + forget.stderr
        request = int(forget.stdout.split()[2])
        assert f"deletion request {request} on model {model_id}: completed" in forget.stdout
        states = [line.split()[1] for line in forget.stdout.splitlines() if line.startswith("  ")]
        assert states[0] == "received" and states[-1] == "completed"

        receipt = lethe("receipt", str(request), "--owner", "u7", "--save", "receipt.json", "--verify")
        assert receipt.returncode == 0, receipt.stdout + receipt.stderr
        assert f"valid: deletion request {request} of model {model_id}" in receipt.stdout
        assert "logged: event" in receipt.stdout and "= u7" in receipt.stdout
        saved = json.loads((tmp_path / "receipt.json").read_text())
        assert saved["receipt"]["subjects"][0]["id"] == "u7"

        audit = lethe("audit", "--save-anchors", "anchors.json")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert f"ok      model {model_id}: 2 versions match" in audit.stdout
        assert "FAILED" not in audit.stdout
        again = lethe("audit", "--model", str(model_id), "--anchors", "anchors.json")
        assert again.returncode == 0, again.stdout + again.stderr
        assert (
            "ok      system" not in again.stdout and f"ok      model:{model_id}:completions" in again.stdout
        )

        # The older entry points stay, as aliases of the same code.
        key = httpx.get(f"{base}/v1/receipts/key").json()["public_key"]
        alias = subprocess.run(
            [
                sys.executable,
                "-m",
                "service.receipts",
                "verify",
                "receipt.json",
                f"--public-key={key}",
                "--url",
                base,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert alias.returncode == 0 and "logged: event" in alias.stdout, alias.stdout + alias.stderr
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "service.audit.check",
                "--url",
                base,
                "--model",
                str(model_id),
                "--no-models",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert check.returncode == 0 and f"ok      model:{model_id}:" in check.stdout, (
            check.stdout + check.stderr
        )

        # Failing paths: an unknown model is the API's refusal (3), a closed port no answer (4).
        unknown = lethe("watch", "999")
        assert unknown.returncode == 3
        assert "404 not_found" in unknown.stderr
        again_forget = lethe("forget", str(model_id), "--owner", "u7")
        assert again_forget.returncode == 3 and "already_forgotten" in again_forget.stderr
    closed = lethe("models")
    assert closed.returncode == 4 and "cannot reach" in closed.stderr


def test_the_package_installs_the_lethe_console_script() -> None:
    (script,) = entry_points(group="console_scripts", name="lethe") or [None]
    if script is None:
        pytest.skip("the package is installed without its scripts: pip install -e .")
    assert script.value == "lethe_cli:main" and script.load() is main
