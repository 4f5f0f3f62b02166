"""The options of ``python -m bench.service`` that are checked before anything starts."""

from __future__ import annotations

import argparse

import pytest

from bench.service import main, parse_rates


def test_sweep_rates_are_comma_separated_and_positive() -> None:
    assert parse_rates("10,20.5, 100") == [10.0, 20.5, 100.0]
    for bad in ("", "ten", "10,0", "-5"):
        with pytest.raises(argparse.ArgumentTypeError, match="such as 10,20,50"):
            parse_rates(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["--sweep", "10,x"],  # not a rate
        ["--quick", "--sweep", "10,20", "--sweep-requests", "300"],  # 20 + 150 + 300 + 600 > 950
        ["--quick", "--sweep", "10", "--sweep-requests", "0"],
    ],
)
def test_a_sweep_that_is_malformed_or_over_r1s_budget_is_refused_before_anything_runs(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "--sweep" in capsys.readouterr().err
