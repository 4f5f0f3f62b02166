"""torch.func's forward mode, safe to call from several threads of one process.

torch keeps the current forward-AD level in a module global (``torch.autograd.forward_ad._current_level``),
not per thread. Two threads inside ``torch.func.jvp`` at once enter and exit each other's levels, and one
of them fails with "Trying to create a dual Tensor for forward AD but no level exists" (torch 2.13: two
threads of 3,000 small jvps each fail every time; ``tests/unit/test_threads.py``). The service runs
jobs on threads (a Celery worker's thread pool; the embedded worker's one thread per lane), so two
trainings of MLPs or CNNs, or a training and a Mini-Unlearning update, can be in forward mode together.

Every forward-mode product of the library goes through :func:`jvp` here, which holds one process-wide
lock for the call. Under ``vmap`` the lock is taken once per batched call, not per vector, so a Stage II
chunk of 64 products costs one acquisition. Reverse mode (``grad``, ``vjp``) keeps no such global and
needs no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch.func

FORWARD_MODE = threading.RLock()
"""Held while a thread is in torch's forward mode. Re-entrant: a jvp nested in another (forward over
forward) is one thread's business and torch supports it."""


def jvp(func: Callable[..., Any], primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, ...]:
    """``torch.func.jvp(func, primals, tangents)`` (the value and J tangents), one thread at a time."""
    with FORWARD_MODE:
        return torch.func.jvp(func, primals, tangents)


def hessian(func: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.func.hessian(func)`` (forward over reverse), one thread at a time: for reference Hessians
    computed beside running jobs (the tests' embedded service trains in the background)."""
    full = torch.func.hessian(func)

    def locked(*args: Any) -> Any:
        with FORWARD_MODE:
            return full(*args)

    return locked
