"""Each method's declaration (``hyperparameters()``, ``families()``, ``release_modes()``, what ``GET /v1/methods``
shows) against what its ``check_config`` enforces, so that the two cannot drift apart: every key of
``default_config()`` is declared and nothing else; each declared bound, choice, type and nullability is
probed just inside and just beyond."""

from __future__ import annotations

import math
import re
from typing import Any, get_args

import pytest

from unlearning.errors import InvalidConfigError
from unlearning.methods.hyperparameters import HyperParameter, Kind
from unlearning.methods.protocol import (
    DATASET_KINDS,
    GRAPH_COLLECTION,
    NODE_GRAPH,
    TABLE,
    UnlearningMethod,
    dataset_kind,
)
from unlearning.methods.registry import get_method, method_names
from unlearning.models.families import family_names

# Some keys are checked only alongside another setting: an MLP's widths only for family mlp, a clip norm's
# range only while clipping is on (and its null only while it is off), and clipping needs a clip norm.
# Applied where the method has the key.
CONTEXT: dict[str, dict[str, Any]] = {
    "hidden": {"family": "mlp"},
    "clip_norm": {"clip_mode": "batch"},
    "clip_mode": {"clip_norm": 1.0},
}
NULL_CONTEXT: dict[str, dict[str, Any]] = {"clip_norm": {"clip_mode": "none"}}
WRONG_TYPE: dict[str, Any] = {
    "integer": 2.5,
    "number": "x",
    "string": 1,
    "boolean": 1,
    "integer_list": "x",
    "object": 1,
}


def _declared(name: str) -> list[tuple[str, HyperParameter]]:
    return [(name, p) for p in get_method(name).hyperparameters()]


DECLARED = [pair for name in method_names() for pair in _declared(name)]
IDS = [f"{name}.{p.name}" for name, p in DECLARED]


def _accepts(method: UnlearningMethod, key: str, value: Any, context: dict[str, dict[str, Any]] = CONTEXT) -> bool:
    defaults = method.default_config()
    extra = {k: v for k, v in context.get(key, {}).items() if k in defaults}
    try:
        method.check_config({**defaults, **extra, key: value})
    except InvalidConfigError:
        return False
    return True


def _beyond(p: HyperParameter, bound: float, direction: float) -> float:
    """The nearest value past ``bound`` in ``direction`` (an integer kind's next integer)."""
    if p.kind in ("integer", "integer_list"):
        return bound + direction
    return math.nextafter(bound, direction * math.inf)


def _value(p: HyperParameter, number: float) -> Any:
    return [number] if p.kind == "integer_list" else number


@pytest.mark.parametrize("name", method_names())
def test_every_default_config_key_is_declared_once_and_nothing_else(name: str) -> None:
    method = get_method(name)
    declared = [p.name for p in method.hyperparameters()]
    assert len(declared) == len(set(declared)), f"{name} declares a key twice: {declared}"
    assert set(declared) == set(method.default_config())


@pytest.mark.parametrize(("name", "p"), DECLARED, ids=IDS)
def test_a_declaration_is_well_formed_and_fits_the_current_default(name: str, p: HyperParameter) -> None:
    assert p.kind in get_args(Kind)
    assert p.description.strip() and "\n" not in p.description
    numeric = p.kind in ("integer", "number", "integer_list")
    if not numeric:
        assert p.minimum is None and p.maximum is None
    if p.choices:
        assert p.kind in ("string", "number", "integer")
    if p.max_items is not None:
        assert p.kind == "integer_list"
    default = get_method(name).default_config()[p.name]
    if default is None:
        assert p.nullable, f"{name}.{p.name} defaults to null but is not declared nullable"
        return
    if p.kind == "string":
        assert default in p.choices or not p.choices
    elif p.kind == "boolean":
        assert isinstance(default, bool)
    elif numeric and not (p.kind == "number" and default in p.choices):
        for item in default if p.kind == "integer_list" else [default]:
            assert not isinstance(item, bool) and isinstance(item, int if p.kind != "number" else int | float)
            if p.minimum is not None:
                assert item > p.minimum if p.exclusive_minimum else item >= p.minimum
            if p.maximum is not None:
                assert item < p.maximum if p.exclusive_maximum else item <= p.maximum


@pytest.mark.parametrize(("name", "p"), DECLARED, ids=IDS)
def test_the_declared_bounds_are_the_enforced_ones(name: str, p: HyperParameter) -> None:
    method = get_method(name)
    if p.minimum is not None:
        inside = _beyond(p, p.minimum, +1) if p.exclusive_minimum else p.minimum
        outside = p.minimum if p.exclusive_minimum else _beyond(p, p.minimum, -1)
        assert _accepts(method, p.name, _value(p, inside)), f"{name}.{p.name} refuses {inside}"
        assert not _accepts(method, p.name, _value(p, outside)), f"{name}.{p.name} accepts {outside}"
    if p.maximum is not None:
        inside = _beyond(p, p.maximum, -1) if p.exclusive_maximum else p.maximum
        outside = p.maximum if p.exclusive_maximum else _beyond(p, p.maximum, +1)
        assert _accepts(method, p.name, _value(p, inside)), f"{name}.{p.name} refuses {inside}"
        assert not _accepts(method, p.name, _value(p, outside)), f"{name}.{p.name} accepts {outside}"
    if p.max_items is not None:
        item = 1 if p.minimum is None else p.minimum
        assert _accepts(method, p.name, [item] * p.max_items)
        assert not _accepts(method, p.name, [item] * (p.max_items + 1))


NUMERIC = [(name, p) for name, p in DECLARED if p.kind in ("integer", "number", "integer_list")]
NUMERIC_IDS = [f"{name}.{p.name}" for name, p in NUMERIC]


@pytest.mark.parametrize(("name", "p"), NUMERIC, ids=NUMERIC_IDS)
def test_every_numeric_hyperparameter_is_bounded_on_both_sides(name: str, p: HyperParameter) -> None:
    """No single value may make a training run for days or allocate without bound: every numeric key
    declares a maximum and a minimum, and a value far past the maximum (twice it, or one more for an
    integer) is refused by ``check_config`` with a message naming the key and the bound."""
    assert p.maximum is not None, f"{name}.{p.name} declares no maximum"
    assert p.minimum is not None, f"{name}.{p.name} declares no minimum"
    method = get_method(name)
    far = p.maximum + 1 if p.kind in ("integer", "integer_list") else p.maximum * 2
    defaults = method.default_config()
    context = {k: v for k, v in CONTEXT.get(p.name, {}).items() if k in defaults}
    with pytest.raises(InvalidConfigError, match=p.name) as refused:
        method.check_config({**defaults, **context, p.name: _value(p, far)})
    numbers = _numbers(str(refused.value))
    assert p.maximum in numbers and far in numbers, f"{name}.{p.name}: name the bound and the value: {refused.value}"


def _numbers(message: str) -> set[float]:
    """Every number a message shows (1,000 or 1e+06 or 1e6 style)."""
    return {float(m.replace(",", "")) for m in re.findall(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?", message)}


@pytest.mark.parametrize(("name", "p"), DECLARED, ids=IDS)
def test_the_declared_choices_type_and_nullability_are_the_enforced_ones(name: str, p: HyperParameter) -> None:
    method = get_method(name)
    for choice in p.choices:
        assert _accepts(method, p.name, choice), f"{name}.{p.name} refuses its choice {choice!r}"
    if p.kind == "string" and p.choices:
        assert not _accepts(method, p.name, "not-a-choice")
    assert not _accepts(method, p.name, WRONG_TYPE[p.kind]), f"{name}.{p.name} accepts {WRONG_TYPE[p.kind]!r}"
    if p.nullable:
        assert _accepts(method, p.name, None, {**CONTEXT, **NULL_CONTEXT}), f"{name}.{p.name} refuses null"
    else:
        assert not _accepts(method, p.name, None), f"{name}.{p.name} accepts null but is not declared nullable"


@pytest.mark.parametrize("name", method_names())
def test_the_declared_families_are_the_accepted_ones(name: str) -> None:
    method = get_method(name)
    assert method.families()
    for family in {*method.families(), *family_names()}:
        accepted = _accepts(method, "family", family)
        assert accepted == (family in method.families()), (name, family)


@pytest.mark.parametrize("name", method_names())
def test_release_modes_and_dataset_kind(name: str) -> None:
    method = get_method(name)
    assert method.release_modes() and set(method.release_modes()) <= {"certified", "audited"}
    assert dataset_kind(method) in DATASET_KINDS


def test_the_dataset_kind_is_read_from_the_request_kinds() -> None:
    kinds = {name: dataset_kind(get_method(name)) for name in method_names()}
    assert kinds["graph_node_newton"] == NODE_GRAPH
    assert kinds["graph_classification_newton"] == GRAPH_COLLECTION
    assert kinds["hessian_free"] == kinds["newton_removal"] == TABLE
    assert get_method("mini_unlearning").release_modes() == ("audited",)


def test_a_nullable_declaration_says_what_null_means() -> None:
    with pytest.raises(ValueError, match="null"):
        HyperParameter("x", "number", "a number", nullable=True)
    p = HyperParameter("x", "number", "a number", nullable=True, null_means="derived from the data: the mean")
    assert p.to_dict(None)["default_note"] == "derived from the data: the mean"
    assert p.to_dict(0.5)["default_note"] is None
