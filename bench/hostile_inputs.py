"""The inputs of ``bench.hostile`` and the pure parts of its verdict (no servers needed).

- :func:`gzip_csv_bomb`: a gzip CSV stream that decompresses to exactly ``size`` bytes, made on the fly
  from one compressed segment repeated (a few MB on the wire for 2 GB decompressed; nothing on disk);
- :func:`forged_npz`: an NPZ whose ``features.npy`` header claims a shape such as (10**9, 1000) over a
  few bytes of data;
- :func:`victim_csv`, :func:`stray_label_csv`, :func:`table_npz`: the tables the two clients upload;
- :data:`ABSURD`: registrations no deployment should accept (each expected to be a 422);
- :func:`train_task_ends`: the end lines of ``lethe.train_model`` tasks in a Celery worker's log;
- :func:`verdict`: each target against the figures, and whether all are met.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

_SEGMENT = 1 << 20  # decompressed bytes per compressed segment of the bomb
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no name, no mtime, max compression


def _segment(data: bytes, final: bool = False) -> bytes:
    """``data`` as raw deflate blocks that end on a byte boundary and refer to nothing before them (a full
    flush), so that segments concatenate into one stream; ``final`` closes the stream."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)


def gzip_csv_bomb(size: int, header: bytes, row: bytes) -> Iterator[bytes]:
    """A gzip member whose content is ``header`` then ``row`` repeated, cut at exactly ``size`` bytes.

    One 1 MiB run of rows is compressed once and its deflate segment repeated, so the stream costs a few
    milliseconds of compression and about 2.5 KB per decompressed MiB; the CRC-32 of the trailer is
    computed over the content as it is yielded (about 0.4 s per GB)."""
    if size < len(header) or not row:
        raise ValueError("size must hold the header, and the row must not be empty")
    body = row * max(1, _SEGMENT // len(row))
    first = (header + body)[: min(size, len(header) + len(body))]
    yield _GZIP_HEADER
    crc, left = zlib.crc32(first), size - len(first)
    repeated = _segment(body)
    if left == 0:
        yield _segment(first, final=True)
    else:
        yield _segment(first)
        while left > len(body):
            crc = zlib.crc32(body, crc)
            left -= len(body)
            yield repeated
        tail = body[:left]
        crc = zlib.crc32(tail, crc)
        yield _segment(tail, final=True)
    yield struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


def forged_npy(shape: tuple[int, ...], dtype: str = "<f4", data: int = 4096) -> bytes:
    """A .npy file whose header claims ``shape`` of ``dtype``, followed by only ``data`` zero bytes."""
    out = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + bytes(data)


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, allow_pickle=False)
    return out.getvalue()


def forged_npz(shape: tuple[int, ...] = (10**9, 1000)) -> bytes:
    """A table NPZ (``features``, ``labels``) whose features header claims ``shape``; the archive is a few
    KB, stored uncompressed so that each member's size is what it holds."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("features.npy", forged_npy(shape))
        archive.writestr("labels.npy", _npy(np.zeros(8, dtype=np.int64)))
    return out.getvalue()


def owner_id(k: int) -> str:
    """The victim's owner ``k``: fixed width and closed by ``@``, so no id contains another."""
    return f"victim.o{k:06d}@bench.example"


def sample_id(k: int, j: int) -> str:
    return f"victim.s{k:06d}.{j}@bench.example"


def subject_ids(k: int, per_owner: int) -> list[str]:
    """Owner ``k`` and its samples: what must be nowhere once the owner is forgotten entirely."""
    return [owner_id(k), *(sample_id(k, j) for j in range(per_owner))]


def victim_csv(owners: int, per_owner: int = 2, features: int = 8, seed: int = 0) -> bytes:
    """``owners`` x ``per_owner`` rows: ids, ``features`` numeric columns and a label that a linear model
    learns (a noisy half-space)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(owners * per_owner, features)).round(4)
    w = rng.normal(size=features)
    y = (x @ w + 0.3 * rng.normal(size=len(x)) > 0).astype(int)
    lines = ["sample_id,owner_id," + ",".join(f"f{i}" for i in range(features)) + ",label"]
    for r in range(len(x)):
        k, j = divmod(r, per_owner)
        cells = ",".join(f"{v:g}" for v in x[r])
        lines.append(f"{sample_id(k, j)},{owner_id(k)},{cells},{y[r]}")
    return ("\n".join(lines) + "\n").encode()


def stray_label_csv(rows: int = 2000, stray: int | None = 99999, seed: int = 1) -> bytes:
    """A ``rows``-row table with labels 0/1 except one ``stray`` label (a ``stray + 1``-class table; None:
    none). Its ids (``h.s...``, ``h.o...``) are none of the victim's."""
    rng = np.random.default_rng(seed)
    lines = ["sample_id,owner_id,f0,f1,f2,label"]
    for i in range(rows):
        a, b, c = rng.normal(size=3).round(4)
        label = stray if stray is not None and i == rows // 2 else int(a + b > 0)
        lines.append(f"h.s{i:06d},h.o{i:06d},{a},{b},{c},{label}")
    return ("\n".join(lines) + "\n").encode()


def table_npz(rows: int, features: int, rows_per_owner: int = 50, seed: int = 2) -> bytes:
    """A two-class table of ``rows`` x ``features`` float32 as an NPZ with string ids, ``rows_per_owner``
    rows to an owner (a table's size is its rows; each owner's rows are a blob of their own)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    ids = np.array([f"t.s{i:07d}" for i in range(rows)])
    owners = np.array([f"t.o{i // rows_per_owner:07d}" for i in range(rows)])
    out = io.BytesIO()
    np.savez(out, features=x, labels=y, sample_ids=ids, owner_ids=owners)
    return out.getvalue()


ABSURD: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("langevin_epochs_1e9", "langevin", {"epochs": 10**9, "l2": 0.2}),
    ("langevin_max_burn_in_epochs_1e12", "langevin", {"max_burn_in_epochs": 10**12}),
    ("langevin_target_epochs_1e9", "langevin", {"target_epochs": 10**9, "sigma": None}),
    ("mini_unlearning_k_1e9", "mini_unlearning", {"k": 10**9}),
    ("mini_unlearning_m_1e9", "mini_unlearning", {"m": 10**9}),
    ("newton_removal_max_newton_1e9", "newton_removal", {"max_newton": 10**9}),
    ("newton_removal_lam_1e300", "newton_removal", {"lam": 1e300}),
    ("newton_removal_alpha_0", "newton_removal", {"alpha": 0}),
    ("hessian_free_batch_size_0", "hessian_free", {"batch_size": 0}),
)
"""(name, method, hyperparameters) of registrations that must be refused with 422."""


@dataclass(frozen=True)
class TaskLine:
    """One line a Celery worker logs about a task: when, which task, and what happened."""

    at: float  # seconds since the epoch (the worker's local clock, as logged)
    name: str
    task_id: str
    event: str  # received, succeeded, raised, failed, retry


_TASK_LINE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/[^\]]*\] "
    r"Task (?P<name>[\w.]+)\[(?P<id>[0-9a-fA-F-]+)\] (?P<event>received|succeeded|raised|failed|retry)"
)
ENDS = ("succeeded", "raised", "failed")


def task_lines(log: str) -> list[TaskLine]:
    """Every task line of a Celery worker log (format ``[%(asctime)s: %(levelname)s/%(processName)s]``)."""
    out = []
    for line in log.splitlines():
        m = _TASK_LINE.match(line)
        if m:
            at = datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append(TaskLine(at, m["name"], m["id"], m["event"]))
    return out


def train_task_end(log: str, received_after: float, ended_after: float) -> TaskLine | None:
    """The first end line (succeeded, raised, failed) at or after ``ended_after`` of a ``lethe.train_model``
    task received at or after ``received_after``; None if there is none yet."""
    lines = task_lines(log)
    received = {
        t.task_id
        for t in lines
        if t.name == "lethe.train_model" and t.event == "received" and t.at >= received_after - 0.001
    }
    ends = [t for t in lines if t.task_id in received and t.event in ENDS and t.at >= ended_after - 0.001]
    return min(ends, key=lambda t: t.at, default=None)


def task_spans(log: str, name: str) -> list[tuple[float, float]]:
    """(received, ended) of every task called ``name`` that ended, in the order they were received."""
    lines = task_lines(log)
    received = {t.task_id: t.at for t in lines if t.name == name and t.event == "received"}
    ended = {t.task_id: t.at for t in lines if t.name == name and t.event in ENDS}
    return sorted((received[i], ended[i]) for i in received if i in ended)


@dataclass(frozen=True)
class Targets:
    max_api_rss_mb: float = 1024.0
    max_worker_freed_s: float = 10.0
    max_p99_over_quiet: float = 3.0


def verdict(figures: Mapping[str, Any], targets: Targets = Targets()) -> dict[str, bool]:
    """Each target against ``figures`` (the JSON's keys): none missed, no error, no 5xx, no plain id, the
    API's peak RSS, the worker freed in time (False when it was not measured), and the victim's p99 within
    ``max_p99_over_quiet`` x the quiet p99."""
    freed = figures.get("worker_freed_s")
    return {
        "victim_missed_deadlines": figures["victim_missed_deadlines"] == 0,
        "victim_errors": figures["victim_errors"] == 0,
        "hostile_5xx": figures["hostile_5xx"] == 0,
        "plain_ids_found": figures["plain_ids_found"] == 0,
        "api_rss_peak_mb": figures["api_rss_peak_mb"] <= targets.max_api_rss_mb,
        "worker_freed_s": freed is not None and freed <= targets.max_worker_freed_s,
        "victim_p99_ms": figures["victim_p99_ms"] <= targets.max_p99_over_quiet * figures["quiet_p99_ms"],
    }
