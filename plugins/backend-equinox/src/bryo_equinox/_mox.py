"""MoX tracing of Equinox models: every `eqx.Module.__call__` routed through a handler.

`make_mox` (bryo-mox-ir) enters the context manager `intercept(handler)` while it traces.
Equinox classes are not ours to wrap when they are created, so on entering, the
`__call__` of every existing `eqx.Module` subclass that defines one (Equinox's own
layers included, its internal wrappers such as `filter_jit`'s excluded) is replaced by a
wrapper, and put back when the last active context exits. A wrapper costs one
context-variable read when no handler is active, in this thread or another. While one
is, a call is described to the handler: the module's type, its path in the calling
module (`"layers/0"`), its non-array fields as attributes, its State, and a pure version
of the call that rebuilds the module from a State. Equinox modules are immutable, so the
state after a call is the state before it and `write_back` has nothing to write.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx

from bryo_graph import iter_graph, merge, split

Handler = Callable[..., Any]

_handler: contextvars.ContextVar[Handler | None] = contextvars.ContextVar(
    "bryo_equinox_mox_handler", default=None
)
# The module whose call is running, with its name.
_current: contextvars.ContextVar[tuple[object, str] | None] = contextvars.ContextVar(
    "bryo_equinox_mox_current", default=None
)
# Per trace: id(parent) -> (parent, {id(child): name}); the parent is kept alive so that
# its id cannot be reused by another module during the trace.
_child_names: contextvars.ContextVar[dict[int, tuple[object, dict[int, str]]] | None] = (
    contextvars.ContextVar("bryo_equinox_mox_child_names", default=None)
)

STATIC_TYPES = (int, float, bool, str, type(None))
_ORIGINAL = "__bryo_equinox_original__"

_lock = threading.Lock()
_active = [0]
_patched: list[type] = []


def _is_layer_class(cls: type) -> bool:
    """Classes whose calls are module calls: all but Equinox's internal wrappers."""
    module = cls.__module__ or ""
    return not (module.startswith("equinox.") and not module.startswith("equinox.nn."))


def _subclasses(cls: type) -> Iterator[type]:
    seen: set[type] = set()
    stack = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                yield sub


def _install() -> None:
    for cls in _subclasses(eqx.Module):
        call = cls.__dict__.get("__call__")
        if call is None or hasattr(call, _ORIGINAL) or not _is_layer_class(cls):
            continue
        type.__setattr__(cls, "__call__", _wrap(call))
        _patched.append(cls)


def _uninstall() -> None:
    while _patched:
        cls = _patched.pop()
        wrapper = cls.__dict__.get("__call__")
        if wrapper is not None and hasattr(wrapper, _ORIGINAL):
            type.__setattr__(cls, "__call__", getattr(wrapper, _ORIGINAL))


def _wrap(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def intercepted(self: object, *args: Any, **kwargs: Any) -> Any:
        handler = _handler.get()
        if handler is None:
            return call(self, *args, **kwargs)
        current = _current.get()
        if current is not None and current[0] is self:  # super().__call__ of the same call
            return call(self, *args, **kwargs)
        return _route(handler, call, self, current, args, kwargs)

    setattr(intercepted, _ORIGINAL, call)
    return intercepted


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Equinox module call to `handler` inside the block.

    See the `bryo_mox_interceptor` hook for the handler's contract.
    """
    with _lock:
        if _active[0] == 0:
            _install()
        _active[0] += 1
    handler_token = _handler.set(handler)
    names_token = _child_names.set({})
    try:
        yield
    finally:
        _child_names.reset(names_token)
        _handler.reset(handler_token)
        with _lock:
            _active[0] -= 1
            if _active[0] == 0:
                _uninstall()


def attributes(module: object) -> dict[str, object]:
    """A module's fields that MoX records: numbers, strings, None and tuples of them."""
    fields = getattr(type(module), "__dataclass_fields__", {})
    values = object.__getattribute__(module, "__dict__")
    return {
        name: values[name]
        for name in sorted(fields)
        if name in values and not name.startswith("_") and _is_static(values[name])
    }


def _is_static(value: object) -> bool:
    if isinstance(value, STATIC_TYPES):
        return True
    return isinstance(value, tuple) and all(isinstance(v, STATIC_TYPES) for v in value)


def _name_of(module: object, parent: tuple[object, str] | None) -> str:
    if parent is None:
        return ""
    parent_module, parent_name = parent
    caches = _child_names.get()
    cached = caches.get(id(parent_module)) if caches is not None else None
    if cached is None or cached[0] is not parent_module:
        names: dict[int, str] = {}
        for path, value in iter_graph(parent_module):
            if path:
                names.setdefault(id(value), "/".join(map(str, path)))
        cached = (parent_module, names)
        if caches is not None:
            caches[id(parent_module)] = cached
    own = cached[1].get(id(module), type(module).__name__)
    return f"{parent_name}/{own}" if parent_name else own


def _route(
    handler: Handler,
    call: Callable[..., Any],
    module: object,
    parent: tuple[object, str] | None,
    args: tuple,
    kwargs: dict,
) -> Any:
    from bryo_mox import ModuleInfo  # only reached while make_mox traces

    cls = type(module)
    name = _name_of(module, parent)
    info = ModuleInfo(f"{cls.__module__}.{cls.__qualname__}", name, attributes(module))
    graphdef, state = split(module)

    def pure(new_state: Any, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        rebuilt = merge(graphdef, new_state)
        token = _current.set((rebuilt, name))
        try:
            return new_state, call(rebuilt, *call_args, **call_kwargs)
        finally:
            _current.reset(token)

    def write_back(new_state: Any) -> None:
        """Nothing to write: a call cannot change an immutable Equinox module."""

    return handler(info, state, pure, write_back, args, kwargs)
