"""A real Prometheus (Debian's ``prometheus`` binary) scraping a deployment with the shipped monitoring files.

- :func:`time_scaled_rules`: ``ops/alerts.yml`` with every duration (``for:``, range selectors, ``offset``)
  multiplied by a factor, so that a benchmark sees an alert of ``for: 1m`` over ``[15m]`` fire and clear in
  seconds; the expressions are otherwise the shipped ones;
- :func:`scrape_config`: ``ops/prometheus.yml`` with its targets pointed at the deployment (the API's port,
  ``workers.json`` with the workers' metrics ports and the shipped target labels) and no Alertmanager;
- :func:`dashboard_expressions` and :func:`rule_expressions`: every PromQL expression an operator's
  dashboard and alerts evaluate; :func:`metric_names`: the metric names one refers to;
- :class:`Prometheus`: the server on a free port with its data in a temporary directory; instant queries
  and the alerts it holds now.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import stack

OPS = stack.ROOT / "ops"
DASHBOARDS = OPS / "grafana" / "dashboards"
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# A range selector or offset (`[15m]`, `offset 15m`); the durations inside are scaled.
_RANGE = re.compile(r"\[(\d+(?:ms|s|m|h|d))\]|offset (\d+(?:ms|s|m|h|d))")
# An identifier that is not part of a longer one and not a function call.
_IDENT = re.compile(r"(?<![\w:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
}


def prometheus_binary() -> str | None:
    """``prometheus`` from PATH, else the one ``make install`` unpacks beside this interpreter."""
    beside = Path(sys.executable).parent / "prometheus"
    return shutil.which("prometheus") or (str(beside) if beside.exists() else None)


def seconds(duration: str) -> float:
    """A Prometheus duration (``1m``, ``1h30m``, ``0s``) in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def _duration(value: float) -> str:
    """``value`` seconds as a Prometheus duration of whole milliseconds (at least 1 ms unless 0)."""
    ms = round(value * 1000)
    return "0s" if ms == 0 else f"{max(ms, 1)}ms" if ms % 1000 else f"{ms // 1000}s"


def scale_expression(expr: str, factor: float) -> str:
    """``expr`` with the duration of every range selector and ``offset`` multiplied by ``factor``."""

    def scaled(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return f"[{_duration(seconds(match.group(1)) * factor)}]"
        return f"offset {_duration(seconds(match.group(2)) * factor)}"

    return _RANGE.sub(scaled, expr)


def time_scaled_rules(rules: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of a rule file's content with every alert's ``for:`` and its expression's durations times
    ``factor`` (1 leaves them as shipped)."""
    out = json.loads(json.dumps(rules))
    for group in out["groups"]:
        for rule in group["rules"]:
            rule["expr"] = scale_expression(rule["expr"], factor)
            if "for" in rule:
                rule["for"] = _duration(seconds(rule["for"]) * factor)
    return out


def alert_rules(path: Path = OPS / "alerts.yml") -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def rule_expressions(rules: dict[str, Any]) -> dict[str, str]:
    """Alert name -> its expression."""
    return {r["alert"]: r["expr"].strip() for g in rules["groups"] for r in g["rules"] if "alert" in r}


def dashboard_expressions(folder: Path = DASHBOARDS) -> dict[str, str]:
    """``<dashboard file>: <panel title> #<target>`` -> expression, for every target of every panel (rows'
    nested panels included) of every dashboard in ``folder``."""
    out: dict[str, str] = {}

    def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for item in items for p in [item, *panels(item.get("panels", []))]]

    for path in sorted(folder.glob("*.json")):
        for panel in panels(json.loads(path.read_text()).get("panels", [])):
            for i, target in enumerate(panel.get("targets", [])):
                if target.get("expr"):
                    out[f"{path.name}: {panel.get('title', '?')} #{i}"] = target["expr"]
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: its identifiers once strings, label matchers, ranges and grouping
    clauses are taken out, less function names and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    return {n for n in _IDENT.findall(text) if n.lower() not in _KEYWORDS | {"inf", "nan"}}


def scrape_config(api: str, workers: list[int], folder: Path, interval_s: float) -> Path:
    """Write ``prometheus.yml``, ``workers.json`` (127.0.0.1:<port> for each worker port, with the
    shipped targets' labels in order) beside it and return the config's path. The rules file is expected
    in ``folder`` as ``alerts.yml``. Raises KeyError when the shipped config lacks the two jobs."""
    config = yaml.safe_load((OPS / "prometheus.yml").read_text())
    config["global"].update(scrape_interval=_duration(interval_s), evaluation_interval=_duration(interval_s))
    config.pop("alerting", None)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["lethe-api"]["static_configs"] = [{"targets": [api]}]
    jobs["lethe-worker"]["file_sd_configs"] = [{"files": [str(folder / "workers.json")]}]
    shipped = json.loads((OPS / "workers.json").read_text())
    targets = [
        {"targets": [f"127.0.0.1:{port}"], "labels": shipped[i]["labels"] if i < len(shipped) else {}}
        for i, port in enumerate(workers)
    ]
    (folder / "workers.json").write_text(json.dumps(targets))
    config["rule_files"] = [str(folder / "alerts.yml")]
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(frozen=True)
class Evaluation:
    """One instant query: its series count, or the error Prometheus gave."""

    series: int
    error: str | None = None


class Prometheus:
    """``prometheus`` with ``config`` on a free port of 127.0.0.1, its TSDB under ``folder``."""

    def __init__(self, binary: str, config: Path, folder: Path) -> None:
        self.port = stack.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = folder / "prometheus.log"
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self._log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.base, timeout=10)
        deadline = time.monotonic() + 60
        while not stack.answers(f"{self.base}/-/ready")():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start:\n{self._log.read_text()[-3000:]}")
            time.sleep(0.2)

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> Evaluation:
        """Evaluate ``expr`` at every ``step`` seconds from ``start`` to ``end`` (wall times), as a
        dashboard's graph does: the series that have a value at any of those instants."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        r = self.http.get("/api/v1/query_range", params=params)
        body = r.json()
        if body.get("status") != "success":
            return Evaluation(0, str(body.get("error", r.text))[:300])
        result = body["data"]["result"]
        return Evaluation(len(result) if isinstance(result, list) else 1)

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """Alert name -> the label sets of its alerts firing now."""
        out: dict[str, list[dict[str, str]]] = {}
        for a in self.http.get("/api/v1/alerts").json()["data"]["alerts"]:
            if a["state"] == "firing":
                out.setdefault(a["labels"]["alertname"], []).append(a["labels"])
        return out

    def targets_up(self) -> dict[str, bool]:
        """scrape URL -> whether its last scrape succeeded."""
        active = self.http.get("/api/v1/targets").json()["data"]["activeTargets"]
        return {t["scrapeUrl"]: t["health"] == "up" for t in active}

    def stop(self) -> None:
        self.http.close()
        stack.stop(self.proc)
