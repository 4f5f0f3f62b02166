"""Where each table method is practical: ``python -m bench.practical`` prints docs/service.md's tables.

For a covertype-like table (54 features, 7 classes) and an MNIST-like one (784, 10), at 1,000 to 1,000,000
rows, each table method's estimated single-core fit time and hot-store size (the registration's view:
default hyperparameters, one owner per row) and the default limits a registration would be refused for.
``tests/unit/test_practical_table.py`` fails when the copy in the docs is stale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.job_limits import JobLimits
from unlearning.methods.job_estimate import DataShape

PRACTICAL_SHAPES = ((54, 7), (784, 10))  # features, classes: a covertype-like table and an MNIST-like one
PRACTICAL_ROWS = (1_000, 10_000, 100_000, 1_000_000)
PRACTICAL_METHODS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("hessian_free", {}),
    ("hessian_free", {"vector_dtype": "float16"}),
    ("mini_unlearning", {}),
    ("langevin", {}),
    ("newton_removal", {}),
)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} d"


def _size(nbytes: float) -> str:
    if nbytes < 2**20:
        return f"{nbytes / 2**10:,.0f} KiB"
    if nbytes < 10 * 2**30:
        return f"{nbytes / 2**20:,.0f} MiB"
    return f"{nbytes / 2**30:,.0f} GiB"


def practical_table(
    limits: JobLimits | None = None,
    shapes: Sequence[tuple[int, int]] = PRACTICAL_SHAPES,
    rows: Sequence[int] = PRACTICAL_ROWS,
) -> str:
    """Markdown tables, one per (features, classes) shape: for each row count and table method (default
    hyperparameters, the registration's view: one owner per row), the estimated single-core fit time and
    hot-store size, and the limits of ``limits`` (the defaults) a registration would be refused for."""
    from unlearning.methods.registry import get_method

    limits = limits or JobLimits.defaults()
    names = [
        name + (f" ({config['vector_dtype']} vectors)" if config else "")
        for name, config in PRACTICAL_METHODS
    ]
    out: list[str] = []
    for features, classes in shapes:
        out += [
            f"{features} features, {classes} classes:",
            "",
            "| rows | " + " | ".join(names) + " |",
            "|---" * (len(names) + 1) + "|",
        ]
        for n in rows:
            cells = []
            for name, config in PRACTICAL_METHODS:
                estimate = get_method(name).estimate_job(config, DataShape(n, features, classes))
                cell = f"{_duration(estimate.seconds)}, {_size(estimate.hot_store_bytes)}"
                over = limits.exceeded(estimate)
                cells.append(f"refused ({', '.join(over)}): {cell}" if over else cell)
            out.append(f"| {n:,} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(practical_table(), end="")
