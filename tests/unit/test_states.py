"""service.states: the one vocabulary of model and request states, callback states and version kinds.

The API documents exactly the enums' values, the columns hold them as the same plain strings as before,
and no module of the service spells a state as a string literal of its own (in code or in SQL text).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from service.db import jsoncodec
from service.db.postgres import array_literal
from service.db.tables import DeletionRequest, Model, ModelVersion, RequestEvent
from service.openapi import schema
from service.states import CallbackState, ModelState, RequestState, VersionKind

ROOT = Path(__file__).resolve().parents[2]
ENUMS: tuple[type[StrEnum], ...] = (ModelState, RequestState, CallbackState, VersionKind)


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


# -- the API documents the enums ------------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return schema()


def _enums_in(node: Any) -> list[list[Any]]:
    """Every ``enum`` list anywhere in a JSON schema document."""
    found: list[list[Any]] = []
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            found.append(node["enum"])
        for value in node.values():
            found += _enums_in(value)
    elif isinstance(node, list):
        for value in node:
            found += _enums_in(value)
    return found


def test_each_enum_is_one_schema_component_with_its_values(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    for enum in ENUMS:
        assert components[enum.__name__]["enum"] == _values(enum), enum.__name__
        assert components[enum.__name__]["type"] == "string"


def test_every_state_enum_of_the_api_is_one_of_the_enums(openapi: dict[str, Any]) -> None:
    """No schema lists states of its own (an inline ``Literal`` of some of them, say): any enum that
    names a model or request state, a callback state or a version kind is exactly one of the enums."""
    vocabulary = {value for enum in ENUMS for value in _values(enum)}
    allowed = [_values(enum) for enum in ENUMS]
    for values in _enums_in(openapi):
        if vocabulary & set(values):
            assert values in allowed, values


@pytest.mark.parametrize(
    ("component", "field", "enum"),
    [
        ("StatusOut", "state", ModelState),
        ("VersionOut", "kind", VersionKind),
        ("DeletionAccepted", "state", RequestState),
        ("DeletionOut", "state", RequestState),
        ("HistoryEntry", "state", RequestState),
        ("VersionRef", "kind", VersionKind),
        ("CallbackOut", "state", CallbackState),
    ],
)
def test_the_state_fields_are_the_enums(
    openapi: dict[str, Any], component: str, field: str, enum: type[StrEnum]
) -> None:
    prop = openapi["components"]["schemas"][component]["properties"][field]
    refs = [prop.get("$ref")] + [option.get("$ref") for option in prop.get("anyOf", [])]
    assert f"#/components/schemas/{enum.__name__}" in refs, prop


def test_the_state_filter_of_the_deletion_list_is_the_request_state(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/models/{model_id}/deletions"]["get"]
    (param,) = [p for p in operation["parameters"] if p["name"] == "state"]
    refs = [option.get("$ref") for option in param["schema"]["anyOf"]]
    assert "#/components/schemas/RequestState" in refs


# -- the columns hold the same strings -----------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "enum"),
    [
        (Model.__table__.c.status, ModelState),
        (Model.__table__.c.phase, ModelState),  # a phase is also set to the state it mirrors
        (ModelVersion.__table__.c.kind, VersionKind),
        (DeletionRequest.__table__.c.state, RequestState),
        (DeletionRequest.__table__.c.callback_state, CallbackState),
        (RequestEvent.__table__.c.state, RequestState),
    ],
)
def test_every_value_fits_its_column(column: Any, enum: type[StrEnum]) -> None:
    assert max(len(value) for value in _values(enum)) <= column.type.length, column


def test_a_member_is_written_as_its_value() -> None:
    """What reaches Postgres, JSON columns, audit payloads and callbacks is the plain value."""
    member = RequestState.AWAITING_RETRAIN
    assert member == "awaiting_retrain" and f"{member}" == "awaiting_retrain" and str(member) == member.value
    assert json.dumps({"state": member}) == '{"state": "awaiting_retrain"}'
    assert jsoncodec.dumps_text({"state": member}) == jsoncodec.dumps_text({"state": "awaiting_retrain"})
    assert array_literal([member, ModelState.READY]) == '{"awaiting_retrain","ready"}'
    assert {"ready": 1}[ModelState.READY] == 1  # a row's plain string and the member hash alike


def test_values_are_unique_lowercase_words() -> None:
    for enum in ENUMS:
        for member in enum:
            assert re.fullmatch(r"[a-z_]+", member.value) and member.name == member.value.upper(), member


# -- no state literal left in the service's code ---------------------------------------------------

# Request and model states, callback states and version kinds; a string constant equal to one of these
# (or SQL text quoting one, 'queued') is a state spelled by hand, unless it is one of the uses below.
STATES = sorted({value for enum in ENUMS for value in _values(enum)})
SQL_LITERAL = re.compile(r"'(" + "|".join(STATES) + r")'")

# The same words used for something else than a state; each at most as many times as given, per file.
OTHER_USES: dict[tuple[str, str], int] = {
    # the name of the models.training column (its bucket manifest), not the state
    ("service/jobs/round_repository.py", "training"): 3,
    # the training job's name in metrics, and the outcomes of lethe_trainings_total made at 0 on import
    ("service/metrics.py", "initial"): 2,
    ("service/metrics.py", "failed"): 1,
    ("service/metrics.py", "canceled"): 1,
    # the name of a node graph's array of deleted nodes
    ("service/graphs/storage.py", "deleted"): 1,
}


def _docstrings(tree: ast.AST) -> set[ast.AST]:
    """The string constants that are docstrings: any string standing alone as a statement (a module's,
    class's or function's docstring, or an attribute's)."""
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _metric_labels(tree: ast.AST) -> set[ast.AST]:
    """The arguments of ``<metric>.labels(...)``: Prometheus label values
    (``"failed"``: a job's outcome), a vocabulary of the metrics."""
    return {
        arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "labels"
        for arg in node.args
    }


def state_literals(source: str) -> list[tuple[int, str]]:
    """(line, state) of each state spelled as a literal in ``source``'s code (docstrings, comments and
    metric labels aside): a string constant equal to a state, or one quoting it as SQL does."""
    tree = ast.parse(source)
    skipped = _docstrings(tree) | _metric_labels(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or node in skipped:
            continue
        if node.value in STATES:
            found.append((node.lineno, node.value))
        found += [(node.lineno, f"'{m}'") for m in SQL_LITERAL.findall(node.value)]
    return sorted(found)


def _modules() -> list[Path]:
    return sorted(p for top in ("service", "workers") for p in (ROOT / top).rglob("*.py"))


def test_the_scan_finds_states_in_code_and_sql_and_skips_docstrings_and_comments() -> None:
    """Control: the check below would see a state written by hand."""
    source = '''
"""Module docstring: a request is ``queued``, then "applied"."""
def f(model, request, conn, metrics):
    """Docstring: "ready"."""
    # a comment: "failed"
    metrics.TRAININGS.labels("initial", "failed").inc()
    if model.status == "ready":
        request.state = 'canceled'
    conn.execute("UPDATE deletion_requests SET state = 'completed' WHERE id = %s")
    conn.execute(f"SELECT 1 WHERE state = '{x}' AND callback_state = 'pending'")
    return "deletion.received", "queued_at"
'''
    assert state_literals(source) == [(7, "ready"), (8, "canceled"), (9, "'completed'"), (10, "'pending'")]


def test_no_module_of_the_service_spells_a_state() -> None:
    found: dict[str, list[tuple[int, str]]] = {}
    counts: Counter[tuple[str, str]] = Counter()
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        if name == "service/states.py":
            continue  # the definitions
        for line, value in state_literals(path.read_text()):
            counts[(name, value)] += 1
            if counts[(name, value)] > OTHER_USES.get((name, value), 0):
                found.setdefault(name, []).append((line, value))
    assert not found, (
        "states written as string literals (use service.states' enums; in SQL text, interpolate the "
        f"member's value into the statement built at import): {found}"
    )
