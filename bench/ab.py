"""A benchmark of this checkout against an earlier commit, side by side in one run.

``python -m bench.ab --base REV [--bench deletion_path|service] [--pairs N] [-- ARGS...]`` checks REV out
in a temporary git worktree, then runs the chosen benchmark (``python -m bench.<name> ARGS``) from the
earlier tree and from this one, alternately, ``--pairs`` times: in the order before-after, after-before,
before-after, ..., so that a machine drifting over the run (on the 2-core development machine its speed
moves by a third within an hour, bench/README.md) weighs on both sides alike. Both trees run with this
checkout's interpreter and environment, and read the same data folder (``LETHE_DATA_DIR``).

Each benchmark prints one JSON object as its last line. For every number in both (nested keys joined
with dots), this prints the median before, the median after, and the median and range of the ratios
after / before of each pair: a ratio below 1 is a time (or CPU) that fell, above 1 a rate that rose.
The last line of stdout is one JSON object with those figures, the commits and the pairs' raw results.

A ratio says only as much as its pairs agree: with ``--bench service``, whose p50 moves by 10% between two
runs of the same commit, a change needs several pairs whose ratios fall on the same side of 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.service import log
from bench.stack import ROOT
from unlearning.data import shared_data_dir

BENCHES = ("deletion_path", "service")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def resolve(rev: str) -> str | None:
    """The commit ``rev`` names, or None when it names none."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        return None


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """``commit`` checked out (detached) in a temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="lethe-ab-") as parent:
        tree = Path(parent) / "tree"
        _git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        try:
            yield tree
        finally:
            _git("worktree", "remove", "--force", str(tree))


def run_bench(tree: Path, bench: str, args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """``python -m bench.<bench> args`` in ``tree``; its last line of stdout, parsed."""
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}", *args],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench.{bench} in {tree} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if not isinstance(result, dict):
        raise TypeError(f"bench.{bench} in {tree} did not end with a JSON object: {lines[-1][:200]}")
    return result


def numbers(result: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a (nested) result, keyed by their dotted path (a list's objects by their index:
    ``sweep.0.p50_ms``); booleans are not numbers here."""
    out: dict[str, float] = {}
    for key, value in result.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numbers(value, f"{path}."))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    out.update(numbers(item, f"{path}.{i}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = float(value)
    return out


def compare(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per number present in every result: the medians before and after, and the pairs' ratios
    after / before (median, lowest, highest). Numbers that are zero before are left out of the ratios."""
    flat_before = [numbers(r) for r in before]
    flat_after = [numbers(r) for r in after]
    keys = set.intersection(*(set(f) for f in flat_before + flat_after)) if flat_before else set()
    out: dict[str, Any] = {}
    for key in sorted(keys):
        b = [f[key] for f in flat_before]
        a = [f[key] for f in flat_after]
        row: dict[str, Any] = {"before": statistics.median(b), "after": statistics.median(a)}
        ratios = [y / x for x, y in zip(b, a) if x != 0]
        if ratios:
            row.update(
                ratio=round(statistics.median(ratios), 3),
                ratio_low=round(min(ratios), 3),
                ratio_high=round(max(ratios), 3),
            )
        out[key] = row
    return out


def text_table(comparison: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [f"{'metric':52} {'before':>10} {'after':>10} {'ratio':>7}  range"]
    for key, row in comparison.items():
        ratio = (
            f"{row['ratio']:7.3f}  {row['ratio_low']:.3f} to {row['ratio_high']:.3f}"
            if "ratio" in row
            else ""
        )
        lines.append(f"{key:52} {row['before']:10.2f} {row['after']:10.2f} {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--bench", choices=BENCHES, default="deletion_path", help="default: deletion_path")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each tree (default 3)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the benchmark's own arguments")
    ns = parser.parse_args(argv)
    if ns.pairs < 1:
        parser.error("--pairs must be at least 1")
    base = resolve(ns.base)
    if base is None:
        parser.error(f"--base {ns.base!r} names no commit of this repository")
    bench_args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    env = {"LETHE_DATA_DIR": str(shared_data_dir())}
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    with worktree(base) as earlier:
        sides = {"before": (earlier, before), "after": (ROOT, after)}
        for pair in range(ns.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for side in order:
                tree, results = sides[side]
                log(f"pair {pair + 1}/{ns.pairs}: bench.{ns.bench} {side}")
                results.append(run_bench(tree, ns.bench, bench_args, env))
    comparison = compare(before, after)
    print(text_table(comparison), file=sys.stderr)
    print(
        json.dumps(
            {
                "bench": ns.bench,
                "args": bench_args,
                "base": base,
                "head": _git("rev-parse", "HEAD"),
                "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
                "pairs": ns.pairs,
                "comparison": comparison,
                "before": before,
                "after": after,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
