"""How `equinox.Module`s, and the containers and stateful layers inside them, are graph nodes.

An Equinox module is an immutable pytree: its dataclass fields are its children, named by
field, and a rebuilt module is made the way Equinox's own unflatten makes one (a bare
`object.__new__` whose fields are set directly, no `__init__`, converters or
`__check_init__`). Static fields (`eqx.field(static=True)`) and any extra instance
attributes (the `__name__`/`__doc__` of a wrapped function) stay in the GraphDef. Lists,
dicts and tuples held by a module are part of its immutable pytree too: they flatten
through frozen views, so that `update` never writes into them behind the module's back and
so that core-graph may cache the flattening of a whole Equinox model. Any other jax pytree
a module holds (a `jax.tree_util.Partial`, a registered dataclass) that no bryo backend
knows flattens through a `PytreeView`, one level at a time as jax sees it, so its arrays
are in the State exactly as `eqx.partition` would find them.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import cast

import equinox as eqx
import jax.tree_util as jtu

from bryo_graph import BatchStat, NodeType, Param, is_graph_node, logical_axes
from bryo_pytree import Key, hashable, key_to_plain, unwrap_hashable

Children = Iterable[tuple[Key, object]]


_kept = hashable
_unwrap = unwrap_hashable


# Modules ------------------------------------------------------------------------------


class _Layout:
    """A module class's fields: dynamic ones are children, static ones go in the GraphDef."""

    __slots__ = ("direct", "dynamic", "dynamic_values", "names", "static", "static_values")

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        self.dynamic = tuple(f.name for f in fields if not f.metadata.get("static", False))
        self.static = tuple(f.name for f in fields if f.metadata.get("static", False))
        self.names = frozenset(f.name for f in fields)
        self.dynamic_values = _values_getter(self.dynamic)
        self.static_values = _values_getter(self.static)
        # Fields are written straight into `__dict__` unless the class puts a data
        # descriptor on one of them; then `object.__setattr__` goes through it, as
        # Equinox's own unflatten does.
        self.direct = not any(
            hasattr(type(inspect.getattr_static(cls, name, None)), "__set__") for name in self.names
        )


def _values_getter(names: tuple[str, ...]) -> Callable[[dict], tuple]:
    """`attrs -> tuple of attrs[name] for names`, at C speed; KeyError if one is missing."""
    if not names:
        return lambda attrs: ()
    if len(names) == 1:
        name = names[0]
        return lambda attrs: (attrs[name],)
    return operator.itemgetter(*names)


_layouts: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    try:
        return _layouts[cls]
    except KeyError:
        layout = _layouts[cls] = _Layout(cls)
        return layout


# Equinox modules override `__getattribute__` in Python, so `__dict__` is read with
# `object.__getattribute__` below.
def _module_flatten(module: object) -> tuple[Children, Hashable]:
    layout = _layouts.get(type(module)) or _layout(type(module))
    attrs = object.__getattribute__(module, "__dict__")
    if len(attrs) != len(layout.names):  # fields never set, or extra attributes
        return _unusual_flatten(module, layout)
    try:
        values = layout.dynamic_values(attrs)
        statics = layout.static_values(attrs)
    except KeyError:  # as many attributes as fields, but not the fields
        return _unusual_flatten(module, layout)
    children = [(name, _frozen(value)) for name, value in zip(layout.dynamic, values, strict=True)]
    try:
        hash(statics)
    except TypeError:
        return _unusual_flatten(module, layout)
    return children, (statics, None)


def _unusual_flatten(module: object, layout: _Layout) -> tuple[Children, Hashable]:
    """Fields never set, unhashable static values, or extra instance attributes.

    The aux then holds `(name, value)` pairs of every static field and extra attribute
    that is set, unhashable values kept by identity.
    """
    attrs = object.__getattribute__(module, "__dict__")
    children = [(n, _frozen(attrs[n])) for n in layout.dynamic if n in attrs]
    statics = [(n, _kept(attrs[n])) for n in layout.static if n in attrs]
    extras = sorted((k, _kept(v)) for k, v in attrs.items() if k not in layout.names)
    return children, (None, tuple(statics + extras))


def _module_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> object:
    statics, unusual = aux  # type: ignore[misc]  # the aux _module_flatten returns: a (statics, unusual) pair
    layout = _layout(cls)
    module = object.__new__(cls)
    if unusual is None and layout.direct:
        attrs = object.__getattribute__(module, "__dict__")
        attrs.update(children)
        attrs.update(zip(layout.static, statics, strict=True))
        return module
    pairs = children + list(
        zip(layout.static, statics, strict=True) if unusual is None else unusual
    )
    for name, value in pairs:
        if layout.direct or name not in layout.names:  # extras live in `__dict__` as-is
            object.__getattribute__(module, "__dict__")[name] = _unwrap(value)
        else:
            # a module's keys are its attribute names (`_module_flatten`)
            object.__setattr__(module, cast(str, name), _unwrap(value))
    return module


# Containers inside modules ------------------------------------------------------------


class _Frozen:
    """A view of a list, dict or tuple inside an Equinox module: an immutable graph node."""

    __slots__ = ("__weakref__", "value")

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class FrozenList(_Frozen):
    """A list held by an Equinox module; merges back into a list."""

    __slots__ = ()


class FrozenTuple(_Frozen):
    """A tuple held by an Equinox module; merges back into a tuple."""

    __slots__ = ()


class FrozenDict(_Frozen):
    """A dict held by an Equinox module; merges back into a dict (keys sorted, as jax does)."""

    __slots__ = ()


class PytreeView(_Frozen):
    """Any other jax pytree node held by an Equinox module (a `jax.tree_util.Partial`, a
    registered dataclass), seen one level deep the way jax flattens it; merges back into
    its own type through its treedef.
    """

    __slots__ = ()


_PLAIN, _MAYBE_PYTREE = object(), object()
# type -> _PLAIN (the value is its own child), a view class, or _MAYBE_PYTREE (a jax
# pytree node: a view unless a bryo backend knows the type as a graph node).
_child_kinds: dict[type, object] = {
    list: FrozenList,
    tuple: FrozenTuple,
    dict: FrozenDict,
    type(None): _PLAIN,
}


def _frozen(value: object) -> object:
    """The graph child for `value`, a field or item of a module: a view for containers
    and for jax pytrees that no bryo backend knows; `value` itself otherwise."""
    cls = type(value)
    kind = _child_kinds.get(cls)
    if kind is _PLAIN:
        return value
    if kind is None:
        kind = _child_kinds[cls] = _child_kind(value)
        if kind is _PLAIN:
            return value
    if kind is _MAYBE_PYTREE:
        return value if is_graph_node(value) else PytreeView(value)
    return kind(value)  # type: ignore[operator]  # the other kinds are the view classes


def _child_kind(value: object) -> object:
    if isinstance(value, eqx.Module | eqx.nn.State):  # nodes of this very backend
        return _PLAIN
    structure = jtu.tree_structure(value)
    is_leaf = structure.num_nodes == 1 and structure.num_leaves == 1
    return _PLAIN if is_leaf else _MAYBE_PYTREE


def _pytree_flatten(view: _Frozen) -> tuple[Children, Hashable]:
    value = view.value
    pairs, treedef = jtu.tree_flatten_with_path(value, is_leaf=lambda x: x is not value)
    children = [
        (_plain_key(keypath[0], i), _frozen(child)) for i, (keypath, child) in enumerate(pairs)
    ]
    return children, _kept(treedef)


def _plain_key(key: object, index: int) -> Key:
    try:
        return key_to_plain(key)
    except TypeError:  # a key type of the pytree's own: its position names it
        return index


def _pytree_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> object:
    return _unwrap(aux).unflatten([child for _, child in children])  # type: ignore[attr-defined]  # the aux _pytree_flatten kept: a jax treedef


def _pytree_leaf_metadata(view: _Frozen) -> dict[str, object] | None:
    """A pytree that names its own axes (a Haliax or `bryo.hax` NamedArray) gives its
    array's Param those names as sharding metadata, so that `WithAxis('Layers')` and
    `get_partition_spec` see them in the State."""
    axes = logical_axes(view.value)
    return None if axes is None else {"out_sharding": axes}


def _sequence_flatten(view: _Frozen) -> tuple[Children, Hashable]:
    return [(i, _frozen(item)) for i, item in enumerate(view.value)], None  # type: ignore[arg-type]  # a sequence view wraps a list or tuple


def _dict_flatten(view: _Frozen) -> tuple[Children, Hashable]:
    items = view.value.items()  # type: ignore[attr-defined]  # a dict view wraps a dict
    try:
        items = sorted(items)
    except TypeError:  # keys of mixed types keep insertion order
        items = list(items)
    return [(key, _frozen(item)) for key, item in items], None


def _list_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> list:
    return [child for _, child in children]


def _tuple_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> tuple:
    return tuple([child for _, child in children])


def _dict_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> dict:
    return dict(children)


# Stateful layers ----------------------------------------------------------------------

_STALE_STATE = (
    "this `eqx.nn.State` was already used: `state.set(...)` (or a layer's call) returned a "
    "new State and invalidated this one. Split the State that the last call returned."
)

# The values each State that bryo built (`merge`, and the copies a transform hands the
# function it traces) was built with, held weakly. Equinox empties a State when a layer's
# call or `state.set` uses it; a transform still reads its inputs back after the call (to
# find what the function changed), and such a State reads as built: nothing was written
# into it, its values moved on to the State the call returned.
_built_states: weakref.WeakKeyDictionary[eqx.nn.State, dict] = weakref.WeakKeyDictionary()


def _state_flatten(state: eqx.nn.State) -> tuple[Children, Hashable]:
    values = state._state
    if not isinstance(values, dict):
        values = _built_states.get(state)
        if values is None:
            raise ValueError(_STALE_STATE)
    return [(marker, _frozen(value)) for marker, value in values.items()], None


def _state_unchanged(state: eqx.nn.State) -> bool:
    """Whether `_state_flatten(state)` still gives what it gave: Equinox empties a State
    that `state.set` (or a layer's call) used, behind bryo's back, and a cached flattening
    of it must not hand out its old values then."""
    return isinstance(state._state, dict) or state in _built_states


def _state_unflatten(cls: type, aux: Hashable, children: list[tuple[Key, object]]) -> object:
    state = object.__new__(cls)
    state._state = values = dict(children)
    _built_states[state] = values
    return state


def node_types() -> Sequence[NodeType]:
    """The NodeTypes of this backend: modules, their containers, and stateful layers.

    Array leaves of modules are `Param`s; those of a `StateIndex` (its initial state) and
    of an `eqx.nn.State` are `BatchStat`s.
    """
    module = {"flatten": _module_flatten, "unflatten": _module_unflatten}
    return (
        NodeType(eqx.Module, leaf_type=Param, **module),
        NodeType(eqx.nn.StateIndex, leaf_type=BatchStat, **module),
        NodeType(
            eqx.nn.State,
            flatten=_state_flatten,
            unflatten=_state_unflatten,
            leaf_type=BatchStat,
            unchanged=_state_unchanged,
        ),
        NodeType(FrozenList, flatten=_sequence_flatten, unflatten=_list_unflatten),
        NodeType(FrozenTuple, flatten=_sequence_flatten, unflatten=_tuple_unflatten),
        NodeType(FrozenDict, flatten=_dict_flatten, unflatten=_dict_unflatten),
        NodeType(
            PytreeView,
            flatten=_pytree_flatten,
            unflatten=_pytree_unflatten,
            leaf_metadata=_pytree_leaf_metadata,
        ),
    )
