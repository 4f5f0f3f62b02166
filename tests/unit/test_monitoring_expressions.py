"""The PromQL of the shipped dashboards and alerts names only metrics the service exports, and the
benchmark's time scaling of the rules changes durations and nothing else (``bench.prometheus_server``)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import REGISTRY

from bench import prometheus_server as prom
from bench.stack import ROOT
from service import metrics  # noqa: F401 -- its metrics register on import


def _exported() -> set[str]:
    """Every sample name the API or a worker can expose: the registered metrics' series, the gauges the
    database collector yields (named in its source), and Prometheus's own ``up``."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    names = {f.name + end for f in REGISTRY.collect() for end in suffixes.get(f.type, ("",))}
    collector = (ROOT / "service" / "monitoring" / "collector.py").read_text()
    return names | set(re.findall(r'"(lethe_[a-z_]+)"', collector)) | {"up"}


def test_every_dashboard_and_alert_expression_names_exported_metrics() -> None:
    exported = _exported()
    expressions = {**prom.dashboard_expressions(), **prom.rule_expressions(prom.alert_rules())}
    assert len(expressions) > 20
    unknown = {where: sorted(prom.metric_names(e) - exported) for where, e in expressions.items()}
    assert not {w: u for w, u in unknown.items() if u}, unknown


def test_the_dashboard_answers_an_operators_questions() -> None:
    names = set().union(*(prom.metric_names(e) for e in prom.dashboard_expressions().values()))
    for question in (
        "lethe_deletions_overdue",  # is anything late
        "lethe_workers_live",  # is a worker down
        "lethe_budget_spent",  # how much budget is left per model
        "lethe_callbacks_total",  # are callbacks failing
        "lethe_http_request_seconds_bucket",  # HTTP p99 by route
        "lethe_training_seconds_bucket",  # training duration
    ):
        assert question in names, question


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (le, route) (rate(lethe_http_request_seconds_bucket{status=~"5.."}[5m]))',
            {"lethe_http_request_seconds_bucket"},
        ),
        ("lethe_budget_spent / (lethe_budget_cap > 0) >= 0.85", {"lethe_budget_spent", "lethe_budget_cap"}),
        ('absent(lethe_workers_live{lane="io"}) or lethe_workers_live == 0', {"lethe_workers_live"}),
        ("x unless y offset 15m", {"x", "y"}),
        ("histogram_quantile(0.99, sum without (instance) (rate(a_bucket[1h])))", {"a_bucket"}),
    ],
)
def test_metric_names_are_the_selected_series(expr: str, names: set[str]) -> None:
    assert prom.metric_names(expr) == names


def test_time_scaling_changes_durations_only() -> None:
    rules = prom.alert_rules()
    scaled = prom.time_scaled_rules(rules, 1 / 60)
    original = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    for group in scaled["groups"]:
        for rule in group["rules"]:
            shipped = original[rule["alert"]]
            assert prom.seconds(rule.get("for", "0s")) == pytest.approx(
                prom.seconds(shipped.get("for", "0s")) / 60
            )
            assert re.sub(r"\d+(ms|s|m|h)", "D", rule["expr"]) == re.sub(
                r"\d+(ms|s|m|h)", "D", shipped["expr"]
            )
            assert rule["labels"] == shipped["labels"] and rule["annotations"] == shipped["annotations"]
    assert (
        prom.scale_expression("rate(x[5m]) unless y offset 15m", 1 / 60) == "rate(x[5s]) unless y offset 15s"
    )
    assert prom.scale_expression("increase(x[1h])", 1 / 7200) == "increase(x[500ms])"
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        prom.seconds("5 minutes")
