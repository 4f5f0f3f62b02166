"""``python -m service.residual_audit MODEL_ID``: the gradient residual of a certified Hessian-free model's
current version as JSON (docs/hessian_free.md); exit 0 within the cap, 1 over it, 2 no such version."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from service.jobs.state import load_state
from service.runtime import Runtime
from service.settings import Settings
from unlearning.methods.hessian_free import audit_residual


def residual_of_current_version(rt: Runtime, model_id: int) -> dict[str, Any]:
    """The residual audit of ``model_id``'s current version (LookupError: no model, version or rows)."""
    with rt.snapshot() as uow:
        model = uow.models.get(model_id)
        if model is None or model.current_version_id is None or model.training is None:
            raise LookupError(f"model {model_id} has no trained version with remaining rows")
        version = uow.models.version(model.current_version_id)
        if version is None:
            raise LookupError(f"model {model_id}'s current version is missing")
        state, _ = load_state(rt.hot, rt.cache, rt.hasher, uow, model, version)
        remaining = rt.cache.dataset(model.training)
    audit = audit_residual(state, remaining)
    return {"model_id": model_id, "version": version.seq, **audit.to_dict()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.residual_audit", description=__doc__)
    parser.add_argument("model_id", type=int)
    args = parser.parse_args(argv)
    rt = Runtime(Settings(), role="worker")
    try:
        result = residual_of_current_version(rt, args.model_id)
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        rt.engine.dispose()
    print(json.dumps(result, sort_keys=True))
    return 0 if result.get("within_cap") else 1


if __name__ == "__main__":
    sys.exit(main())
