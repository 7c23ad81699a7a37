"""`Object`: the base of NNX-style mutable graph nodes, with tracked containers.

An Object is an ordinary Python object whose attributes are its children: Variables,
other Objects, `List`s and `Dict`s of them, and static values. Every attribute change
tells the graph machinery that this node changed, so flattening an unchanged model is a
cache hit and a change expires only the cached flattenings that contain the node.
`bryo_nnx.Module` and `bryo_rngs.Rngs` build on it.

Change attributes by assignment and deletion (and `List`/`Dict` by their methods): writes
through `vars(node)` or `object.__setattr__` are not seen; call
`bryo_graph.structure_changed(node)` after them.

Objects are also JAX pytrees, as Flax NNX 0.12's `Pytree`s are ("tree mode"): the data
attributes (arrays, Variables, graph nodes, `data(...)`) are the children, the static
ones ride in the treedef (see `_fields`), so `jax.jit(f)(module, x)`, `jax.grad` and
`jax.tree.map` take modules directly. Each Object caches its treedef node until one of
its attributes changes, and its flattening with it (`_Flattening`): JAX reads that
through `operator.attrgetter`, so flattening an unchanged model under a plain `jax.jit`
runs no Python code per Object, `List` or `Dict`. `class Foo(Object, pytree=False)` opts
out: such an Object is a graph node only, and plain lists and dicts assigned to it become
tracked `List`/`Dict`s.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Hashable, Iterable
from typing import Any, ClassVar, Self

from jax.tree_util import DictKey, GetAttrKey, SequenceKey, register_pytree_with_keys

from bryo_pytree import Key, safe_equal

from ._compat import current_trace
from ._errors import MUTATION_FIX, TraceContextError
from ._fields import ATOMIC as _ATOMIC
from ._fields import check_static, class_statuses, data_types, is_data, unmark
from ._nodes import Children, NodeType, dict_flatten
from ._repr import ReprBlock, render
from ._tracking import FLATTENED, TREEDEF, WATCHES, changed_in, write_count

# Attributes an Object keeps for itself, never children.
_PRIVATE_PREFIX = "_object__"
STATUSES = "_object__statuses"  # {name: is_data} set by `data(...)` / `static(...)`
_TREEDEF = TREEDEF  # the cached pytree node data (an `ObjectTreeDef`); changes drop it
_FLATTENED = FLATTENED  # the cached pytree flattening (`_Flattening`); changes drop it
_FLAT = "_object__flat"  # the cached flattening of a graph this node is the root of
# What `merge` knows of the graph it just built, for the first flattening of this root to
# use instead of walking the graph (see `bryo_graph._graph.flat_graph`)
MERGED = "_object__merged"
_ACYCLIC = "_object__acyclic"  # the cached proof that tree mode meets no cycle (`_cycles`)
# The JAX trace the node was made in (`current_trace()`), recorded by construction,
# unflattening, `merge`, copying and unpickling: a write from inside another trace raises
# `TraceContextError` (Flax's TraceState check). Dropped by copies, which record their own.
OWNER = "_object__trace"
# Bookkeeping a List or Dict drops when copied or pickled (an Object: `_object__transient`)
_CONTAINER_TRANSIENT = frozenset({_TREEDEF, _FLATTENED, _FLAT, MERGED, _ACYCLIC, WATCHES, OWNER})


class ObjectTreeDef:
    """An Object's (or `List`'s, `Dict`'s) pytree node data: which keys are children and
    the static values, compared by value; cached on the node until it changes."""

    __slots__ = (
        "_hash",
        "data_keys",
        "jax_keys",
        "sorted_keys",
        "static_keys",
        "static_set",
        "static_values",
        "statuses",
    )

    def __init__(
        self,
        data_keys: tuple,
        jax_keys: tuple,
        static_keys: tuple,
        static_values: tuple,
        statuses: tuple = (),
    ) -> None:
        self.data_keys = data_keys
        self.jax_keys = jax_keys
        self.static_keys = static_keys
        self.static_values = static_values
        self.statuses = statuses
        self.static_set = frozenset(static_keys)
        self.sorted_keys = tuple(sorted((*data_keys, *static_keys)))
        self._hash = hash((data_keys, static_keys, statuses))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            type(other) is ObjectTreeDef
            and self._hash == other._hash
            and self.data_keys == other.data_keys
            and self.static_keys == other.static_keys
            and self.statuses == other.statuses
            and all(
                safe_equal(a, b)
                for a, b in zip(self.static_values, other.static_values, strict=True)
            )
        )

    def __repr__(self) -> str:
        pairs = zip(self.static_keys, self.static_values, strict=True)
        static = ", ".join(f"{k}={v!r}" for k, v in pairs)
        return f"data={list(self.data_keys)}, static={{{static}}}"


class Object:
    """A mutable graph node: attributes are children, changes are tracked; a JAX pytree.

    Args (class keywords):
        pytree: whether the class is a JAX pytree (default True); `pytree=False` makes a
            graph-only node (Flax's `nnx.Object`).

    Subclasses may define `_object__restore(self)`: it is called on every instance built
    without `__init__` (by pytree unflatten, `merge`, copy or unpickling), to refresh
    bookkeeping that must not be copied (`Rngs` streams record the JAX trace they belong
    to). Private attributes named `_object__*` are never children; those listed in
    `_object__transient` are dropped when the object is copied or pickled.
    """

    _object__pytree: ClassVar[bool] = True
    _object__class_statuses: ClassVar[dict[str, bool]] = {}
    _object__transient: ClassVar[frozenset[str]] = _CONTAINER_TRANSIENT
    _object__restore: ClassVar[Callable[[Object], None] | None] = None

    def __init_subclass__(cls, *, pytree: bool = True, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "__slots__" in vars(cls) and cls.__slots__:  # type: ignore[attr-defined]  # in vars(cls)
            raise TypeError(
                f"`{cls.__name__}` declares __slots__ {cls.__slots__!r}; Objects keep their "  # type: ignore[attr-defined]  # in vars(cls)
                "children in `__dict__`. Remove `__slots__`."
            )
        cls._object__pytree = pytree
        cls._object__class_statuses = class_statuses(cls)
        if pytree:
            register_object_pytree(cls)
            if "__init__" in vars(cls):
                checks_after_init(cls)

    def __new__(cls, *args: object, **kwargs: object) -> Self:  # (the arguments are __init__'s)
        node = object.__new__(cls)
        vars(node)[OWNER] = current_trace()
        return node

    def __setattr__(self, name: str, value: object) -> None:
        owner = vars(self).get(OWNER)
        if owner is not None and owner is not current_trace():
            check_owner(self, owner, name)
        _assign(self, name, value)

    def __delattr__(self, name: str) -> None:
        namespace = vars(self)
        owner = namespace.get(OWNER)
        if owner is not None and owner is not current_trace():
            check_owner(self, owner, name)
        object.__delattr__(self, name)
        statuses = namespace.get(STATUSES)
        if statuses and name in statuses:
            del statuses[name]
        changed_in(namespace)

    def __getstate__(self) -> dict[str, object]:
        transient = type(self)._object__transient
        return {k: v for k, v in vars(self).items() if k not in transient}

    def __setstate__(self, state: dict[str, object]) -> None:
        vars(self).update(state)
        vars(self)[OWNER] = current_trace()
        restore = type(self)._object__restore
        if restore is not None:
            restore(self)

    def __repr__(self) -> str:
        return render(self)

    def _repr_block(self) -> ReprBlock:
        """How `repr` lays this node out (see `_repr`): its attributes, in the order they
        were set, with the statistics of its Variables."""
        items = [(f"{name}=", value) for name, value in repr_attributes(self)]
        return ReprBlock(f"{type(self).__name__}(", ")", items, counted=True)

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_object

        return render_object(self, path, subtree_renderer)


def _assign(node: Object, name: str, value: object) -> None:
    """`node.name = value`, checked against the data/static rules, and reported."""
    value, status = unmark(value)
    if type(node)._object__pytree:
        _check_assignment(node, name, value, status)
    else:
        value = track(value)
    object.__setattr__(node, name, value)
    changed_in(vars(node))


Pytree = Object
"""Flax NNX 0.12's name for a pytree-registered Object."""


class GraphObject(Object, pytree=False):
    """Flax NNX 0.12's `nnx.Object`: an `Object` that is a graph node only, never a JAX
    pytree, so its attributes are not checked as data or static (a plain list of arrays
    becomes a tracked `List`, as with `pytree=False`). Its subclasses cannot be pytrees.
    """

    def __init_subclass__(cls, *, pytree: bool = False, **kwargs: object) -> None:
        if pytree is not False:
            raise ValueError(
                f"`{cls.__name__}` sets `pytree={pytree!r}`, but it subclasses `nnx.Object`, "
                "the base of graph nodes that are not pytrees (as in Flax). Subclass "
                "`nnx.Pytree` (or `nnx.Module`) for a pytree."
            )
        super().__init_subclass__(pytree=False, **kwargs)


def in_its_trace(node: object) -> bool:
    """Whether `node` (an Object, `List` or `Dict`) may be changed now: it was made in the
    JAX trace running now (or its trace is unknown). `Rngs` streams ask it before drawing.
    """
    owner = vars(node).get(OWNER)
    return owner is None or owner is current_trace() or owner == current_trace()


def check_owner(node: object, owner: object, where: object) -> None:
    """Raise `TraceContextError` unless `owner`, the trace `node` was made in, is the JAX
    trace running now (the slow path of a write whose owner token is not the current one).

    Args:
        node: the Object, `List` or `Dict` written to.
        owner: its recorded trace token.
        where: the attribute name, or the key of a List/Dict item.
    """
    if owner == current_trace():
        return
    kind = type(node).__name__
    target = f"attribute {where!r}" if isinstance(node, Object) else f"item [{where!r}]"
    raise TraceContextError(
        f"Cannot mutate '{kind}' from different trace level (writing its {target}). " + MUTATION_FIX
    )


def checks_after_init(cls: type[Object]) -> None:
    """Make `cls.__init__` check, once the outermost `__init__` returns, that no static
    attribute gained data meanwhile (`self.items = []` then `self.items.append(array)`),
    as Flax NNX 0.12 does; `Object` subclasses get it on their own `__init__`."""
    init = vars(cls)["__init__"]

    @functools.wraps(init)
    def __init__(self: Object, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        if type(self).__init__ is __init__:  # the outermost one
            check_static_attributes(self)

    cls.__init__ = __init__


def check_static_attributes(node: Object) -> None:
    """Raise Flax's "unexpected data" error if a static attribute of `node` holds data."""
    namespace = vars(node)
    treedef = namespace.get(_TREEDEF) or _object_treedef(node, namespace)
    for name, value in zip(treedef.static_keys, treedef.static_values, strict=True):
        if type(value) not in _ATOMIC:
            check_static(node, name, value, explicit=False, declared=True)


def check_pytree(pytree: object, /) -> None:
    """Check every attribute of a Pytree (Object) against the data/static rules now:
    raise the error an assignment would have raised for a static attribute that holds
    data (a plain list that got an array appended since, for instance).

    Args:
        pytree: the Object (a module, `List`, `Dict`, `Rngs`, ...).
    """
    if isinstance(pytree, List | Dict):  # their items are all data
        return
    if not isinstance(pytree, Object):
        raise TypeError(
            f"`check_pytree` takes a Pytree (a module or other `Object`); got "
            f"{type(pytree).__name__}."
        )
    if type(pytree)._object__pytree:  # graph-only Objects have no static attributes
        check_static_attributes(pytree)


def _check_assignment(node: Object, name: str, value: object, status: bool | None) -> None:
    """Record an explicit `data`/`static` status, and refuse data in static attributes."""
    namespace = vars(node)
    if status is not None:
        statuses = namespace.get(STATUSES)
        if statuses is None:
            statuses = namespace[STATUSES] = {}
        statuses[name] = status
        if not status:
            check_static(node, name, value, explicit=True)
        return
    declared = _declared_status(node, namespace, name)
    if declared is None:
        if not is_data(value):
            check_static(node, name, value, explicit=False)
    elif not declared:
        if name not in namespace:  # a class-declared static attribute, first assigned
            check_static(node, name, value, explicit=False, declared=True)
        elif is_data(value):
            raise ValueError(
                f"Cannot assign data value of type '{type(value).__name__}' to static "
                f"attribute '{name}' of Pytree type '{type(node).__name__}'. To override the "
                f"status explicitly wrap the value with nnx.data on assignment: "
                f"`self.{name} = nnx.data(...)`."
            )
        else:
            check_static(node, name, value, explicit=False)


def _declared_status(node: Object, namespace: dict, name: str) -> bool | None:
    statuses = namespace.get(STATUSES)
    if statuses is not None and name in statuses:
        return statuses[name]
    return type(node)._object__class_statuses.get(name)


def track(value: object) -> object:
    """`list`/`dict` become tracked `List`/`Dict`; everything else is kept as is."""
    if type(value) is list:
        return List(value)
    if type(value) is dict:
        return Dict(value)
    return value


# Pytree registration --------------------------------------------------------------------


def _object_treedef(node: Object, namespace: dict) -> ObjectTreeDef:
    """Build (and cache on `node`) the treedef node of an Object."""
    items = [(k, namespace[k]) for k in sorted(namespace) if not k.startswith(_PRIVATE_PREFIX)]
    return _partition(namespace, items, type(node)._object__class_statuses, GetAttrKey)


_UNDECLARED: dict = {}  # a List's or Dict's class statuses: none


def _partition(
    namespace: dict,
    items: Iterable[tuple[Key, object]],
    declared: dict,
    jax_key: Callable[[Any], Any],
) -> ObjectTreeDef:
    """The treedef node (cached in `namespace`) of an Object, List or Dict with these
    `items`: each is data or static by its recorded status, else its `declared` (class)
    status, else its value (`is_data`)."""
    statuses = namespace.get(STATUSES) or _UNDECLARED
    data_keys, static_keys, static_values = [], [], []
    known = data_types()
    for k, value in items:
        status = statuses.get(k)
        if status is None:
            status = declared.get(k)
        if status is None:
            status = known.get(type(value))
            if status is None:
                status = is_data(value)
                known = data_types()
        if status:
            data_keys.append(k)
        else:
            static_keys.append(k)
            static_values.append(value)
    treedef = ObjectTreeDef(
        tuple(data_keys),
        tuple(map(jax_key, data_keys)),
        tuple(static_keys),
        tuple(static_values),
        tuple(sorted(statuses.items(), key=_repr_key)) if statuses else (),
    )
    namespace[_TREEDEF] = treedef
    return treedef


def data_items(node: Object | List | Dict) -> list[tuple[Key, object]]:
    """The pytree children of an Object (of a pytree class), a List or a Dict, with their
    keys, in flattening order."""
    if isinstance(node, Object):
        namespace = vars(node)
        treedef = namespace.get(_TREEDEF) or _object_treedef(node, namespace)
        return [(k, namespace[k]) for k in treedef.data_keys]
    treedef = _list_treedef(node) if isinstance(node, List) else _dict_treedef(node)
    return [(k, node[k]) for k in treedef.data_keys]


Flattened = tuple[tuple, ObjectTreeDef]
"""A node's pytree flattening: its data children in order, and its treedef node."""


class _Flattening:
    """The class attribute `_object__flattened` of `Object`, `List` and `Dict`: a node's
    pytree flattening, made by `make` on first read and stored in the node's `__dict__`,
    where the next reads find it until a reported change drops it (`changed_in`).

    A non-data descriptor, so the stored flattening shadows it: JAX flattens a node with
    `operator.attrgetter(FLATTENED)`, one dict lookup in C and no Python frame (a Python
    flatten function per node was most of a plain `jax.jit` call's cost on a module).
    """

    __slots__ = ("make",)

    def __init__(self, make: Callable[[Any], Flattened]) -> None:
        self.make = make

    def __get__(self, node: object, owner: type | None = None) -> Any:
        if node is None:
            return self
        return self.make(node)


def _flattening(
    treedef_of: Callable[[Any], ObjectTreeDef], child: Callable[[Any, Any], object]
) -> Callable[[Any], Flattened]:
    """What makes a node's flattening: its treedef node (`treedef_of(node)`, cached too)
    and its data children in order (`child(node, key)` each); the flattening is stored on
    the node unless a write was reported meanwhile (another thread's: what was read may be
    half old, half new)."""

    def make(node: Any) -> Flattened:
        writes = write_count()
        treedef = treedef_of(node)
        flattened = (tuple([child(node, k) for k in treedef.data_keys]), treedef)
        if write_count() == writes + 1:
            vars(node)[_FLATTENED] = flattened
        return flattened

    return make


def _attribute(node: Object, name: str) -> object:
    return vars(node)[name]


def _object_treedef_of(node: Object) -> ObjectTreeDef:
    namespace = vars(node)
    return namespace.get(_TREEDEF) or _object_treedef(node, namespace)


_flatten_cached = operator.attrgetter(_FLATTENED)


def _flatten_with_keys(node: Object | List | Dict) -> tuple[list, ObjectTreeDef]:
    children, treedef = _flatten_cached(node)
    return list(zip(treedef.jax_keys, children, strict=True)), treedef


def _object_unflattener(cls: type) -> Callable[[ObjectTreeDef, Iterable], Object]:
    restore = cls._object__restore

    def unflatten(treedef: ObjectTreeDef, children: Iterable) -> Object:
        node = object.__new__(cls)
        namespace = vars(node)
        namespace[OWNER] = current_trace()
        children = tuple(children)
        namespace.update(zip(treedef.data_keys, children, strict=True))
        namespace.update(zip(treedef.static_keys, treedef.static_values, strict=True))
        if treedef.statuses:
            namespace[STATUSES] = dict(treedef.statuses)
        namespace[_TREEDEF] = treedef
        namespace[_FLATTENED] = (children, treedef)
        if restore is not None:
            restore(node)
        return node

    unflatten.__qualname__ = f"unflatten_{cls.__name__}"
    return unflatten


def register_object_pytree(cls: type) -> None:
    """Register an `Object` subclass with JAX (done for every subclass with `pytree=True`)."""
    register_pytree_with_keys(
        cls, _flatten_with_keys, _object_unflattener(cls), flatten_func=_flatten_cached
    )


# Tracked containers ---------------------------------------------------------------------


class List(list):
    """A list that reports structural changes (items set, added or removed); a pytree
    whose data items are its children. Items may come marked `data(...)`/`static(...)`:
    the mark sticks to the position."""

    def __init__(self, items: Iterable[object] = ()) -> None:
        vars(self)[OWNER] = current_trace()
        super().__init__(_item(self, i, item) for i, item in enumerate(items))

    def __repr__(self) -> str:
        return render(self)

    def _repr_block(self) -> ReprBlock:
        return ReprBlock(f"{type(self).__name__}([", "])", [("", item) for item in self])


class Dict(dict):
    """A dict that reports structural changes (items set or removed); a pytree whose
    data items are its children. Its string keys also read and write as attributes
    (`layers.encoder`), as on Flax's `nnx.Dict`."""

    def __init__(self, items: object = (), /, **kwargs: object) -> None:
        vars(self)[OWNER] = current_trace()
        super().__init__(items, **kwargs)  # type: ignore[call-overload]  # list's or dict's
        for key, value in self.items():
            dict.__setitem__(self, key, _item(self, key, value))

    def __repr__(self) -> str:
        return render(self)

    def _repr_block(self) -> ReprBlock:
        items = [(f"{key!r}: ", value) for key, value in self.items()]
        return ReprBlock(f"{type(self).__name__}({{", "})", items)

    def __getattr__(self, name: str) -> object:
        if not name.startswith("__") and name in self:
            return self[name]
        raise AttributeError(f"this Dict has no key {name!r}; its keys are {list(self)}")

    def __setattr__(self, name: str, value: object) -> None:
        if name.startswith(_PRIVATE_PREFIX) or name.startswith("__"):
            object.__setattr__(self, name, value)
        else:
            self[name] = value

    def __delattr__(self, name: str) -> None:
        if name in self:
            del self[name]
        else:
            object.__delattr__(self, name)


def _changed(node: object) -> None:
    changed_in(vars(node))


def _item(node: list | dict, key: object, value: object) -> object:
    """`value` to store at `key` of a List or Dict: a `data`/`static` mark taken off and
    recorded for `key`, a plain list or dict tracked; refused from another JAX trace."""
    namespace = vars(node)
    owner = namespace.get(OWNER)
    if owner is not None and owner is not current_trace():
        check_owner(node, owner, key)
    value, status = unmark(value)
    if status is not None:
        statuses = namespace.get(STATUSES)
        if statuses is None:
            statuses = namespace[STATUSES] = {}
        statuses[key] = status
        if not status:
            check_static(node, f"[{key!r}]", value, explicit=True)
    return track(value)


def _tracked(cls: type, method_name: str) -> None:
    method = getattr(cls.__mro__[1], method_name)

    def changed(self: object, *args: object, **kwargs: object) -> object:
        owner = vars(self).get(OWNER)
        if owner is not None and owner is not current_trace():
            check_owner(self, owner, args[0] if args else method_name)
        result = method(self, *args, **kwargs)
        _changed(self)
        return result

    changed.__name__ = method_name
    setattr(cls, method_name, changed)


for _name in (
    "__delitem__",
    "__iadd__",
    "__imul__",
    "clear",
    "pop",
    "remove",
    "reverse",
    "sort",
):
    _tracked(List, _name)
for _name in ("__delitem__", "clear", "pop", "popitem"):
    _tracked(Dict, _name)


def _list_setitem(self: List, index: object, value: object) -> None:
    if isinstance(index, slice):
        list.__setitem__(self, index, [track(unmark(v)[0]) for v in value])  # type: ignore[attr-defined]  # a slice takes an iterable
    else:
        position = operator.index(index) % len(self) if len(self) else index  # type: ignore[arg-type]  # an int, else index() raises
        list.__setitem__(self, index, _item(self, position, value))  # type: ignore[call-overload]  # an int, else index() raised
    _changed(self)


def _list_append(self: List, value: object) -> None:
    list.append(self, _item(self, len(self), value))
    _changed(self)


def _list_insert(self: List, index: object, value: object) -> None:
    position = min(max(operator.index(index) % (len(self) + 1), 0), len(self))  # type: ignore[arg-type]  # an int, else index() raises
    list.insert(self, position, _item(self, position, value))
    _changed(self)


def _list_extend(self: List, values: Iterable[object]) -> None:
    for value in values:
        list.append(self, _item(self, len(self), value))
    _changed(self)


def _dict_setitem(self: Dict, key: object, value: object) -> None:
    dict.__setitem__(self, key, _item(self, key, value))
    _changed(self)


def _dict_update(self: Dict, *args: object, **kwargs: object) -> None:
    for key, value in dict(*args, **kwargs).items():
        dict.__setitem__(self, key, _item(self, key, value))
    _changed(self)


def _dict_setdefault(self: Dict, key: object, default: object = None) -> object:
    if key not in self:
        _dict_setitem(self, key, default)
    return self[key]


List.__setitem__ = _list_setitem
List.append = _list_append
List.insert = _list_insert
List.extend = _list_extend
Dict.__setitem__ = _dict_setitem
Dict.update = _dict_update  # type: ignore[method-assign]  # the tracking override
Dict.setdefault = _dict_setdefault  # type: ignore[method-assign]  # the tracking override


def _list_treedef(node: List) -> ObjectTreeDef:
    treedef = vars(node).get(_TREEDEF)
    return treedef or _partition(vars(node), enumerate(node), _UNDECLARED, SequenceKey)


def _dict_treedef(node: Dict) -> ObjectTreeDef:
    namespace = vars(node)
    return namespace.get(_TREEDEF) or _partition(
        namespace, dict_flatten(node)[0], _UNDECLARED, DictKey
    )


def _unflatten_list(treedef: ObjectTreeDef, children: Iterable) -> List:
    children = tuple(children)
    items = dict(zip(treedef.data_keys, children, strict=True))
    items.update(zip(treedef.static_keys, treedef.static_values, strict=True))
    node = List.__new__(List)
    list.extend(node, [items[i] for i in range(len(items))])
    _restore_container(node, treedef, children)
    return node


def _unflatten_dict(treedef: ObjectTreeDef, children: Iterable) -> Dict:
    children = tuple(children)
    node = Dict.__new__(Dict)
    dict.update(node, zip(treedef.data_keys, children, strict=True))
    dict.update(node, zip(treedef.static_keys, treedef.static_values, strict=True))
    _restore_container(node, treedef, children)
    return node


def _restore_container(node: list | dict, treedef: ObjectTreeDef, children: tuple) -> None:
    namespace = vars(node)
    namespace[OWNER] = current_trace()
    namespace[_TREEDEF] = treedef
    namespace[_FLATTENED] = (children, treedef)
    if treedef.statuses:
        namespace[STATUSES] = dict(treedef.statuses)


def _repr_key(item: tuple[object, bool]) -> str:
    return repr(item[0])  # Dict keys of mixed types sort too


def _container_getstate(node: object) -> dict[str, object]:
    return {k: v for k, v in vars(node).items() if k not in _CONTAINER_TRANSIENT}


List.__getstate__ = _container_getstate  # type: ignore[method-assign, assignment]  # pickle as plain containers
Dict.__getstate__ = _container_getstate  # type: ignore[method-assign, assignment]  # pickle as plain containers
setattr(Object, _FLATTENED, _Flattening(_flattening(_object_treedef_of, _attribute)))
setattr(List, _FLATTENED, _Flattening(_flattening(_list_treedef, operator.getitem)))
setattr(Dict, _FLATTENED, _Flattening(_flattening(_dict_treedef, operator.getitem)))
register_pytree_with_keys(List, _flatten_with_keys, _unflatten_list, _flatten_cached)
register_pytree_with_keys(Dict, _flatten_with_keys, _unflatten_dict, _flatten_cached)
register_object_pytree(Object)


# Graph node types -------------------------------------------------------------------------


def object_flatten(node: Object) -> tuple[Children, Hashable]:
    """An Object's children: its attributes sorted by name, private bookkeeping left out.
    The aux is the explicit `data`/`static` statuses (see `restore_statuses`)."""
    namespace = vars(node)
    if type(node)._object__pytree:
        treedef = namespace.get(_TREEDEF) or _object_treedef(node, namespace)
        return [(k, namespace[k]) for k in treedef.sorted_keys], treedef.statuses or None
    return object_attributes(node), None


def object_attributes(node: Object) -> list[tuple[str, object]]:
    """An Object's attributes, sorted by name, without its private `_object__*` bookkeeping
    (what a repr shows)."""
    items = [(k, v) for k, v in vars(node).items() if not k.startswith(_PRIVATE_PREFIX)]
    items.sort(key=_first)
    return items


def repr_attributes(node: Object) -> list[tuple[str, object]]:
    """What a repr shows of an Object: its attributes in the order they were set, without
    bookkeeping and without private (`_name`) static ones, as Flax NNX shows them."""
    static = object_static_keys(node)
    return [(k, v) for k, v in vars(node).items() if _shown(k, v, static)]


def _shown(name: str, value: object, static: frozenset[str] | None) -> bool:
    if not name.startswith("_"):
        return True
    if name.startswith(_PRIVATE_PREFIX):
        return False
    return name not in static if static is not None else is_data(value)


def _first(item: tuple[str, object]) -> str:
    return item[0]


def object_static_keys(node: Object) -> frozenset[str] | None:
    """The names of an Object's static attributes (kept in the GraphDef as they are);
    None for a `pytree=False` Object, which does not tell data from static."""
    if not type(node)._object__pytree:
        return None
    namespace = vars(node)
    treedef = namespace.get(_TREEDEF) or _object_treedef(node, namespace)
    return treedef.static_set


def restore_statuses(node: object, aux: Hashable) -> None:
    """Give a node built from a GraphDef the explicit `data`/`static` statuses its
    original had (the aux of its flattening: sorted `(key, is_data)` pairs, or None).
    Without them, an attribute assigned `data((variable,))` would be static on the copy
    (a tuple is not data by itself), its Variables frozen into the copy's GraphDef (Flax
    keeps its `_pytree__nodes` in the GraphDef for the same reason)."""
    if aux:
        vars(node)[STATUSES] = dict(aux)  # type: ignore[arg-type]  # sorted (key, bool) pairs


def set_statuses(node: object, aux: Hashable) -> None:
    """Make a live node's explicit `data`/`static` statuses those of `aux` (what
    `restore_statuses` gives a new node), when they differ: a graph-mode update writing
    back `self.d = data((variable,))`, assigned inside the transform, must not find `d`
    static."""
    namespace = vars(node)
    statuses = dict(aux) if aux else None  # type: ignore[call-overload]  # sorted (key, bool) pairs
    if (namespace.get(STATUSES) or None) == statuses:
        return
    if statuses is None:
        del namespace[STATUSES]
    else:
        namespace[STATUSES] = statuses
    changed_in(namespace)  # the statuses decide the cached treedef


def object_create(cls: type, aux: Hashable) -> Object:
    """An empty instance of `cls`, without calling its `__init__` (its `_object__restore`
    hook runs), with the `data`/`static` statuses of `aux`."""
    node = object.__new__(cls)
    vars(node)[OWNER] = current_trace()
    restore_statuses(node, aux)
    restore = getattr(cls, "_object__restore", None)
    if restore is not None:
        restore(node)
    return node


def object_init_key(node: object, key: Key, child: object) -> None:
    """Set one attribute of a node being built, which nobody else sees yet."""
    vars(node)[key] = child  # type: ignore[index]  # an Object's keys are attribute names


def object_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    """Set all attributes of a node being built; its children come already tracked."""
    vars(node).update(items)  # type: ignore[arg-type]  # an Object's keys are attribute names


def object_set_key(node: object, key: Key, child: object) -> None:
    """Set one attribute of a live node: a structural change. (Graph operations such as
    `update` may write from inside another trace than the node's, as they write Variables:
    bryo's transforms and tracers put traced state in and take it out again.)"""
    if type(node).__setattr__ is Object.__setattr__:  # (a subclass's own override runs)
        _assign(node, key, child)  # type: ignore[arg-type]  # keys are names
    else:
        setattr(node, key, child)  # type: ignore[arg-type]  # keys are names


def object_pop_key(node: object, key: Key) -> None:
    """Remove one attribute of a live node."""
    delattr(node, key)  # type: ignore[arg-type]  # keys are names


def object_node_type(cls: type[Object]) -> NodeType:
    """The NodeType of an `Object` subclass (what `bryo_nnx.Module` registers)."""
    return NodeType(
        cls,
        flatten=object_flatten,
        create=object_create,
        init_key=object_init_key,
        init_items=object_init_items,
        set_key=object_set_key,
        pop_key=object_pop_key,
        set_aux=set_statuses,
        tracks_structure=True,
        static_keys=object_static_keys,
    )


def _list_flatten(node: List) -> tuple[Children, Hashable]:
    return enumerate(node), _list_treedef(node).statuses or None


def _dict_flatten(node: Dict) -> tuple[Children, Hashable]:
    return dict_flatten(node)[0], _dict_treedef(node).statuses or None


def _tracked_create(cls: type, aux: Hashable) -> object:
    node = cls.__new__(cls)  # type: ignore[call-overload]  # List/Dict: list/dict.__new__
    vars(node)[OWNER] = current_trace()
    restore_statuses(node, aux)
    return node


def _list_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    list.extend(node, [child for _, child in items])  # type: ignore[arg-type]  # a List


def _dict_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    dict.update(node, items)  # type: ignore[arg-type]  # a Dict


def _list_init_key(node: object, key: Key, child: object) -> None:
    list.append(node, track(child))  # type: ignore[arg-type]  # a List; keys come in order


def _dict_init_key(node: object, key: Key, child: object) -> None:
    dict.__setitem__(node, key, track(child))  # type: ignore[arg-type]  # a Dict


def _setitem(node: object, key: Key, child: object) -> None:
    node[key] = child  # type: ignore[index]  # a List/Dict; it reports it


def _delitem(node: object, key: Key) -> None:
    del node[key]  # type: ignore[attr-defined]  # a List/Dict; it reports it


def tracked_container_node_types() -> tuple[NodeType, ...]:
    """NodeTypes of the tracked `List` and `Dict`."""
    return (
        NodeType(
            List,
            flatten=_list_flatten,
            create=_tracked_create,
            init_key=_list_init_key,
            init_items=_list_init_items,
            set_key=_setitem,
            set_aux=set_statuses,
            tracks_structure=True,
            static_keys=_list_static_keys,
        ),
        NodeType(
            Dict,
            flatten=_dict_flatten,
            create=_tracked_create,
            init_key=_dict_init_key,
            init_items=_dict_init_items,
            set_key=_setitem,
            pop_key=_delitem,
            set_aux=set_statuses,
            tracks_structure=True,
            static_keys=_dict_static_keys,
        ),
    )


def _list_static_keys(node: object) -> frozenset:
    return _list_treedef(node).static_set  # type: ignore[arg-type]  # a List


def _dict_static_keys(node: object) -> frozenset:
    return _dict_treedef(node).static_set  # type: ignore[arg-type]  # a Dict
