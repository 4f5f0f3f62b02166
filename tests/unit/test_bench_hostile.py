"""The pure parts of ``python -m bench.hostile``: its forged inputs are what they claim to be, and its
verdict counts what it says it counts."""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from bench.hostile_inputs import (
    Targets,
    forged_npz,
    gzip_csv_bomb,
    owner_id,
    subject_ids,
    task_spans,
    train_task_end,
    verdict,
    victim_csv,
)
from bench.hostile_victim import Load, Outcome, Post, victim_figures
from bench.plain_ids import blob_hits, file_hits
from bench.service import percentile

HEADER, ROW = b"sample_id,owner_id,f0,label\n", b"b.s,b.o,0,0\n"


def test_the_forged_npz_claims_a_billion_rows_of_a_thousand_floats_in_a_few_kilobytes() -> None:
    data = forged_npz((10**9, 1000))
    assert len(data) < 16_000
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["features.npy", "labels.npy"]
        member = io.BytesIO(archive.read("features.npy"))
        labels = np.lib.format.read_array(io.BytesIO(archive.read("labels.npy")), allow_pickle=False)
    assert np.lib.format.read_magic(member) == (1, 0)
    shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(member)
    assert shape == (10**9, 1000) and not fortran_order and dtype == np.dtype("<f4")
    assert len(member.read()) < 10_000  # what follows the header: a few KB, not 4 TB
    assert labels.shape == (8,)


def _inflate(chunks: list[bytes]) -> tuple[int, bytes, bytes]:
    """Decompressed size, first 64 bytes and last 64 bytes of a gzip stream; zlib checks its CRC-32 and
    length trailer (a wrong one raises zlib.error)."""
    inflater = zlib.decompressobj(wbits=31)
    size, head, tail = 0, b"", b""
    for chunk in chunks:
        out = inflater.decompress(chunk)
        size += len(out)
        head = (head + out)[:64] if len(head) < 64 else head
        tail = (tail + out)[-64:]
    out = inflater.flush()
    size, tail = size + len(out), (tail + out)[-64:]
    assert inflater.eof and not inflater.unused_data
    return size, head, tail


@pytest.mark.parametrize("size", [64 * 2**20 + 5, 3 * 2**20, 2**20 + len(HEADER)])
def test_the_gzip_bomb_decompresses_to_exactly_the_size_asked_while_being_small(size: int) -> None:
    chunks = list(gzip_csv_bomb(size, HEADER, ROW))
    assert sum(map(len, chunks)) < size / 300
    decompressed, head, tail = _inflate(chunks)
    assert decompressed == size
    assert head.startswith(HEADER + ROW)
    content_tail = ((HEADER + ROW * (size // len(ROW) + 1))[:size])[-64:]
    assert tail == content_tail


def test_a_small_gzip_bomb_is_the_header_and_rows_cut_at_the_size() -> None:
    for size in (len(HEADER), 100, 4096):
        data = b"".join(gzip_csv_bomb(size, HEADER, ROW))
        assert gzip.decompress(data) == (HEADER + ROW * 400)[:size]
    with pytest.raises(ValueError):
        list(gzip_csv_bomb(3, HEADER, ROW))


def test_victim_ids_never_contain_one_another() -> None:
    ids = [owner_id(k) for k in (1, 10, 100, 1000)] + subject_ids(1, 2)[1:] + subject_ids(10, 2)[1:]
    assert not [(a, b) for a in ids for b in ids if a != b and a in b]
    table = victim_csv(5, per_owner=2).decode()
    assert table.count(owner_id(4)) == 2 and len(table.splitlines()) == 11


_LOG = """\
[2026-11-28 01:56:50,680: INFO/MainProcess] Task lethe.train_model[aa-1] received
[2026-11-28 01:57:03,479: INFO/MainProcess] Task lethe.train_model[aa-1] succeeded in 12.8s: None
[2026-11-28 01:57:41,432: INFO/MainProcess] Task lethe.train_model[bb-2] received
[2026-11-28 01:57:42,000: INFO/MainProcess] Task lethe.apply_deletions[cc-3] succeeded in 0.1s: None
[2026-11-28 01:57:50,250: ERROR/MainProcess] Task lethe.train_model[bb-2] raised unexpected: KeyError()
"""


def _at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_the_end_of_the_training_received_after_the_registration_is_found_in_the_workers_log() -> None:
    registered = _at("2026-11-28 01:57:40,000")
    end = train_task_end(_LOG, registered, _at("2026-11-28 01:57:45,000"))
    assert end is not None and (end.task_id, end.event) == ("bb-2", "raised")
    assert end.at == pytest.approx(_at("2026-11-28 01:57:50,250"))
    assert train_task_end(_LOG, registered, _at("2026-11-28 01:57:51,000")) is None  # not ended since
    assert train_task_end(_LOG.splitlines()[2], registered, registered) is None  # still running


def test_each_tasks_span_runs_from_its_received_line_to_its_end_line() -> None:
    spans = task_spans(_LOG, "lethe.train_model")
    assert spans == [
        (_at("2026-11-28 01:56:50,680"), _at("2026-11-28 01:57:03,479")),
        (_at("2026-11-28 01:57:41,432"), _at("2026-11-28 01:57:50,250")),
    ]
    assert task_spans(_LOG, "lethe.apply_deletions") == []  # its received line is not in the log


FIGURES = {
    "victim_missed_deadlines": 0,
    "victim_errors": 0,
    "hostile_5xx": 0,
    "plain_ids_found": 0,
    "api_rss_peak_mb": 600.0,
    "worker_freed_s": 2.5,
    "victim_p99_ms": 90.0,
    "quiet_p99_ms": 30.0,
}


def test_every_target_is_met_by_figures_within_them() -> None:
    assert all(verdict(FIGURES).values())
    assert set(verdict(FIGURES)) == set(FIGURES) - {"quiet_p99_ms"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("victim_missed_deadlines", 1),
        ("victim_errors", 2),
        ("hostile_5xx", 1),
        ("plain_ids_found", 3),
        ("api_rss_peak_mb", 1024.5),
        ("worker_freed_s", 10.01),
        ("worker_freed_s", None),  # the job did not end: not met
        ("victim_p99_ms", 90.01),  # over 3 x the quiet p99
    ],
)
def test_each_target_fails_alone(key: str, value: object) -> None:
    result = verdict({**FIGURES, key: value})
    assert [k for k, ok in result.items() if not ok] == [key]


def test_the_targets_are_the_stated_bounds() -> None:
    assert Targets() == Targets(max_api_rss_mb=1024.0, max_worker_freed_s=10.0, max_p99_over_quiet=3.0)
    at_bounds = {**FIGURES, "api_rss_peak_mb": 1024.0, "worker_freed_s": 10.0, "victim_p99_ms": 90.0}
    assert all(verdict(at_bounds).values())


def test_the_victims_errors_and_missed_deadlines_count_both_runs_but_not_the_warm_up() -> None:
    quiet = Load([Post(0.0, float(ms), 100 + ms, None) for ms in range(1, 101)])
    attacked = Load(
        [Post(0.0, 5.0 * ms, 200 + ms, None) for ms in range(1, 101)]
        + [Post(0.0, 1.0, None, "HttpError: 500")],
        retrain={"status": 409},
    )
    outcomes = {
        7: Outcome("completed", True, {}),  # a warm-up request: left out
        101: Outcome("completed", True, {"id": 101}),
        201: Outcome("failed", False, {}),
        202: Outcome("completed", True, {"id": 202}),
        203: Outcome("completed", False, {}),
    }
    figures = victim_figures(quiet, attacked, outcomes, ["GET /v1/deletions/9 answered 503"])
    assert figures["victim_missed_deadlines"] == 2 and figures["victim_missed_under_attack"] == 1
    # the failed POST, the GET, the failed deletion and the retrain's 409
    assert figures["victim_errors"] == 4
    assert figures["quiet_p99_ms"] == round(percentile([float(m) for m in range(1, 101)], 0.99), 2) == 99.01
    assert figures["victim_p99_ms"] == pytest.approx(5 * 99.01)  # the failed POST's latency is not counted
    assert figures["victim_requests"] == 101 and figures["quiet_requests"] == 100


def test_plain_ids_are_found_in_blobs_as_stored_or_gzip_compressed_and_in_logs(tmp_path: Path) -> None:
    needles = subject_ids(3, 2)
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "plain").write_bytes(b"..." + needles[1].encode() + b"...")
    (tmp_path / "ab" / "zipped").write_bytes(gzip.compress(needles[0].encode()))
    (tmp_path / "ab" / "other").write_bytes(subject_ids(30, 2)[0].encode())  # another subject
    assert blob_hits(tmp_path, needles) == [f"blob ab/plain: {needles[1]}", f"blob ab/zipped: {needles[0]}"]
    log = tmp_path / "api.log"
    log.write_text(f"forgot {needles[2]}\n")
    assert file_hits([log, tmp_path / "absent.log"], needles) == [f"file api.log: {needles[2]}"]
