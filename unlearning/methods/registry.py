"""Name -> method instance. The service looks methods up here and never branches on a name."""

from __future__ import annotations

from unlearning.errors import InvalidConfigError
from unlearning.methods.protocol import UnlearningMethod

_METHODS: dict[str, UnlearningMethod] = {}


def register(method: UnlearningMethod) -> UnlearningMethod:
    _METHODS[method.name] = method
    return method


def _load() -> None:
    # Each method module registers itself on import.
    import unlearning.methods.hessian_free  # noqa: F401


def get_method(name: str) -> UnlearningMethod:
    _load()
    try:
        return _METHODS[name]
    except KeyError:
        raise InvalidConfigError(f"unknown method {name!r}; choose one of {sorted(_METHODS)}") from None


def method_names() -> tuple[str, ...]:
    _load()
    return tuple(sorted(_METHODS))
