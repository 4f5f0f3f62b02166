"""Name -> method instance. The service looks methods up here and never branches on a name."""

from __future__ import annotations

import threading

from unlearning.errors import InvalidConfigError
from unlearning.methods.protocol import UnlearningMethod

_METHODS: dict[str, UnlearningMethod] = {}


def register(method: UnlearningMethod) -> UnlearningMethod:
    """Make ``method`` known by its name. A method that trains on tables is registered with its feature
    scaling and quality report (:class:`unlearning.methods.table_model.TableModel`)."""
    from unlearning.methods.table_model import TableModel, trains_on_tables

    _METHODS[method.name] = TableModel(method) if trains_on_tables(method) else method  # type: ignore[assignment]
    return method


_SUPPORT_MODULES = frozenset(
    {"hyperparameters", "job_estimate", "table_model", "protocol", "registry", "statistics"}
)
_discovered = False
_discovering = threading.Lock()


def _load() -> None:
    """Import every method module of this package once; each registers itself on import.

    Discovery means adding a method is adding one module: nothing else names it. Under a lock, and
    marked done only once every module imported: a worker's threads start jobs at the same moment, and
    one that found discovery "done" while another thread was still importing saw an empty registry
    ("unknown method 'hessian_free'; choose one of []").
    """
    global _discovered
    if _discovered:
        return
    with _discovering:
        if _discovered:
            return
        import importlib
        import pkgutil

        import unlearning.methods as package

        for info in pkgutil.iter_modules(package.__path__):
            if info.name not in _SUPPORT_MODULES and not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")
        _discovered = True


def get_method(name: str) -> UnlearningMethod:
    _load()
    try:
        return _METHODS[name]
    except KeyError:
        raise InvalidConfigError(f"unknown method {name!r}; choose one of {sorted(_METHODS)}") from None


def method_names() -> tuple[str, ...]:
    _load()
    return tuple(sorted(_METHODS))
