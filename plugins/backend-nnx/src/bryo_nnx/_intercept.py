"""Module-call interception: every `Module.__call__` can be routed through a handler.

`make_mox` (bryo-mox-ir) needs to see each module call while it traces. Module subclasses
get their `__call__` wrapped once, at class creation; the wrapper costs one context-variable
read when no handler is active. While one is, the call is described to the handler (type,
path in the model, static attributes, state) together with a pure version of it, as the
`bryo_mox_interceptor` hook's contract says.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

from bryo_graph import iter_graph, state, update

Handler = Callable[..., Any]

_handler: contextvars.ContextVar[Handler | None] = contextvars.ContextVar(
    "bryo_nnx_mox_handler", default=None
)
# The module whose call is running, with its name, and per-trace caches of child names.
_current: contextvars.ContextVar[tuple[object, str] | None] = contextvars.ContextVar(
    "bryo_nnx_mox_current", default=None
)
_child_names: contextvars.ContextVar[dict[int, dict[int, str]] | None] = contextvars.ContextVar(
    "bryo_nnx_mox_child_names", default=None
)

STATIC_TYPES = (int, float, bool, str, type(None))


def wrap_call(call: Callable[..., Any]) -> Callable[..., Any]:
    """`call` (a Module's `__call__`), routed to the active handler when there is one."""
    if getattr(call, "__bryo_intercepted__", False):
        return call

    @functools.wraps(call)
    def intercepted(self: object, *args: Any, **kwargs: Any) -> Any:
        handler = _handler.get()
        if handler is None:
            return call(self, *args, **kwargs)
        current = _current.get()
        if current is not None and current[0] is self:  # super().__call__ of the same call
            return call(self, *args, **kwargs)
        return _route(handler, call, self, current, args, kwargs)

    intercepted.__bryo_intercepted__ = True  # type: ignore[attr-defined]
    return intercepted


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Module call to `handler` inside the block (see `bryo_mox_interceptor`)."""
    handler_token = _handler.set(handler)
    names_token = _child_names.set({})
    try:
        yield
    finally:
        _child_names.reset(names_token)
        _handler.reset(handler_token)


def static_attributes(module: object) -> dict[str, object]:
    """A module's attributes that MoX can record: scalars, strings, None, tuples of them."""
    attrs = {
        key: value
        for key, value in sorted(vars(module).items())
        if not key.startswith("_") and _is_static(value)
    }
    for key, value in sharding_attributes(module).items():
        attrs.setdefault(key, value)
    return attrs


def sharding_attributes(module: object) -> dict[str, tuple[str | None, ...]]:
    """The `sharding` metadata of a module's own Variables as `<name>_sharding` attributes,
    so MoX documents (and their files) keep it: `kernel_sharding=('embed', 'mlp')`. A
    dimension with several logical names is written as one string, `'batch+seq'`."""
    from bryo_graph import Variable

    attrs: dict[str, tuple[str | None, ...]] = {}
    for key, value in sorted(vars(module).items()):
        axes = value._metadata.get("sharding") if isinstance(value, Variable) else None
        if axes is not None and not key.startswith("_"):
            entries = (axes,) if isinstance(axes, str) else tuple(axes)
            attrs[f"{key}_sharding"] = tuple(
                e if e is None or isinstance(e, str) else "+".join(e) for e in entries
            )
    return attrs


def _is_static(value: object) -> bool:
    if isinstance(value, STATIC_TYPES):
        return True
    return isinstance(value, tuple) and all(isinstance(v, STATIC_TYPES) for v in value)


def _name_of(module: object, parent: tuple[object, str] | None) -> str:
    if parent is None:
        return ""
    parent_module, parent_name = parent
    caches = _child_names.get()
    names = caches.get(id(parent_module)) if caches is not None else None
    if names is None:
        names = {}
        for path, value in iter_graph(parent_module):
            if path:
                names.setdefault(id(value), "/".join(map(str, path)))
        if caches is not None:
            caches[id(parent_module)] = names
    own = names.get(id(module), type(module).__name__)
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
    info = ModuleInfo(f"{cls.__module__}.{cls.__qualname__}", name, static_attributes(module))

    def run(*call_args: Any, **call_kwargs: Any) -> Any:
        token = _current.set((module, name))
        try:
            return call(module, *call_args, **call_kwargs)
        finally:
            _current.reset(token)

    def pure(new_state: Any, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        saved = state(module)
        update(module, new_state)
        try:
            out = run(*call_args, **call_kwargs)
            return state(module), out
        finally:
            update(module, saved)

    def write_back(new_state: Any) -> None:
        update(module, new_state)

    return handler(info, state(module), pure, write_back, args, kwargs)
