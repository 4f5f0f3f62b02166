"""Log context and formats (service.logs): the X-Request-ID kept only when it is a plain token, the
context on every line logged inside it, JSON lines with it."""

from __future__ import annotations

import json
import logging

from service import logs


def test_a_plain_request_id_is_kept_and_anything_else_replaced() -> None:
    assert logs.request_id_from("req-42.a_b:c@d/e+f=") == "req-42.a_b:c@d/e+f="
    for bad in (None, "", "a b", "x" * 129, "line\nbreak", "é"):
        made = logs.request_id_from(bad)
        assert made != bad and len(made) == 32 and int(made, 16) >= 0


def _record(message: str) -> logging.LogRecord:
    record = logging.LogRecord("lethe.test", logging.WARNING, __file__, 1, message, None, None)
    logs.ContextFilter().filter(record)
    return record


def _context(message: str) -> str:
    return str(_record(message).__dict__["context"])


def test_the_context_applies_inside_and_nests() -> None:
    assert _context("outside") == ""
    with logs.log_context(x_request_id="r1", job=None):
        assert logs.current_request_id() == "r1"
        with logs.log_context(job="retrain_model", model_id=7):
            assert _context("inside") == " [x_request_id=r1 job=retrain_model model_id=7]"
        assert _context("back") == " [x_request_id=r1]"
    assert logs.current_request_id() is None


def test_json_lines_carry_the_context_and_the_exception() -> None:
    with logs.log_context(x_request_id="r2", model_id=3):
        record = _record("model %s failed")
    record.args = (3,)
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["message"] == "model 3 failed" and line["level"] == "warning"
    assert line["x_request_id"] == "r2" and line["model_id"] == 3
    assert "ValueError: boom" in line["exception"]


def test_another_librarys_text_format_is_kept_with_the_context_appended() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    logs.install_beside(handler, "text")
    logs.install_beside(handler, "text")  # met again through another logger: installed once
    assert len(handler.filters) == 1
    with logs.log_context(job="apply_deletions"):
        record = logging.LogRecord("celery", logging.INFO, __file__, 1, "Task received", None, None)
        handler.filter(record)
        assert handler.format(record) == "[INFO] Task received [job=apply_deletions]"
