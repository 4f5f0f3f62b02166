"""What a training job will cost, judged at registration from the data's shape and the configuration.

Every method answers :meth:`~unlearning.methods.protocol.UnlearningMethod.estimate_job`; the service
refuses a registration whose estimate exceeds the deployment's limits (with the estimate in the message)
and gives every training job a time limit derived from it; it also says what the trained model's state
will occupy in the hot store (Redis, :func:`hot_store_bytes`). Estimates are on the pessimistic side: a job
that needs more than its estimate by a large factor is a defect of the estimate.

A method writes its estimate as named terms (:func:`estimate`): bytes it holds at its peak (summed, as if
every term were alive at once) and the floating-point operations and fixed per-step costs of its loops.
Time is ``flops / CORE_FLOPS`` plus the fixed costs, both calibrated on one core (``torch.set_num_threads(1)``)
against real fits: docs/decisions.md, "Job estimates", has the table. The helpers below hold what several
methods share: the parameter count and forward cost of a model family and the bytes of a data copy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FLOAT32 = 4
FLOAT64 = 8
INDEX = 8  # an int64 row index

CORE_FLOPS = 3.0e9
"""Floating-point operations per second one core sustains in the methods' products: the thin products of
Newton's passes (a design times a few columns) ran at 3.1 to 4.4 GFLOP/s on one core of the calibration
machine, square ones (Grams, Stage II's propagation) at 10 to 24; the small per-step products of SGD run far
below it, which the per-step costs absorb."""
STEP_SECONDS = 3.0e-4
"""Fixed cost of one small step of a loop (a Langevin step, a CG iteration, a line-search trial): the
dispatch of a dozen small torch calls. Loops with more calls per step charge several."""
AUTOGRAD_CALL_SECONDS = 1.5e-2
"""Fixed cost of one vmapped torch.func call (per-sample gradients, a chunk of jvps) of a neural family."""
AUTOGRAD_WARMUP_SECONDS = 4.0
"""The first torch.func transforms of a process (imports and tracing), paid by a neural family's fit."""
BASE_MEMORY = 64 * 2**20
"""Working memory every fit adds besides its terms: numpy and torch temporaries, allocator arenas and the
scikit-learn modules the quality probe imports (the calibration's smallest fits peaked at 18 to 24 MiB, and
the largest up to 30 MiB above their terms)."""
AUTOGRAD_MEMORY = 96 * 2**20
"""What torch.func adds to a neural family's fit (the calibration's tiny MLP fits peaked near 110 MiB)."""
FLOAT16 = 2  # float16 and bfloat16
ID_BYTES = 40
"""A sample or owner id as the hot store holds it (hash fields, owners' member lists): a UUID's 36
characters and a little; shorter ids make a hot-store estimate pessimistic."""
REDIS_ENTRY = 64
"""What Redis 7 holds per hash entry besides its field and value (the dict entry, two string headers, the
table's slot): 47 to 72 bytes measured."""
REDIS_SLACK = 1.25
"""The allocator (jemalloc) rounds every string up to its size class, four classes per doubling: at most a
quarter more (3 to 21% measured on vector-sized values)."""
SPEC_BYTES = 512
"""The serving entry besides its weights: the model spec's JSON (90 to 270 bytes measured), sequence
number, version id and dtype."""
SERVING_ENTRIES = 5  # fields of the serving hash: seq, version_id, dtype, spec, weights


@dataclass(frozen=True)
class DataShape:
    """The size of the data a model trains on: ``rows`` samples (table rows, graph nodes, or graphs),
    ``features`` per sample (flattened), ``classes`` label values; for graphs, where known, ``nodes``
    (every node of the dataset) and ``edges`` (undirected): an estimate assumes typical sizes without them;
    where known, ``owners``, the rows' distinct owners: a hot-store estimate assumes one per row without it
    (the most per-owner sums there can be)."""

    rows: int
    features: int
    classes: int
    nodes: int | None = None
    edges: int | None = None
    owners: int | None = None


@dataclass(frozen=True)
class JobEstimate:
    """A training job's peak working memory in bytes (beyond the process's baseline), its time in seconds
    on one CPU core, and, in words, what dominates them (shown when a registration is refused); and the
    bytes the trained model's state will occupy in the hot store (:func:`hot_store_bytes`)."""

    memory_bytes: int
    seconds: float
    dominant: str
    hot_store_bytes: int = 0

    def describe(self) -> str:
        return (
            f"about {self.memory_bytes / 2**20:,.0f} MiB of memory and {self.seconds:,.0f} s of one CPU core, "
            f"then {self.hot_store_bytes / 2**20:,.1f} MiB in the hot store ({self.dominant})"
        )


def estimate(
    memory: Mapping[str, float],
    flops: Mapping[str, float],
    fixed_seconds: Mapping[str, float] | None = None,
    *,
    hot_store: float,
) -> JobEstimate:
    """The estimate of named terms: ``memory`` in bytes (summed, plus :data:`BASE_MEMORY`), ``flops`` (divided
    by :data:`CORE_FLOPS`) and ``fixed_seconds`` (loop overheads), the largest memory and time terms named as
    dominant; ``hot_store``: the state's bytes in the hot store (:func:`hot_store_bytes`)."""
    seconds = {name: value / CORE_FLOPS for name, value in flops.items()}
    for name, value in (fixed_seconds or {}).items():
        seconds[name] = seconds.get(name, 0.0) + value
    top_memory = max(memory, key=lambda k: memory[k])
    top_time = max(seconds, key=lambda k: seconds[k])
    return JobEstimate(
        memory_bytes=math.ceil(BASE_MEMORY + sum(memory.values())),
        seconds=float(sum(seconds.values())),
        dominant=f"mostly {top_memory} ({memory[top_memory] / 2**20:,.0f} MiB) and {top_time} "
        f"({seconds[top_time]:,.0f} s)",
        hot_store_bytes=math.ceil(hot_store),
    )


def in_sequence(*parts: JobEstimate) -> JobEstimate:
    """Jobs run one after the other in one process: their times add, the largest memory counts (each
    part's working memory is freed before the next starts); the dominant words are the longest part's.
    One part's state is kept in the hot store: the largest counts."""
    longest = max(parts, key=lambda p: p.seconds)
    return JobEstimate(
        max(p.memory_bytes for p in parts),
        sum(p.seconds for p in parts),
        longest.dominant,
        max(p.hot_store_bytes for p in parts),
    )


def hot_store_bytes(
    weights: int,
    weight_itemsize: int = FLOAT64,
    *,
    shape: DataShape | None = None,
    vector: int = 0,
    vector_itemsize: int = FLOAT32,
) -> float:
    """What a trained model's state occupies in the hot store (``service.storage.hot``): the serving entry
    (``weights`` values of ``weight_itemsize`` bytes and the spec) and, for a method keeping per-sample
    statistics (``vector`` values of ``vector_itemsize`` bytes per sample of ``shape``), per row its vector
    and its owner, per owner a sum of ``vector`` values and its members list. Every hash entry costs its
    field and value times :data:`REDIS_SLACK` plus :data:`REDIS_ENTRY`; ids count :data:`ID_BYTES`.
    Against a real Redis's ``MEMORY USAGE`` of the keys a fit writes: 1.19 to 1.27 times (every method;
    vectors and weights of 600 to 7,850 values); against the bytes of its keys, fields and values: 1.28 to
    1.36 times (tests/unit/test_hot_store_estimates.py, tests/integration/test_hot_store_memory.py)."""
    serving = REDIS_SLACK * (weights * weight_itemsize + SPEC_BYTES) + SERVING_ENTRIES * REDIS_ENTRY
    if shape is None or not vector:
        return serving
    rows = max(shape.rows, 0)
    owners = rows if shape.owners is None else min(shape.owners, rows)
    vector_bytes = vector * vector_itemsize
    # per row: its vector (id -> vector), its owner (id -> id) and its id in the owner's members list
    per_row = REDIS_SLACK * (vector_bytes + 3 * ID_BYTES + 3) + 2 * REDIS_ENTRY
    # per owner: its sum (id -> vector) and its members list (id -> JSON list)
    per_owner = REDIS_SLACK * (vector_bytes + 2 * ID_BYTES + 2) + 2 * REDIS_ENTRY
    return serving + rows * per_row + owners * per_owner


def data_bytes(shape: DataShape, itemsize: int = FLOAT64) -> int:
    """One copy of the training rows' features: ``rows x features x itemsize``."""
    return shape.rows * shape.features * itemsize


@dataclass(frozen=True)
class ModelSize:
    """A model family's ``parameters``, the floating-point operations of one sample's forward pass
    (``forward_flops``) and the activations it keeps per sample (``activations``)."""

    parameters: int
    forward_flops: float
    activations: int


# The fixed image networks of unlearning.models.nets on 1 x 28 x 28 inputs: parameters and multiply-adds of
# the layers before the last, and the width feeding the last (one output per class).
_IMAGE_NETS = {
    # conv 1->10 k5, conv 10->20 k5, fc 320->50: 21,330 parameters; 480,000 MACs; 8,850 activations
    "cnn": (21_330, 480_000, 50, 8_850),
    # conv 1->6 k5 pad 2, conv 6->16 k5, fc 400->120->84: 60,856 parameters; 415,680 MACs; 8,084 activations
    "lenet5": (60_856, 415_680, 84, 8_084),
}


def model_size(family: str, features: int, classes: int, hidden: Sequence[int] = ()) -> ModelSize:
    """The size of ``family`` on rows of ``features`` values and ``classes`` outputs: a linear model has
    ``(features + 1) x classes`` weights, an MLP its layers' ``(in + 1) x out``, the image networks their
    fixed layers plus ``(width + 1) x classes``; the forward pass costs two flops per weight (convolutions:
    per multiply-add of every position)."""
    if family in _IMAGE_NETS:
        body, macs, width, activations = _IMAGE_NETS[family]
        return ModelSize(body + (width + 1) * classes, 2.0 * (macs + width * classes), activations + classes)
    widths = [features, *(hidden if family == "mlp" else ()), classes]
    parameters = sum((a + 1) * b for a, b in itertools.pairwise(widths))
    return ModelSize(parameters, 2.0 * parameters, sum(widths[1:]))


__all__ = [
    "AUTOGRAD_CALL_SECONDS",
    "AUTOGRAD_MEMORY",
    "AUTOGRAD_WARMUP_SECONDS",
    "BASE_MEMORY",
    "CORE_FLOPS",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "ID_BYTES",
    "INDEX",
    "REDIS_ENTRY",
    "REDIS_SLACK",
    "SPEC_BYTES",
    "STEP_SECONDS",
    "DataShape",
    "JobEstimate",
    "ModelSize",
    "data_bytes",
    "estimate",
    "hot_store_bytes",
    "in_sequence",
    "model_size",
]
