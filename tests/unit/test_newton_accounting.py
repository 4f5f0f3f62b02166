"""The typed ledger of the Newton methods (``unlearning.newton.budget.NewtonAccounting``): it reads and writes
``MethodState.accounting`` with exactly the stored JSON keys, keeps keys it does not know, and refuses a
malformed ledger by name. The three methods share one forget sequence."""

from __future__ import annotations

import json

import pytest

from unlearning.data import make_synthetic
from unlearning.errors import InvalidConfigError
from unlearning.methods.graph_classification_newton import GraphAccounting, GraphClassificationNewton
from unlearning.methods.graph_node_newton import GraphNodeNewton, NodeAccounting
from unlearning.methods.newton_tabular import NewtonTabular
from unlearning.methods.protocol import ForgetRequest, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.newton import NewtonAccounting, NewtonConfig, NewtonMethodBase
from unlearning.serialization import json_restore, json_safe

CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-4, release_mode="certified")

LEDGER_KEYS = {
    "method_config", "release_mode", "deleted_count", "train_size", "remaining", "epoch", "retrains", "fit_seed",
    "noise_seed", "noise_std", "cap", "spent", "optimizer_residual", "optimizer_iterations",
    "optimizer_hessian_products", "optimizer_seconds", "op_norm_bound", "op_norm_source", "max_charge_per_item",
    "last_charge", "config",
}


def _tabular_states():
    data = make_synthetic(n=80, num_features=4, num_classes=3, seed=0)
    state, _ = get_method("newton_removal").fit(data, {"alpha": 1.0}, CERTIFIED, seed=0)
    after = get_method("newton_removal").forget(state, ForgetRequest(sample_ids=(data.sample_ids[0],)), 1, CERTIFIED,
                                                remaining=data).state
    return state, after


def test_the_ledger_reads_and_writes_the_stored_keys_unchanged() -> None:
    state, after = _tabular_states()
    for accounting in (state.accounting, after.accounting):
        ledger = NewtonAccounting.from_dict(accounting)
        assert ledger.to_dict() == accounting and list(ledger.to_dict()) == list(accounting)
        # Through the JSON a version is stored as (Postgres JSONB reorders the keys).
        stored = json_restore(json.loads(json.dumps(json_safe(accounting), sort_keys=True)))
        assert NewtonAccounting.from_dict(stored) == ledger
    ledger = NewtonAccounting.from_dict(after.accounting)
    assert set(after.accounting) == LEDGER_KEYS | {"feature_transform", "quality"}
    assert set(ledger.extra) == {"feature_transform", "quality"}  # the table wrapper's keys travel along
    assert isinstance(ledger.config, NewtonConfig) and ledger.deleted_count == 1 and ledger.remaining == 79
    assert ledger.spent == pytest.approx(NewtonAccounting.from_dict(state.accounting).spent + ledger.last_charge)


def test_each_method_declares_its_own_keys() -> None:
    assert NewtonTabular.accounting_type is NewtonAccounting
    assert GraphNodeNewton.accounting_type is NodeAccounting
    assert GraphClassificationNewton.accounting_type is GraphAccounting
    own = {f for f in GraphAccounting.__dataclass_fields__} - set(NewtonAccounting.__dataclass_fields__)
    assert own == {"ids_digest", "embed_seconds", "epoch_seconds"}
    own = {f for f in NodeAccounting.__dataclass_fields__} - set(NewtonAccounting.__dataclass_fields__)
    assert own == {"epoch_seconds", "propagation_seconds"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spent": -1.0}, "spent must be >= 0"),
        ({"cap": 0.0}, "cap must be > 0"),
        ({"remaining": 10**6}, "more than the"),
        ({"deleted_count": True}, "deleted_count is unreadable"),
        ({"epoch": 1.5}, "epoch is unreadable"),
        ({"op_norm_source": "guessed"}, "op_norm_source must be one of"),
        ({"release_mode": "private"}, "release_mode must be one of"),
        ({"op_norm_bound": "big"}, "op_norm_bound is unreadable"),
        ({"config": {"lam": 0.0}}, "lam"),
    ],
)
def test_a_malformed_ledger_is_refused_by_name(change: dict, message: str) -> None:
    state, _ = _tabular_states()
    with pytest.raises(InvalidConfigError, match=message):
        NewtonAccounting.from_dict({**state.accounting, **change})


def test_a_missing_key_is_named() -> None:
    state, _ = _tabular_states()
    broken = {k: v for k, v in state.accounting.items() if k != "noise_seed"}
    with pytest.raises(InvalidConfigError, match="noise_seed"):
        NewtonAccounting.from_dict(broken)


def test_the_three_methods_share_one_forget_sequence() -> None:
    for cls in (NewtonTabular, GraphNodeNewton, GraphClassificationNewton):
        assert cls.forget is NewtonMethodBase.forget
        assert "_removal" in cls.__dict__
