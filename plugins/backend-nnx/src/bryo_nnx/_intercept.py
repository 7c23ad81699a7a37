"""Module-call interception: every `Module.__call__` can be routed through a handler.

`make_mox` (bryo-mox-ir) needs to see each module call while it traces. Module subclasses
get their `__call__` wrapped once, at class creation; the wrapper costs one context-variable
read when no handler is active. While one is, the call is described to the handler (type,
path in the model, static attributes, state) together with a pure version of it, as the
`bryo_mox_interceptor` hook's contract says. The state handed over is the list of the
module's Variable values: the model is flattened once per trace, and a nested module reads
its Variables from that flattening (`FlatGraph.leaves_of`) instead of being flattened,
split and updated per call. Paths, attributes and `ModuleInfo` come from
`bryo_mox.interception` (shared with the Equinox backend), imported only while a call is
routed, so this backend loads without bryo-mox-ir.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import jax

from bryo_graph import (
    FlatGraph,
    LeafSource,
    Variable,
    flat_graph,
    iter_graph,
    state,
    update,
)
from bryo_plugins import CallRouter

Handler = Callable[..., Any]

# The flattenings of the models whose modules a trace calls: a nested call reads its
# module's Variables from its model's flattening instead of flattening it again.
_KEPT_FLATTENINGS = 8


class _Watch(Protocol):
    """A flattening's `watch` (bryo_graph): valid while none of its nodes changed."""

    def is_valid(self) -> bool: ...

    def expire(self) -> None: ...


class _Flattening(NamedTuple):
    """What a trace keeps of one model's flattening: its watch, its State leaves' sources
    and each module's range of them. Not the `FlatGraph`: its GraphDef (an entry per
    attribute) is not needed during the trace, and dropped at once it dies young instead
    of being promoted by the garbage collector with everything the trace keeps alive."""

    watch: _Watch
    sources: list[LeafSource]
    spans: dict[int, tuple[object, range | None]]  # id(module) -> (module, its leaves)
    variables: list[Variable] | None  # each source's Variable; None: some leaf is raw

    @classmethod
    def of(cls, flat: FlatGraph, watch: _Watch) -> _Flattening:
        variables = [source.variable for source in flat.sources]
        if not all(isinstance(v, Variable) for v in variables):
            return cls(watch, flat.sources, flat.node_spans(), None)
        return cls(watch, flat.sources, flat.node_spans(), variables)  # type: ignore[arg-type]  # all Variables (checked above)

    def leaves_of(self, module: object) -> range | None:
        found = self.spans.get(id(module))
        return found[1] if found is not None and found[0] is module else None


_flattenings: contextvars.ContextVar[list[_Flattening] | None] = contextvars.ContextVar(
    "bryo_nnx_mox_flattenings", default=None
)


def _route(
    handler: Handler,
    call: Callable[..., Any],
    module: object,
    parent: tuple[object, str] | None,
    args: tuple,
    kwargs: dict,
) -> Any:
    mox = _interception()
    name = mox.module_path(module, parent, iter_graph)
    info = mox.module_info(module, name, static_attributes(module))
    found = own_variables(module)
    if found is None:
        return _route_state(handler, call, module, name, info, args, kwargs)
    watch, variables = found
    before = list(map(_raw_value, variables))  # the handler's `state`: one leaf per Variable

    def pure(new_values: list[Any], *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        _write_changed(variables, new_values, before)
        restored = False
        try:
            with _router.running(module, name):
                out = call(module, *call_args, **call_kwargs)
            if not watch.is_valid():
                return snapshot(module), out  # the call changed the model's structure
            after = list(map(_raw_value, variables))
            _write_changed(variables, before, after)
            restored = True
            return after, out
        finally:
            if not restored:
                _write(variables, before)

    def write_back(new_state: Any) -> None:
        if isinstance(new_state, list):
            _write(variables, new_state)
        else:
            update(module, new_state)

    return handler(info, before, pure, write_back, args, kwargs)


_mox_interception: Any = None


def _interception() -> Any:
    """`bryo_mox.interception`, imported on first use (only while `make_mox` traces: this
    backend loads without bryo-mox-ir), then read from a global (an `import` statement
    costs ~2 us a call)."""
    global _mox_interception
    if _mox_interception is None:
        import bryo_mox.interception

        _mox_interception = bryo_mox.interception
    return _mox_interception


def own_variables(module: object) -> tuple[_Watch, list[Variable]] | None:
    """A watch that stays valid while `module`'s structure does not change, and `module`'s
    Variables in `state(module)` order; `None` when its State has raw array leaves or its
    structure cannot be watched (then the call is routed with States)."""
    flattenings = _flattenings.get()
    if flattenings is None:
        flattenings = []
    leaves = None
    for flat in reversed(flattenings):
        if flat.watch.is_valid():
            leaves = flat.leaves_of(module)
            if leaves is not None:
                break
    else:
        whole = flat_graph(module, keep=False)  # kept here, for this trace only
        if whole.watch is None or not whole.watch.is_valid():
            return None
        flat = _Flattening.of(whole, whole.watch)
        leaves = range(len(flat.sources))
        flattenings.append(flat)
        del flattenings[:-_KEPT_FLATTENINGS]
    if flat.variables is not None:  # (the common case: a check per model, not per call)
        return flat.watch, flat.variables[leaves.start : leaves.stop]
    variables = [source.variable for source in flat.sources[leaves.start : leaves.stop]]
    if not all(isinstance(v, Variable) for v in variables):
        return None
    return flat.watch, variables  # type: ignore[return-value]  # all Variables (checked on the line above)


_raw_value = operator.attrgetter("raw_value")


def _write(variables: list[Variable], values: list[Any]) -> None:
    _write_changed(variables, values, list(map(_raw_value, variables)))


def _write_changed(variables: list[Variable], values: list[Any], current: list[Any]) -> None:
    """Write `values` into `variables`, which hold `current`: only the values that differ
    (a call's state mostly comes back as it went in)."""
    if len(values) == len(current) and all(map(operator.is_, values, current)):
        return
    for variable, value, held in zip(variables, values, current, strict=True):
        if value is not held:
            variable.set_raw_value(value)


def _route_state(
    handler: Handler,
    call: Callable[..., Any],
    module: object,
    name: str,
    info: Any,
    args: tuple,
    kwargs: dict,
) -> Any:
    """Route a call with the module's States (for models with raw array leaves)."""
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


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Module call to `handler` inside the block (see `bryo_mox_interceptor`)."""
    flattenings: list[_Flattening] = []
    token = _flattenings.set(flattenings)
    try:
        with _router.active(handler):
            yield
    finally:
        _flattenings.reset(token)
        for flat in flattenings:  # their watches must not pile up on a long-lived model
            flat.watch.expire()


def static_attributes(module: object) -> dict[str, object]:
    """A module's attributes that MoX can record (scalars, strings, None, tuples of them),
    the aliases its class declares in `_mox_aliases` (`Linear` reports `features`, Flax
    Linen's name for `out_features`), and its Variables' sharding metadata (see
    `sharding_attributes`).

    `make_mox` asks once per module call: the answer is kept by the module's layout (its
    class, attribute names and the classes of their values) and the values that can be
    recorded, so a model's many modules of one kind cost a lookup each."""
    values = vars(module)
    layout = _layout(module, values)
    key = (layout, *[values[name] for name in layout.exact])
    if layout.floats:  # by their bits: -0.0 == 0.0 and nan != nan
        key += tuple(float.hex(values[name]) for name in layout.floats)
    if layout.others:  # (tuples, subclasses of scalar types): by their text when recorded
        key += tuple(_text_if_static(values[name]) for name in layout.others)
    plain = _PLAIN_ATTRIBUTES.get(key)
    if plain is None:
        if len(_PLAIN_ATTRIBUTES) >= _CACHE_BOUND:
            _PLAIN_ATTRIBUTES.clear()
        plain = _PLAIN_ATTRIBUTES[key] = _plain_attributes(module, values, layout)
    attrs = dict(plain)
    if layout.variables:
        variables = [(name, values[name]) for name in layout.variables]
        for name, value in _sharding_attributes(variables).items():
            attrs.setdefault(name, value)
    return attrs


class _Layout:
    """The public attributes of a module, by what `static_attributes` does with them:
    `exact` hold an int, bool, str or None, `floats` a float, `others` a value that may be
    recorded (a tuple, an instance of a subclass of those), `variables` a Variable; other
    attributes (submodules, functions, arrays) are never recorded. Hashed by identity."""

    __slots__ = ("aliases", "exact", "floats", "others", "variables")

    def __init__(self, cls: type, values: dict[str, Any]) -> None:
        mox = _interception()
        exact, floats, others, variables = [], [], [], []
        for name, value in values.items():
            kind = type(value)
            if name[:1] == "_":
                continue
            if issubclass(kind, Variable):
                variables.append(name)
            elif kind is float:
                floats.append(name)
            elif kind in mox.STATIC_TYPES:
                exact.append(name)
            elif issubclass(kind, (tuple, *mox.STATIC_TYPES)):
                others.append(name)
        self.aliases: Mapping[str, str] | None = getattr(cls, "_mox_aliases", None)
        self.exact, self.floats = tuple(exact), tuple(floats)
        self.others, self.variables = tuple(others), tuple(variables)


#: `_Layout`s by (class, attribute names, their values' classes), and the recorded plain
#: attributes by layout and values (`static_attributes`); cleared past `_CACHE_BOUND`.
_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
_PLAIN_ATTRIBUTES: dict[tuple[Any, ...], dict[str, object]] = {}
_CACHE_BOUND = 4096


def _layout(module: object, values: dict[str, Any]) -> _Layout:
    cls = type(module)
    key = (cls, tuple(values), tuple(map(type, values.values())))
    layout = _LAYOUTS.get(key)
    if layout is None or layout.aliases is not getattr(cls, "_mox_aliases", None):
        if len(_LAYOUTS) >= _CACHE_BOUND:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _Layout(cls, values)
    return layout


def _text_if_static(value: object) -> str | None:
    return repr(value) if _interception().is_static(value) else None


def _plain_attributes(module: object, values: dict[str, Any], layout: _Layout) -> dict[str, object]:
    """The attributes of `module` that `static_attributes` records, aliases included,
    without the Variables' sharding."""
    names = (*layout.exact, *layout.floats, *layout.others)
    plain = [(name, values[name]) for name in values if name in names]  # (in their order)
    attrs = _interception().static_attributes(plain)
    for alias, attribute in (layout.aliases or {}).items():
        if attribute in attrs:
            attrs.setdefault(alias, attrs[attribute])
    return attrs


def sharding_attributes(module: object) -> dict[str, tuple[str | None, ...]]:
    """The `sharding` metadata of a module's own Variables as `<name>_sharding` attributes,
    so MoX documents (and their files) keep it: `kernel_sharding=('embed', 'mlp')`. A
    dimension with several logical names is written as one string, `'batch+seq'`."""
    return _sharding_attributes([(k, v) for k, v in vars(module).items() if not k.startswith("_")])


_AXES_KEYS = ("out_sharding", "sharding", "sharding_names")


def _sharding_attributes(items: list[tuple[str, object]]) -> dict[str, tuple[str | None, ...]]:
    found = {}
    for key, value in items:
        if isinstance(value, Variable):
            metadata = value.metadata  # `out_sharding` (Flax 0.12), or an older key
            axes = None
            for axes_key in _AXES_KEYS:
                axes = metadata.get(axes_key)
                if axes is not None:
                    break
            if isinstance(axes, str):
                found[key] = (axes,)
            elif isinstance(axes, tuple | list):  # (a PartitionSpec is a tuple)
                found[key] = tuple(axes)
    return {
        f"{key}_sharding": tuple(
            e if e is None or isinstance(e, str) else "+".join(e) for e in found[key]
        )
        for key in sorted(found)
    }
