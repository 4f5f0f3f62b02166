"""Reproduce the Hessian-free paper's MNIST settings side by side with exact retraining and baselines.

    python -m bench.hessian_free            # R1: logistic regression, n = 1,000, all figures
    python -m bench.hessian_free --quick    # the same keys in under a minute
    python -m bench.hessian_free --model cnn  # R2: the paper's small CNN

With the logistic regression it also measures certified releases by the gradient residual against the
exact minimiser (bench.hf_certified), on R1 and on 8,000 MNIST rows: the JSON's ``certified`` object.

Side by side, the vectors kept in each ``vector_dtype`` (float32, float16, bfloat16): the distance to the
replay retrain of the method's own forget at every rate, its ratio to float32's, and the bytes of the
vectors and of the state in the hot store (written by service.storage.hot on its in-process stand-in):
the JSON's ``vector_dtype`` object.

R1 (digest 002, section 8): n = 1,000 training and 400 test images drawn disjointly (seeded) from the
official MNIST 10k file, 15 epochs, batch 32, eta 0.05, L2 0.5, decay 0.995 per step, batch-gradient
clipping at 5. Deletion sets are seeded random samples at 1, 5, 20 and 30%. Every figure is measured in
this run; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from bench import hf_certified
from bench.baselines.newton_jackknife import InfluenceJackknife, NewtonStep
from unlearning.audit.membership import loss_attack
from unlearning.audit.verification import accuracy, loss_change_correlation, per_sample_losses
from unlearning.data import Dataset, mnist_subsets
from unlearning.device import default_device
from unlearning.errors import UnlearningError
from unlearning.methods.hessian_free import HessianFree, model_spec_for, sgd_config, state_from_record
from unlearning.methods.hessian_free.precision import VECTOR_DTYPES
from unlearning.methods.protocol import ForgetRequest, PrivacyTarget
from unlearning.models import build_model
from unlearning.privacy.gaussian import calibrate_sigma
from unlearning.training import replay_retrain, retrain_from_scratch, train_recorded

RATES = (0.01, 0.05, 0.2, 0.3)
SETTINGS: dict[str, dict[str, Any]] = {
    "lr": {"family": "logistic_regression", "epochs": 15, "batch_size": 32, "lr": 0.05, "lr_decay": 0.995,
           "l2": 0.5, "clip_norm": 5.0, "clip_mode": "batch"},
    "cnn": {"family": "cnn", "epochs": 20, "batch_size": 64, "lr": 0.05, "lr_decay": 0.995,
            "l2": 1e-6, "clip_norm": 10.0, "clip_mode": "batch"},
}
PAPER_TABLE7_ETA005 = {"0.01": 0.027, "0.05": 0.064, "0.2": 0.149, "0.3": 0.210}
AUDITED = PrivacyTarget(1.0, 1e-3, "audited")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _deletion_set(train: Dataset, rate: float, seed: int) -> list[str]:
    m = max(1, round(rate * len(train)))
    rows = np.random.default_rng([seed, int(rate * 1000)]).permutation(len(train))[:m]
    return [train.sample_ids[i] for i in sorted(rows)]


def _unlearn_timing(
    method: HessianFree, make_state: Callable[[], Any], ids: Sequence[str], repeats: int = 7
) -> dict[str, float]:
    """Wall time of Stage III through the method's own forget: one batched request (median of
    ``repeats`` runs on fresh states, since one ~1 ms call is at the mercy of the scheduler), then
    every sample as its own request."""
    batched = []
    for _ in range(repeats):
        request = ForgetRequest(sample_ids=tuple(ids))
        batched.append(_timed(partial(method.forget, make_state(), request, 0, AUDITED))[1])
    state = make_state()
    started = time.perf_counter()
    for sid in ids:
        state = method.forget(state, ForgetRequest(sample_ids=(sid,)), 0, AUDITED).state
    sequential = time.perf_counter() - started
    return {"batched_s": float(np.median(batched)), "sequential_total_s": sequential,
            "per_request_s": sequential / len(ids)}


def _hot_store_bytes(state: Any) -> int:
    """The key, field and value bytes the service writes to Redis for ``state`` (serving entry, vectors,
    owners, per-owner sums), on the in-process stand-in of embedded mode."""
    from service.storage.hot import HotStore, connect

    hot = HotStore(connect(None), "bench")
    snapshot = state.statistics.export()
    hot.set_serving(1, 1, 1, state.model.to_dict(), state.released_weights)
    hot.load_stats(1, 1, snapshot.sample_ids, snapshot.owner_ids, snapshot.vectors)
    total = 0
    for key in hot.client.scan_iter(hot.key(1, "*")):
        total += len(key) + sum(len(f) + len(v) for f, v in hot.client.hgetall(key).items())
    return total


def _vector_dtypes(train: Dataset, spec: Any, record: Any, config: dict[str, Any],
                   deletions: dict[float, list[str]], replays: dict[float, torch.Tensor]) -> dict[str, Any]:
    """Per ``vector_dtype``: distances to the replay retrain of a batched forget at each rate through the
    method (vectors rounded to the dtype, summed in float32; audited, so no noise), their ratio to
    float32's, the distance to float32's forget (the rounding's own effect), and the bytes of the vectors
    and of the state in the hot store, with their ratio."""
    method = HessianFree()
    out: dict[str, Any] = {}
    released: dict[tuple[str, float], torch.Tensor] = {}
    for name in VECTOR_DTYPES:
        kept = {**config, "vector_dtype": name}
        distance, rounding = {}, {}
        for rate, ids in deletions.items():
            forgot = method.forget(state_from_record(train, spec, record, kept), ForgetRequest(sample_ids=tuple(ids)),
                                   0, AUDITED)
            w = released[name, rate] = forgot.state.released_weights.to(replays[rate].device, replays[rate].dtype)
            distance[str(rate)] = float((w - replays[rate]).norm())
            rounding[str(rate)] = float((w - released["float32", rate]).norm())
        state = state_from_record(train, spec, record, kept)
        assert state.statistics is not None
        out[name] = {"distance": distance, "distance_to_float32": rounding,
                     "vector_bytes": int(state.statistics.export().vectors.nbytes),
                     "hot_store_bytes": _hot_store_bytes(state)}
    base = out["float32"]
    for figures in out.values():
        figures["distance_ratio"] = {k: v / base["distance"][k] for k, v in figures["distance"].items()}
        figures["hot_store_ratio"] = figures["hot_store_bytes"] / base["hot_store_bytes"]
    return out


def _baseline(cls: type[NewtonStep | InfluenceJackknife], model: Any, train: Dataset, w: torch.Tensor,
              l2: float, ids: Sequence[str], replay: torch.Tensor) -> dict[str, Any]:
    try:
        base, pre_s = _timed(lambda: cls(l2).precompute(model, train, w.to(torch.float64)))
        w_new, forget_s = _timed(lambda: base.forget(ids))
    except (RuntimeError, MemoryError, UnlearningError) as exc:  # reported, not fatal: e.g. out of memory
        return {"distance": None, "unlearn_s": None, "precompute_s": None, "error": str(exc)}
    return {
        "distance": float((w_new.to(replay.dtype) - replay).norm()),
        "unlearn_s": forget_s,
        "precompute_s": pre_s,
        "solver": base.solver,
    }


def run(model_name: str, quick: bool, seed: int, baselines: bool) -> dict[str, Any]:
    config = dict(SETTINGS[model_name])
    n_train = 1000
    if quick and model_name == "cnn":
        n_train, config["epochs"] = 200, 2
    device = default_device()
    train, test = mnist_subsets(n_train, seed=seed, flatten=model_name == "lr")
    spec = model_spec_for(train, config)
    model = build_model(spec)
    cfg = sgd_config(config)
    method = HessianFree()

    record, precompute_s = _timed(lambda: train_recorded(model, train, cfg, seed, device=device))
    assert record.vectors is not None
    _, train_only_s = _timed(lambda: train_recorded(model, train, cfg, seed, with_vectors=False, device=device))

    def fresh_state() -> Any:
        return state_from_record(train, spec, record, config)

    per_sample_bound = float(fresh_state().accounting["per_sample_bound"])
    results: dict[str, Any] = {"distance": {}, "distance_original": {}, "accuracy_unlearned": {},
                               "accuracy_replay_retrain": {}, "correlation": {}, "mia_auc": {}}
    replays: dict[float, torch.Tensor] = {}
    deletions: dict[float, list[str]] = {}
    retrain_times = []
    for rate in RATES:
        ids = deletions[rate] = _deletion_set(train, rate, seed)
        rows = torch.as_tensor(train.indices_of(ids), device=record.vectors.device)
        replay, replay_s = _timed(partial(replay_retrain, model, train, record, ids))
        retrain_times.append(replay_s)
        replays[rate] = replay
        unlearned = record.weights + record.vectors[rows].sum(0)
        key = str(rate)
        results["distance"][key] = float((unlearned - replay).norm())
        results["distance_original"][key] = float((record.weights - replay).norm())
        results["accuracy_unlearned"][key] = accuracy(model, unlearned, test)
        results["accuracy_replay_retrain"][key] = accuracy(model, replay, test)
        results["correlation"][key] = loss_change_correlation(model, record.weights, unlearned, replay, train, ids)
        results["mia_auc"][key] = {  # the loss attack: forgotten rows (members) against test rows
            name: loss_attack(per_sample_losses(model, w, train, ids), per_sample_losses(model, w, test)).auc
            for name, w in (("original", record.weights), ("unlearned", unlearned), ("replay_retrain", replay))
        }

    precision = _vector_dtypes(train, spec, record, config, deletions, replays)
    app_ids = _deletion_set(train, 0.2, seed)  # the paper's application: 20% deleted one by one
    remaining = train.without(app_ids)
    scratch, retrain_s = _timed(lambda: retrain_from_scratch(model, remaining, cfg, seed + 1, device=device))
    timing = _unlearn_timing(method, fresh_state, app_ids)

    one_pct = _deletion_set(train, 0.01, seed)
    sigma_eps1, cal = calibrate_sigma(per_sample_bound, 1.0, 1e-3)
    certified = PrivacyTarget(1.0, 1e-3, "certified")  # with the paper's Eq. 56 bound (the eq56 option)
    released = method.forget(fresh_state(), ForgetRequest(sample_ids=tuple(one_pct)), seed, certified)
    acc_certified = accuracy(model, released.state.released_weights.to(device), test)

    base: dict[str, Any] = {"ns": {}, "ij": {}}
    if baselines:
        ids30 = _deletion_set(train, 0.3, seed)
        base["ns"] = _baseline(NewtonStep, model, train, record.weights, cfg.l2, ids30, replays[0.3])
        base["ij"] = _baseline(InfluenceJackknife, model, train, record.weights, cfg.l2, ids30, replays[0.3])
    else:
        reason = ("skipped: --quick (the full run has them)" if quick and model_name == "lr" else
                  "skipped: explicit d x d Hessian (pass --baselines to force; hours for the CNN on CPU)")
        base = {k: {"distance": None, "unlearn_s": None, "skipped": reason} for k in ("ns", "ij")}

    unlearn_us = timing["batched_s"] / len(app_ids) * 1e6
    residual: dict[str, Any] = {"skipped": "certified releases cover the convex families only"}
    if model_name == "lr":
        residual = hf_certified.run(config, quick, seed, record)
    return {
        "setting": f"R{'1' if model_name == 'lr' else '2'} ({spec.family}, n={n_train}, d={model.dim})",
        "seed": seed,
        "precompute_s": precompute_s,
        "train_only_s": train_only_s,
        "retrain_s": retrain_s,
        "replay_retrain_s": float(np.mean(retrain_times)),
        "unlearn_us_per_sample": unlearn_us,
        "unlearn_request_us": timing["per_request_s"] * 1e6,
        "unlearn_sequential_total_s": timing["sequential_total_s"],
        "speedup_vs_retrain": retrain_s / timing["per_request_s"],
        "speedup_vs_retrain_paper_definition": retrain_s / timing["sequential_total_s"],
        **{k: results[k] for k in ("distance", "distance_original")},
        "paper_table7_eta005": PAPER_TABLE7_ETA005 if model_name == "lr" else None,
        "acc_unlearned": results["accuracy_unlearned"]["0.2"],
        "acc_retrain": results["accuracy_replay_retrain"]["0.2"],
        "acc_retrain_from_scratch": accuracy(model, scratch.weights, test),
        "acc_original": accuracy(model, record.weights, test),
        "accuracy_by_rate": {"unlearned": results["accuracy_unlearned"],
                             "replay_retrain": results["accuracy_replay_retrain"]},
        "correlation": results["correlation"],
        "mia_auc": results["mia_auc"],
        "rho": record.rho,
        "G": float(fresh_state().accounting["G"]),
        "bound_per_sample": per_sample_bound,
        "sigma_eps1": sigma_eps1,
        "sigma_calibration": cal,
        "acc_certified_eps1": acc_certified,
        "sigma_certified_eps1_after_1pct": released.certificate.sigma,
        "measured_error_per_sample_1pct": results["distance"]["0.01"] / len(one_pct),
        "ns": base["ns"],
        "ij": base["ij"],
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "threads": torch.get_num_threads(),
        "host": platform.processor() or platform.machine(),
        "certified": residual,
        "vector_dtype": precision,
    }


def _print_table(r: dict[str, Any]) -> None:
    print(f"Hessian-free unlearning, {r['setting']}, device {r['device']}")
    print(f"  Stage I+II precompute {r['precompute_s']:.2f} s (training alone {r['train_only_s']:.2f} s); "
          f"retrain from scratch {r['retrain_s']:.3f} s")
    print(f"  unlearning {r['unlearn_us_per_sample']:.2f} us/sample batched, {r['unlearn_request_us']:.0f} us "
          f"per single-sample request; speedup vs retrain {r['speedup_vs_retrain']:.0f}x per request")
    print("  rate   distance  original  paper(T7)  acc_unl  acc_replay  pearson spearman  MIA AUC orig/unl/replay")
    for key in r["distance"]:
        paper = (r["paper_table7_eta005"] or {}).get(key)
        corr, mia = r["correlation"][key], r["mia_auc"][key]
        print(f"  {key:>5}  {r['distance'][key]:.4f}    {r['distance_original'][key]:.4f}    "
              f"{paper if paper is not None else '-':>6}   {r['accuracy_by_rate']['unlearned'][key]:.4f}   "
              f"{r['accuracy_by_rate']['replay_retrain'][key]:.4f}     {corr['pearson']:.3f}   {corr['spearman']:.3f}"
              f"    {mia['original']:.3f}/{mia['unlearned']:.3f}/{mia['replay_retrain']:.3f}")
    print(f"  rho {r['rho']:.5f}, G {r['G']:.3f}: Eq. 56 bound {r['bound_per_sample']:.3g} per deleted sample "
          f"vs measured {r['measured_error_per_sample_1pct']:.3g}; sigma at eps=1 {r['sigma_eps1']:.3g} "
          f"-> certified test accuracy after 1% deletion {r['acc_certified_eps1']:.4f}")
    for name in ("ns", "ij"):
        b = r[name]
        if b.get("distance") is not None:
            print(f"  {name.upper()} at 30%: distance {b['distance']:.4f}, unlearn {b['unlearn_s']:.2f} s, "
                  f"precompute {b['precompute_s']:.2f} s")
        else:
            print(f"  {name.upper()}: {b.get('error') or b.get('skipped')}")
    print("  vector dtype: distance to replay retrain at each rate (ratio to float32; distance to float32's "
          "forget) | hot-store bytes (ratio)")
    for name, p in r["vector_dtype"].items():
        rates = "  ".join(f"{p['distance'][k]:.5f} ({p['distance_ratio'][k]:.4f}; {p['distance_to_float32'][k]:.1e})"
                          for k in p["distance"])
        print(f"  {name:>8}: {rates} | {p['hot_store_bytes']:,} ({p['hot_store_ratio']:.3f})")
    if "r1" in r["certified"]:
        hf_certified.print_table(r["certified"])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="same keys, under a minute on 2 CPU cores (NS and IJ skipped unless --baselines)")
    parser.add_argument("--model", choices=sorted(SETTINGS), default="lr", help="lr = R1, cnn = R2")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-baselines", action="store_true", help="skip NS and IJ (d x d Hessians)")
    parser.add_argument("--baselines", action="store_true",
                        help="run NS and IJ even for the CNN on CPU (an explicit 21,840^2 Hessian: hours)")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    # The CNN's explicit Hessian (d = 21,840, 3.8 GB in float64) takes hours of autograd on a 2-core
    # CPU; run it there only when asked, and by default where CUDA is present.
    cnn_on_cpu = args.model == "cnn" and default_device().type == "cpu"
    baselines = not args.no_baselines and (args.baselines or not (cnn_on_cpu or args.quick))
    result = run(args.model, args.quick, args.seed, baselines=baselines)
    _print_table(result)
    print(json.dumps(result, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o)))


if __name__ == "__main__":
    main()
