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
state after a call is the state before it and `write_back` has nothing to write. Paths,
attributes and `ModuleInfo` come from `bryo_mox.interception` (shared with the NNX-style
backend), imported only while a call is routed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx

from bryo_graph import iter_graph, merge, split
from bryo_plugins import CallRouter

Handler = Callable[..., Any]


def _is_layer_class(cls: type) -> bool:
    """Classes whose calls are module calls: all but Equinox's internal wrappers."""
    module = cls.__module__ or ""
    return not (module.startswith("equinox.") and not module.startswith("equinox.nn."))


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Equinox module call to `handler` inside the block.

    See the `bryo_mox_interceptor` hook for the handler's contract.
    """
    with _router.patching(eqx.Module, _is_layer_class), _router.active(handler):
        yield


def attributes(module: object) -> dict[str, object]:
    """A module's fields that MoX records: numbers, strings, None and tuples of them."""
    from bryo_mox.interception import static_attributes

    fields = getattr(type(module), "__dataclass_fields__", {})
    values = object.__getattribute__(module, "__dict__")
    return static_attributes((name, values[name]) for name in fields if name in values)


def _route(
    handler: Handler,
    call: Callable[..., Any],
    module: object,
    parent: tuple[object, str] | None,
    args: tuple,
    kwargs: dict,
) -> Any:
    from bryo_mox.interception import module_info, module_path  # only while make_mox traces

    name = module_path(module, parent, iter_graph)
    info = module_info(module, name, attributes(module))
    graphdef, state = split(module)

    def pure(new_state: Any, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        rebuilt = merge(graphdef, new_state)
        with _router.running(rebuilt, name):
            return new_state, call(rebuilt, *call_args, **call_kwargs)

    def write_back(new_state: Any) -> None:
        """Nothing to write: a call cannot change an immutable Equinox module."""

    return handler(info, state, pure, write_back, args, kwargs)


_router = CallRouter("bryo_equinox_mox", _route)
