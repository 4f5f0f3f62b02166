"""The README's curl walkthroughs, run as printed against ``python -m service`` started the way ``make run``
starts it (embedded mode, the demo model included), so that the README cannot drift from the service.

Only what the README leaves to the reader is supplied: the files it uploads (``people.csv``, ``t.csv``,
``graph.json``, ``PROTEINS.txt``), a feature row for its ``[[0, 0.1, 0.5, ...]]``, the port, and the
wait it describes in words ("it trains in the background"): a command that uses a model (predictions,
weights, deletions, a retrain) first waits until that model is ready. Every command must answer 2xx,
except a cancel, which may find its request already completed (409, as the README says).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.stack import api_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STATUS = "@@status"
WAIT_SECONDS = 180

# A bash prelude: `curl` reports each answer's status on a line of its own, and waits for the model a
# command uses to be ready (the README's model trains in the background, after the demo model).
PRELUDE = r"""
ready() {
  local deadline=$((SECONDS + %(wait)d))
  until command curl -s "%(base)s/v1/models/$1" | grep -q '"state":"ready"'; do
    if ((SECONDS > deadline)); then echo "model $1 never became ready" >&2; exit 3; fi
    sleep 0.2
  done
}
curl() {
  local arg
  for arg in "$@"; do
    if [[ $arg =~ /v1/models/([0-9]+)/(predictions|weights|deletions|retrain) ]]; then ready "${BASH_REMATCH[1]}"; fi
  done
  command curl --max-time 60 -w "\n%(status)s %%{http_code} %%{url_effective}\n" "$@"
}
"""


def readme_sh_blocks() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert len(blocks) >= 2, "the README lost its curl walkthroughs"
    return blocks


def write_inputs(folder: Path) -> None:
    """The files the README's commands upload, in the shapes its text describes."""
    rng = np.random.default_rng(0)
    with (folder / "people.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sample_id", "owner_id", "label", "age", "score"])
        for i in range(40):
            out.writerow(
                [f"p{i}", f"u{i // 2}", i % 2, round(20 + 40 * rng.random(), 1), round(rng.random(), 3)]
            )
    with (folder / "t.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "user", "y", "a", "b"])
        for i in range(30):
            out.writerow([f"r{i}", f"w{i // 3}", i % 3, round(rng.random(), 3), round(rng.random(), 3)])
    n = 12  # a ring n0 - n1 - ... - n11 plus the chord n1 - n7 the README deletes
    nodes = [
        {
            "id": f"n{i}",
            "label": i % 2,
            "split": "train" if i < 8 else "test",
            "owner": f"o{i // 2}",
            "features": [round(float(v), 3) for v in rng.normal(size=4) + (i % 2)],
        }
        for i in range(n)
    ]
    edges = [[f"n{i}", f"n{(i + 1) % n}"] for i in range(n)] + [["n1", "n7"]]
    graph = {
        "format": "lethe.node_graph.v1",
        "name": "ring",
        "num_classes": 2,
        "num_features": 4,
        "nodes": nodes,
        "edges": edges,
    }
    (folder / "graph.json").write_text(json.dumps(graph))
    (folder / "PROTEINS.txt").write_text(tu_collection(rng))


def tu_collection(rng: np.random.Generator, graphs: int = 20) -> str:
    """The TU text format of ``../shared/data``: the graph count; per graph ``nodes label``, then per node
    ``tag degree neighbours...``. Rings of 5-7 nodes; label-1 graphs carry a chord."""
    lines = [str(graphs)]
    for g in range(graphs):
        size, label = int(rng.integers(5, 8)), g % 2
        nbrs = [{(v - 1) % size, (v + 1) % size} for v in range(size)]
        if label:
            nbrs[0].add(size // 2)
            nbrs[size // 2].add(0)
        lines.append(f"{size} {label}")
        lines += [" ".join(map(str, (int(rng.integers(0, 3)), len(n), *sorted(n)))) for n in nbrs]
    return "\n".join(lines) + "\n"


def script(blocks: list[str], base: str) -> str:
    row = json.dumps([[round(v, 2) for v in np.linspace(0, 16, 64)]])  # digits: 64 pixels in [0, 16]
    body = "\n".join(blocks).replace("localhost:8000", base.removeprefix("http://"))
    body = body.replace("[[0, 0.1, 0.5, ...]]", row)
    assert "..." not in re.sub(r"#.*", "", body), "a README command still holds a placeholder"
    return PRELUDE % {"wait": WAIT_SECONDS, "base": base, "status": STATUS} + body


def answers(stdout: str) -> list[tuple[int, str]]:
    return [(int(code), url) for code, url in re.findall(rf"^{STATUS} (\d+) (\S+)$", stdout, re.MULTILINE)]


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's walkthrough needs curl")
def test_readme_walkthrough_runs_as_printed(tmp_path: Path) -> None:
    write_inputs(tmp_path)
    env = {"LETHE_MODE": "embedded", "LETHE_VAR_DIR": str(tmp_path / "var")}
    with api_process(env, tmp_path / "api.log") as (base, _):
        run = subprocess.run(
            ["bash", "-c", script(readme_sh_blocks(), base)],
            check=False,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=2 * WAIT_SECONDS,
        )
        assert run.returncode == 0, run.stderr
        got = answers(run.stdout)
        bad = [
            (code, url)
            for code, url in got
            if not (200 <= code < 300 or (code == 409 and url.endswith("/cancel")))
        ]
        assert not bad, f"README commands that failed: {bad}\n{run.stdout[-3000:]}"
        commands = sum(len(re.findall(r"(?:^|;\s*)curl ", b, re.MULTILINE)) for b in readme_sh_blocks())
        assert len(got) == commands, "a README command did not run"
        with httpx.Client(base_url=base, timeout=30) as http:
            deadline = time.monotonic() + WAIT_SECONDS
            while http.get("/v1/deletions/1").json()["state"] != "completed":
                assert time.monotonic() < deadline, "the README's deletion never completed"
                time.sleep(0.2)
            assert http.get("/v1/audit/verify", params={"model_id": 2}).json()["ok"] is True
            events = http.get("/v1/audit/events", params={"owner_id": "owner-00007"}).json()["events"]
            assert {e["type"] for e in events} >= {
                "deletion.received",
                "deletion.applied",
                "deletion.completed",
            }
