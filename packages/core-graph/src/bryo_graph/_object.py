"""`Object`: the base of NNX-style mutable graph nodes, with tracked containers.

An Object is an ordinary Python object whose attributes are its children: Variables,
other Objects, lists and dicts of them, and static values. Every attribute change tells
the graph machinery its structure changed, so flattening an unchanged model is a cache
hit. Lists and dicts assigned to an Object become `List` and `Dict`, which report their
own changes the same way. `bryo_nnx.Module` and `bryo_rngs.Rngs` build on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from bryo_pytree import Key

from ._nodes import Children, NodeType, dict_flatten, structure_changed

# Attributes an Object keeps for itself, never children.
_PRIVATE_PREFIX = "_object__"


class Object:
    """A mutable graph node: attributes are children, changes are tracked."""

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, track(value))
        structure_changed()

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        structure_changed()


def track(value: object) -> object:
    """`list`/`dict` become tracked `List`/`Dict`; everything else is kept as is."""
    cls = type(value)
    if cls is list:
        return List(value)
    if cls is dict:
        return Dict(value)
    return value


class List(list):
    """A list that reports structural changes (items set, added or removed)."""

    def __init__(self, items: Iterable[object] = ()) -> None:
        super().__init__(track(item) for item in items)


class Dict(dict):
    """A dict that reports structural changes (items set or removed)."""

    def __init__(self, items: object = ()) -> None:
        super().__init__(items)
        for key, value in self.items():
            dict.__setitem__(self, key, track(value))


def _tracked(cls: type, method_name: str) -> None:
    method = getattr(cls.__mro__[1], method_name)

    def changed(self: object, *args: object, **kwargs: object) -> object:
        result = method(self, *args, **kwargs)
        structure_changed()
        return result

    changed.__name__ = method_name
    setattr(cls, method_name, changed)


for _name in (
    "__delitem__",
    "__iadd__",
    "__imul__",
    "clear",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
):
    _tracked(List, _name)
for _name in ("__delitem__", "clear", "pop", "popitem"):
    _tracked(Dict, _name)


def _list_setitem(self: List, index: object, value: object) -> None:
    list.__setitem__(self, index, track(value))  # type: ignore[arg-type]
    structure_changed()


def _list_append(self: List, value: object) -> None:
    list.append(self, track(value))
    structure_changed()


def _list_extend(self: List, values: Iterable[object]) -> None:
    list.extend(self, (track(v) for v in values))
    structure_changed()


def _dict_setitem(self: Dict, key: object, value: object) -> None:
    dict.__setitem__(self, key, track(value))
    structure_changed()


def _dict_update(self: Dict, *args: object, **kwargs: object) -> None:
    for key, value in dict(*args, **kwargs).items():
        dict.__setitem__(self, key, track(value))
    structure_changed()


def _dict_setdefault(self: Dict, key: object, default: object = None) -> object:
    if key not in self:
        _dict_setitem(self, key, default)
    return self[key]


List.__setitem__ = _list_setitem  # type: ignore[method-assign]
List.append = _list_append  # type: ignore[method-assign]
List.extend = _list_extend  # type: ignore[method-assign]
Dict.__setitem__ = _dict_setitem  # type: ignore[method-assign]
Dict.update = _dict_update  # type: ignore[method-assign]
Dict.setdefault = _dict_setdefault  # type: ignore[method-assign]


def object_flatten(node: Object) -> tuple[Children, Hashable]:
    """An Object's children: its attributes sorted by name, private bookkeeping left out."""
    items = [(k, v) for k, v in vars(node).items() if not k.startswith(_PRIVATE_PREFIX)]
    items.sort(key=_first)
    return items, None


def _first(item: tuple[str, object]) -> str:
    return item[0]


def object_create(cls: type, aux: Hashable) -> Object:
    """An empty instance of `cls`, without calling its `__init__`."""
    return object.__new__(cls)


def object_init_key(node: object, key: Key, child: object) -> None:
    """Set one attribute of a node being built, which nobody else sees yet."""
    object.__setattr__(node, key, track(child))  # type: ignore[arg-type]


def object_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    """Set all attributes of a node being built; its children come already tracked."""
    vars(node).update(items)


def object_set_key(node: object, key: Key, child: object) -> None:
    """Set one attribute of a live node: a structural change."""
    setattr(node, key, child)  # type: ignore[arg-type]


def object_pop_key(node: object, key: Key) -> None:
    """Remove one attribute of a live node."""
    delattr(node, key)  # type: ignore[arg-type]


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
        tracks_structure=True,
    )


def _list_flatten(node: list) -> tuple[Children, Hashable]:
    return enumerate(node), None


def _tracked_create(cls: type, aux: Hashable) -> object:
    return cls.__new__(cls)


def _list_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    list.extend(node, [child for _, child in items])  # type: ignore[arg-type]


def _dict_init_items(node: object, items: list[tuple[Key, object]]) -> None:
    dict.update(node, items)  # type: ignore[arg-type]


def _list_init_key(node: object, key: Key, child: object) -> None:
    list.append(node, track(child))  # type: ignore[arg-type]  (keys arrive in order)


def _dict_init_key(node: object, key: Key, child: object) -> None:
    dict.__setitem__(node, key, track(child))  # type: ignore[arg-type]


def _setitem(node: object, key: Key, child: object) -> None:
    node[key] = child  # type: ignore[index]  (the tracked __setitem__ reports it)


def _delitem(node: object, key: Key) -> None:
    del node[key]  # type: ignore[attr-defined]  (the tracked __delitem__ reports it)


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
            tracks_structure=True,
        ),
        NodeType(
            Dict,
            flatten=dict_flatten,
            create=_tracked_create,
            init_key=_dict_init_key,
            init_items=_dict_init_items,
            set_key=_setitem,
            pop_key=_delitem,
            tracks_structure=True,
        ),
    )
