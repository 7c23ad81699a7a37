"""Helpers for backends implementing the `bryo_mox_interceptor` hook.

A backend's interceptor describes each module call with a `ModuleInfo`: the module's
class, its path in the model and its static attributes. The parts every backend needs are
here: `module_path` finds a module's path in its calling module (also for a module rebuilt
inside a transform, such as a layer of a scanned `Stacked` trunk, which says what it
stands for with `bryo_plugins.standing_in`), `static_attributes`
keeps the attributes MoX can record, `module_info` puts them together. Backends import
this module only while `make_mox` traces (never at import time), so they load without
bryo-mox-ir installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bryo_plugins import stood_in_for

from ._ir import RESERVED_ATTRS, ModuleInfo
from ._trace import current_session

#: Attribute values MoX records (and tuples of them).
STATIC_TYPES = (int, float, bool, str, type(None))
_EXACT_STATIC_TYPES = frozenset(STATIC_TYPES)  # the common case, without isinstance

#: `walk(module)` yields `(path, value)` for every node and leaf under `module`, the
#: module itself with path `()`: `bryo_graph.iter_graph`, for instance.
Walk = Callable[[object], Iterable[tuple[tuple[Any, ...], object]]]


def is_static(value: object) -> bool:
    """Whether MoX can record `value` as an attribute: a scalar, a string, `None`, or a
    tuple of these."""
    if isinstance(value, STATIC_TYPES):
        return True
    return isinstance(value, tuple) and all(isinstance(v, STATIC_TYPES) for v in value)


def static_attributes(items: Iterable[tuple[str, object]]) -> dict[str, object]:
    """The attributes MoX records, from `(name, value)` pairs, sorted by name.

    Private names (`_x`) and values that are not static are skipped; a name MoX reserves
    for itself (`type`, `name`, ...) is recorded as `module_<name>`.

    Example:
        >>> static_attributes(vars(module).items())  # doctest: +SKIP
        {'features': 10, 'in_features': 3, 'use_bias': True}
    """
    kept = {
        key: value
        for key, value in items
        if key[:1] != "_" and (value.__class__ in _EXACT_STATIC_TYPES or is_static(value))
    }
    if RESERVED_ATTRS.isdisjoint(kept):
        return {key: kept[key] for key in sorted(kept)}
    return {f"module_{key}" if key in RESERVED_ATTRS else key: kept[key] for key in sorted(kept)}


def module_info(module: object, name: str, attrs: Mapping[str, object]) -> ModuleInfo:
    """`ModuleInfo` of a call of `module`: its class as a dotted path, `name`, `attrs`."""
    cls = type(module)
    return ModuleInfo(f"{cls.__module__}.{cls.__qualname__}", name, attrs)


class _Graph:
    """What `module_path` needs of a calling module, computed once per trace.

    A module called by its parent is usually one of the parent's attributes (or an item
    of a list, tuple or dict attribute): that is checked first, without walking the
    parent's graph. The walk, and the tables it fills, happen only for other modules.
    """

    def __init__(self, parent: object, walk: Walk) -> None:
        self.parent = parent  # kept alive: its id must not be reused during the trace
        self.walk = walk
        self.direct: dict[int, str] | None = None
        self.by_id: dict[int, tuple[Any, ...]] | None = None
        self.by_type: dict[type, list[tuple[Any, ...]]] = {}
        self.shapes: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def find(self, module: object) -> str | None:
        if self.direct is None:
            self.direct = _attribute_paths(self.parent)
        found = self.direct.get(id(module))
        if found is not None:
            return found
        if self.by_id is None:
            self._walk()
        assert self.by_id is not None
        path = self.by_id.get(id(module))
        if path is not None:
            return "/".join(map(str, path))
        same_type = self.by_type.get(type(module), [])
        if not same_type:
            return None
        own = {
            tuple(p): s
            for p, v in self.walk(module)
            if isinstance(s := getattr(v, "shape", None), tuple)
        }
        matches = [path for path in same_type if self._same_layout(path, own)]
        return "/".join(map(str, matches[0])) if len(matches) == 1 else None

    def _walk(self) -> None:
        self.by_id = {}
        for path, value in self.walk(self.parent):
            if not path:
                continue
            path = tuple(path)
            self.by_id.setdefault(id(value), path)
            self.by_type.setdefault(type(value), []).append(path)
            shape = getattr(value, "shape", None)
            if isinstance(shape, tuple):
                self.shapes[path] = shape

    def _same_layout(self, path: tuple[Any, ...], own: dict[tuple[Any, ...], tuple]) -> bool:
        """Whether the module at `path` holds arrays of the shapes `own`, as they are or
        with one more leading (stacked) axis of a common size."""
        theirs = {p[len(path) :]: s for p, s in self.shapes.items() if p[: len(path)] == path}
        if own.keys() != theirs.keys():
            return False
        if all(own[p] == theirs[p] for p in own):
            return True
        if not all(len(theirs[p]) == len(own[p]) + 1 and theirs[p][1:] == own[p] for p in own):
            return False
        return len({theirs[p][0] for p in own}) == 1


def _attribute_paths(parent: object) -> dict[int, str]:
    """`id(child) -> path` for the parent's public attributes and the items of its list,
    tuple and dict attributes (the first path in sorted order when a child has several).

    Private attributes are left to the walk: a torch-like module keeps its submodules in
    a `_modules` dict whose keys, not `_modules/<key>`, are their paths in the graph."""
    paths: dict[int, str] = {}
    attributes = getattr(parent, "__dict__", None)
    if not isinstance(attributes, dict):
        return paths
    for key in sorted(attributes, key=str):
        if isinstance(key, str) and key.startswith("_"):
            continue
        value = attributes[key]
        paths.setdefault(id(value), str(key))
        if isinstance(value, (list, tuple)):
            items: Iterable[tuple[Any, Any]] = enumerate(value)
        elif isinstance(value, dict):
            items = value.items()
        else:
            continue
        for item_key, item in items:
            paths.setdefault(id(item), f"{key}/{item_key}")
    return paths


def module_path(module: object, parent: tuple[object, str] | None, walk: Walk) -> str:
    """The path of `module` in the model, from its calling module `parent`.

    Args:
        module: the module being called.
        parent: `(calling module, its path)`, or `None` for a call at the top level
            (whose path is `""`).
        walk: `walk(parent)` yields `(path, value)` for everything under `parent`
            (`bryo_graph.iter_graph`).

    Returns:
        `"<parent path>/<path of module in parent>"`. A copy a transform rebuilt and
        said it stands for a module of the model (`bryo_plugins.standing_in`: one layer
        of a scanned `Stacked` trunk) takes that module's path (`"trunk/stacked"`).
        Another module that is not in its parent's graph (a module merged back inside
        `jit`) takes the path of the one module of its class there with the same arrays,
        possibly stacked on a leading axis; failing that, `"<parent path>/<ClassName>"`.
    """
    if parent is None:
        return ""
    parent_module, parent_name = parent
    session = current_session()
    cache: dict[int, _Graph] = session.paths if session is not None else {}
    graph = cache.get(id(parent_module))
    if graph is None or graph.parent is not parent_module:
        graph = cache[id(parent_module)] = _Graph(parent_module, walk)
    original = stood_in_for(module)
    found = graph.find(original) if original is not None else None
    own = found or graph.find(module) or type(module).__name__
    return f"{parent_name}/{own}" if parent_name else own
