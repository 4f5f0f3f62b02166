"""``lethe register``, ``lethe watch`` and ``lethe models``."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from lethe_cli.commands import Commands, add_command
from lethe_cli.context import Context
from lethe_cli.errors import CHECK_FAILED, OK
from lethe_cli.follow import watch_model


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    new = add_command(
        commands,
        common,
        "register",
        "register a model on a dataset (it trains in the background)",
        "Register a model (POST /v1/models); prints its id. --wait: watch it train, as `lethe watch`.",
    )
    new.add_argument("--dataset", type=int, required=True, metavar="ID", help="the dataset to train on")
    new.add_argument("--name", help="the model's name (default: model-of-dataset-ID)")
    new.add_argument("--method", help="the unlearning method (GET /v1/methods; default hessian_free)")
    new.add_argument("--family", choices=("logistic_regression", "mlp", "cnn"), help="the model family")
    new.add_argument(
        "--set",
        dest="hyperparameters",
        action="append",
        type=hyperparameter,
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter (repeatable); VALUE is read as JSON when it parses (epochs=5, "
        "hidden=[64,32]), else as a string",
    )
    new.add_argument("--release-mode", choices=("audited", "certified"), help="(default audited)")
    new.add_argument("--epsilon", type=float, help="the privacy budget's epsilon (default 1)")
    new.add_argument("--delta", type=float, help="the privacy budget's delta (default 0.001)")
    new.add_argument("--seed", type=int, help="the training seed (default 0)")
    new.add_argument("--wait", action="store_true", help="watch it train; exit 1 if it fails")
    new.set_defaults(run=register_model)

    watch = add_command(
        commands,
        common,
        "watch",
        "follow a model's training until it is ready or failed",
        "A bar of the training's progress (phase, percent, ETA) until the model is ready (exit 0) or "
        "failed (exit 1, its error printed).",
    )
    watch.add_argument("model_id", type=int, metavar="MODEL_ID")
    watch.set_defaults(run=watch_command)

    show = add_command(commands, common, "models", "list the models, or show one")
    show.add_argument("model_id", type=int, nargs="?", metavar="MODEL_ID", help="show this model only")
    show.set_defaults(run=models_command)


def hyperparameter(text: str) -> tuple[str, Any]:
    """``key=value``, the value as JSON when it parses (``5``, ``0.1``, ``true``, ``[64, 32]``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def model_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST /v1/models`` body of the options given (the service's defaults for the others)."""
    body: dict[str, Any] = {
        "name": args.name or f"model-of-dataset-{args.dataset}",
        "dataset_id": args.dataset,
        "hyperparameters": dict(args.hyperparameters),
    }
    for option in ("method", "family", "release_mode", "seed"):
        if getattr(args, option) is not None:
            body[option] = getattr(args, option)
    privacy = {k: getattr(args, k) for k in ("epsilon", "delta") if getattr(args, k) is not None}
    if privacy:
        body["privacy"] = privacy
    return body


def register_model(context: Context, args: argparse.Namespace) -> int:
    model = context.api.post("/v1/models", json=model_body(args))
    context.out.emit(
        model,
        f"model {model['id']} ({model['name']}): {model['method']} / {model['family']} on dataset "
        f"{model['dataset_id']}, {model['status']['state']}",
    )
    return finish(context, model["id"]) if args.wait else OK


def watch_command(context: Context, args: argparse.Namespace) -> int:
    return finish(context, args.model_id)


def finish(context: Context, model_id: int) -> int:
    """Watch the model; 0 when it ends ready, 1 (its error printed) when it failed or was deleted."""
    model = watch_model(context, model_id)
    status = model["status"]
    if status["state"] == "ready":
        context.out.say(
            f"model {model_id} is ready: version {model['current_version']}, "
            f"{model['train_size']} training samples"
        )
        return OK
    context.out.error(f"model {model_id} {status['state']}: {status.get('error') or 'no error given'}")
    return CHECK_FAILED


def models_command(context: Context, args: argparse.Namespace) -> int:
    if args.model_id is not None:
        model = context.api.get(f"/v1/models/{args.model_id}")
        context.out.emit(model, *details(model))
        return OK
    rows = []
    after: int | None = None
    while True:
        page = context.api.get("/v1/models", limit=500, **({"after_id": after} if after else {}))
        for model in page["models"]:
            context.out.emit(model)
            rows.append(model)
        after = page.get("next_after_id")
        if not after:
            break
    if not context.out.json:
        for line in table(rows):
            context.out.say(line)
    return OK


def table(models: list[dict[str, Any]]) -> list[str]:
    """One line per model under a header, in aligned columns."""
    if not models:
        return ["no models"]
    cells = [("ID", "STATE", "VERSION", "METHOD", "FAMILY", "DATASET", "NAME")] + [
        (
            str(m["id"]),
            m["status"]["state"],
            "-" if m["current_version"] is None else str(m["current_version"]),
            m["method"],
            m["family"],
            str(m["dataset_id"]),
            m["name"],
        )
        for m in models
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def details(model: dict[str, Any]) -> list[str]:
    status = model["status"]
    lines = [
        (
            f"model {model['id']} ({model['name']}): {status['state']}, phase {status['phase']} "
            f"{status['percent']:.0f}%"
        ),
        (
            f"  {model['method']} / {model['family']} on dataset {model['dataset_id']}, {model['train_size']} "
            f"training samples"
        ),
        (
            f"  release mode {model['release_mode']}, epsilon {model['privacy']['epsilon']}, delta "
            f"{model['privacy']['delta']}, budget epoch {model['budget_epoch']}"
        ),
        f"  served version {'-' if model['current_version'] is None else model['current_version']}",
    ]
    settings = " ".join(
        f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(model["hyperparameters"].items())
    )
    lines += textwrap.wrap(
        settings, 100, initial_indent="  hyperparameters: ", subsequent_indent="    ", break_long_words=False
    )
    if status.get("error"):
        lines.append(f"  error: {status['error']}")
    return lines
