"""Module-call interception: every `Module.__call__` can be routed through a handler.

`make_mox` (bryo-mox-ir) needs to see each module call while it traces. Module subclasses
get their `__call__` wrapped once, at class creation; the wrapper costs one context-variable
read when no handler is active. While one is, the call is described to the handler (type,
path in the model, static attributes, state) together with a pure version of it, as the
`bryo_mox_interceptor` hook's contract says. Paths, attributes and `ModuleInfo` come from
`bryo_mox.interception` (shared with the Equinox backend), imported only while a call is
routed, so this backend loads without bryo-mox-ir.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from bryo_graph import iter_graph, state, update
from bryo_plugins import CallRouter

Handler = Callable[..., Any]


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
    info = module_info(module, name, static_attributes(module))
    before = snapshot(module)  # what `pure` restores: nothing changes the module until then

    def pure(new_state: Any, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        update(module, new_state)
        try:
            with _router.running(module, name):
                out = call(module, *call_args, **call_kwargs)
            return snapshot(module), out
        finally:
            update(module, before)

    def write_back(new_state: Any) -> None:
        update(module, new_state)

    return handler(info, before, pure, write_back, args, kwargs)


def snapshot(module: object) -> Any:
    """The module's State with its own Variables: a later `update` of the module leaves
    it as it is (`state(module)` holds the live Variables)."""
    return jax.tree.map(_same, state(module))


def _same(value: object) -> object:
    return value


_router = CallRouter("bryo_nnx_mox", _route)
wrap_call = _router.wrap
"""`call` (a Module's `__call__`), routed to the active handler when there is one."""
intercept = _router.active
"""Route every Module call to `handler` inside the block (see `bryo_mox_interceptor`)."""


def static_attributes(module: object) -> dict[str, object]:
    """A module's attributes that MoX can record (scalars, strings, None, tuples of them),
    the aliases its class declares in `_mox_aliases` (`Linear` reports `features`, Flax
    Linen's name for `out_features`), and its Variables' sharding metadata (see
    `sharding_attributes`)."""
    from bryo_mox.interception import static_attributes as recordable

    attrs = recordable(vars(module).items())
    for alias, attribute in getattr(type(module), "_mox_aliases", {}).items():
        if attribute in attrs:
            attrs.setdefault(alias, attrs[attribute])
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
        axes = value.get_metadata("sharding", None) if isinstance(value, Variable) else None
        if axes is not None and not key.startswith("_"):
            entries = (axes,) if isinstance(axes, str) else tuple(axes)
            attrs[f"{key}_sharding"] = tuple(
                e if e is None or isinstance(e, str) else "+".join(e) for e in entries
            )
    return attrs
