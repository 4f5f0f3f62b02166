"""``python -m bench.tabular --quick`` runs end to end through the service's API (embedded mode: no servers)
and its last line is the JSON of every dataset and method, with a summary that follows from them."""

from __future__ import annotations

import pytest

from bench.tabular import METHODS, judge
from tests.integration.benchrun import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_quick_tabular_bench_scores_every_method_on_every_dataset() -> None:
    figures = run_bench("bench.tabular", "--quick")
    datasets, summary = figures["datasets"], figures["summary"]
    assert {"iris", "wine", "breast_cancer", "gen_c2_n400", "gen_c4_n1500", "gen_c10_n2000"} <= set(datasets)
    for name, data in datasets.items():
        assert data["rows"] <= 3000 and data["features"] >= 4 and data["classes"] >= 2, name
        assert data["train_rows"] + data["test_rows"] == data["rows"]
        # every problem is learnable: the baseline beats guessing the majority class
        assert 0 <= data["acc_majority"] < data["acc_sklearn_lr"] <= 1, name
        assert list(data["methods"]) == list(METHODS)
        for method, entry in data["methods"].items():
            assert {"acc", "acc_majority", "acc_sklearn_lr", "train_s", "flagged", "error"} <= set(entry)
            assert entry["acc_sklearn_lr"] == data["acc_sklearn_lr"]
            assert entry["flagged"] in (True, False, None)
            if entry["acc"] is None:
                assert entry["error"], (name, method)  # a model without an accuracy says why
            else:
                assert 0 <= entry["acc"] <= 1 and entry["train_s"] >= 0 and entry["error"] is None
    # predictions came back through the API for some model (quality itself is the bench's to report)
    assert any(e["acc"] is not None for d in datasets.values() for e in d["methods"].values())
    expected = judge(datasets)
    assert {k: summary[k] for k in expected} == expected
    assert summary["quick"] is True and summary["threads"] >= 1
