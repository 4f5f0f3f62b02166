"""service.jobs.drain.Drains: a model's update jobs in one process run as one drain at a time, and a
job that arrives during a drain makes it pass over the queue once more instead of running beside it."""

from __future__ import annotations

import threading
import time

from service.jobs.drain import Drains


def test_a_job_arriving_during_a_drain_is_left_to_it_and_makes_it_pass_again() -> None:
    drains = Drains()
    assert drains.enter(1)  # the first job drains model 1
    assert drains.enter(2)  # another model's job runs beside it
    assert not drains.enter(1) and not drains.enter(1)  # two more jobs for model 1: left to the drain
    assert drains.again(1)  # one more pass covers both
    assert not drains.again(1)  # nothing arrived during that pass: model 1 is left
    assert drains.enter(1)  # so the next job drains it itself
    drains.leave(1)  # a drain that failed leaves the model too
    assert drains.enter(1)
    assert not drains.again(2) and drains.enter(2)


def test_every_job_left_to_a_drain_is_followed_by_a_pass_of_it() -> None:
    """Whatever the interleaving of 64 jobs on threads, each job either drains the model itself or a pass
    of the running drain starts after the job was left to it: none is skipped."""
    drains = Drains()
    order = threading.Lock()
    events: list[tuple[str, int]] = []  # ("left", job) or ("pass", job), in the order they happened
    left_at: dict[int, int] = {}

    def job(n: int) -> None:
        with order:  # the job's enter and its record are one step, as seen by the others
            drains_it = drains.enter(7)
            events.append(("pass" if drains_it else "left", n))
        if not drains_it:
            return
        while True:
            time.sleep(0.001)  # the pass itself, during which other jobs arrive
            with order:
                if not drains.again(7):
                    return
                events.append(("pass", n))

    threads = [threading.Thread(target=job, args=(n,)) for n in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (kind, n) in enumerate(events):
        if kind == "left":
            left_at[n] = i
    passes = [i for i, (kind, _) in enumerate(events) if kind == "pass"]
    assert left_at  # jobs did arrive during a drain
    assert all(any(p > i for p in passes) for i in left_at.values()), events
    assert drains.enter(7)  # the model was left at the end
