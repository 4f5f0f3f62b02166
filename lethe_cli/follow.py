"""Polling until something ends: a model's training (a bar of its progress) and a deletion request
(its state transitions)."""

from __future__ import annotations

from typing import Any

from lethe_cli.context import Context
from lethe_cli.output import BAR

MODEL_ENDS = ("ready", "failed", "deleted")
DELETION_ENDS = ("completed", "failed", "canceled")


def watch_model(context: Context, model_id: int) -> dict[str, Any]:
    """Poll ``GET /v1/models/{id}`` until the model is ready, failed or deleted; a bar shows the phase's
    percent and the service's ETA, a line each state or phase. --json: the model at each of those, and
    at the end. Returns the last answer."""
    out = context.out
    seen: tuple[str, str] | None = None
    with out.bar(f"model {model_id}") as bar:
        while True:
            model: dict[str, Any] = context.api.get(f"/v1/models/{model_id}")
            status = model["status"]
            now = (status["state"], status["phase"])
            if now != seen:
                phase = "" if status["phase"] == status["state"] else f" ({status['phase']})"
                out.emit(model, f"model {model_id}: {status['state']}{phase}")
                bar.set_description_str(f"model {model_id} {status['phase']}")
                seen = now
            bar.n = max(0.0, min(100.0, float(status["percent"])))
            eta = status.get("eta_seconds")
            bar.bar_format = BAR + ("" if eta is None else f" ETA {_duration(float(eta))}")
            bar.refresh()
            if status["state"] in MODEL_ENDS:
                return model
            context.pause()


def follow_deletion(context: Context, request_id: int) -> dict[str, Any]:
    """Poll ``GET /v1/deletions/{id}`` until it is completed, failed or canceled; a line per state it
    passes through (its history). --json: the request at each new state. Returns the last answer."""
    shown = 0
    while True:
        request: dict[str, Any] = context.api.get(f"/v1/deletions/{request_id}")
        history = request.get("history") or []
        if len(history) > shown:
            for entry in history[shown:]:
                context.out.say(history_line(entry))
            context.out.emit(request)
            shown = len(history)
        if request["state"] in DELETION_ENDS:
            return request
        context.pause()


def history_line(entry: dict[str, Any]) -> str:
    """``  2025-01-02T03:04:05Z  applied (version 3)``: one state a deletion request went through."""
    detail = f" ({entry['detail']})" if entry.get("detail") else ""
    return f"  {entry['at']}  {entry['state']}{detail}"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
