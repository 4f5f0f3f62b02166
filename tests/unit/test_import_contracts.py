"""The import contracts of pyproject's ``[tool.importlinter]`` hold (layers between and inside the packages,
the core library free of web, database and queue packages), no module imports one that imports it back, and
the Celery launcher does not import torch."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    """The ``lint-imports`` of the interpreter running the tests (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.is_file() else shutil.which("lint-imports")
    assert found, "lint-imports is not installed: install the dev extras (pip install -e '.[dev]')"
    return found


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [_lint_imports(), "--no-cache"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"


def test_no_module_of_the_project_imports_one_that_imports_it_back() -> None:
    """No import cycle between modules, however long (Tarjan's strongly connected components)."""
    import grimp

    graph = grimp.build_graph("unlearning", "service", "workers", "lethe_cli")
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(imports)))
    for module in sorted(imports):
        if module not in index:
            visit(module)
    assert cycles == [], f"modules that import each other (directly or through others): {cycles}"


def test_the_worker_launcher_does_not_import_torch() -> None:
    """A Celery parent forks its pool: it imports neither torch nor the core library, which the forked
    workers import when they build their runtime (workers.celery_app.runtime)."""
    probe = "import sys, workers.celery_app; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'unlearning')))"
    result = subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout
