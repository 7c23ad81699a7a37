"""Paths into pytrees as plain tuples of `str`/`int` keys, such as `('layers', 0, 'kernel')`.

JAX names a position in a tree with a tuple of key objects (`DictKey`, `SequenceKey`,
`GetAttrKey`, `FlattenedIndexKey`). bryo uses the plain keys inside them: they print
well, hash fast, and are what filters such as `PathContains` compare against. These
helpers convert between the two and flatten a tree to a `{path: leaf}` dict and back,
always through `jax.tree_util`.

Flattening the same structure again and again (a training loop) is the common case, so
the paths of a structure are computed once and kept per treedef: a repeated
`flatten_to_paths` costs one `tree_flatten` plus building the dict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeAlias

from jax.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    tree_flatten,
    tree_flatten_with_path,
)

Key: TypeAlias = Hashable
"""One step of a path: a `str` (dict key or attribute) or an `int` (sequence index)."""

Path: TypeAlias = tuple[Key, ...]
"""A position in a tree: `('layers', 0, 'kernel')`."""

JaxKey: TypeAlias = Any
"""`DictKey | SequenceKey | GetAttrKey | FlattenedIndexKey`: jax declares those as `Any`-typed
variables (C++ classes), which cannot form a type expression."""

PyTreeDef: TypeAlias = Any
"""`jax.tree_util.PyTreeDef`, which jax declares as a variable (no type expression)."""

IsLeaf: TypeAlias = Callable[[object], bool] | None

# One dict lookup instead of an isinstance chain: this runs once per key of every path.
_PLAIN_KEY: dict[type, Callable[[JaxKey], Key]] = {
    DictKey: lambda key: key.key,
    SequenceKey: lambda key: key.idx,
    GetAttrKey: lambda key: key.name,
    FlattenedIndexKey: lambda key: key.key,
}


def key_to_plain(key: JaxKey) -> Key:
    """The plain key inside one jax path entry.

    Args:
        key: a `DictKey`, `SequenceKey`, `GetAttrKey` or `FlattenedIndexKey`.

    Returns:
        Its dict key, index, attribute name or flattened index.

    >>> key_to_plain(DictKey("a")), key_to_plain(SequenceKey(0)), key_to_plain(GetAttrKey("w"))
    ('a', 0, 'w')
    """
    convert = _PLAIN_KEY.get(type(key))
    if convert is None:
        raise TypeError(
            f"`key` must be a jax.tree_util path entry (DictKey, SequenceKey, GetAttrKey or "
            f"FlattenedIndexKey); got {type(key).__name__}: {key!r}."
        )
    return convert(key)


def keypath_to_path(keypath: tuple[JaxKey, ...]) -> Path:
    """Turn a jax key path into a plain path.

    >>> keypath_to_path((GetAttrKey("w"), SequenceKey(0)))
    ('w', 0)
    """
    return tuple(map(key_to_plain, keypath))


def path_to_keypath(path: Path, tree: object | None = None) -> tuple[JaxKey, ...]:
    """Turn a plain path back into a jax key path.

    Args:
        path: a plain path such as `('layers', 0, 'kernel')`.
        tree: the tree the path points into. Without it, ints become `SequenceKey`s and
            everything else `DictKey`s. With it, the key types are the ones jax itself uses
            at that position (attribute steps come back as `GetAttrKey`, int dict keys as
            `DictKey`), and the path may end at any node, empty containers included.

    Returns:
        The jax key path, usable with `jax.tree_util.keystr` or to compare with the key
        paths of `jax.tree_util.tree_flatten_with_path`.

    Raises:
        KeyError: `tree` was given and `path` is not in it; the message names the first
            step that is missing and the keys present there.

    >>> path_to_keypath(("a", 0))
    (DictKey(key='a'), SequenceKey(idx=0))
    """
    path = tuple(path)
    if tree is None:
        return tuple(SequenceKey(k) if isinstance(k, int) else DictKey(k) for k in path)
    keypath: list[JaxKey] = []
    node = tree
    for depth, step in enumerate(path):
        children = _node_children_with_jax_keys(node)
        match = next(((k, c) for k, c in children if key_to_plain(k) == step), None)
        if match is None:
            there = path_str(path[:depth])
            if not children:
                found = f"a leaf ({type(node).__name__})" if _is_leaf(node) else "no children"
            else:
                found = "keys " + ", ".join(repr(key_to_plain(k)) for k, _ in children[:8])
                found += ", ..." if len(children) > 8 else ""
            raise _PathKeyError(
                f"path {path_str(path)} is not in the tree: at {there} there is no key "
                f"{step!r}, the tree has {found} there. Check the path against "
                "`flatten_to_paths(tree)`."
            )
        keypath.append(match[0])
        node = match[1]
    return tuple(keypath)


def path_str(path: Path) -> str:
    """A path as a user reads it.

    >>> path_str(("layers", 0, "kernel")), path_str(())
    ('layers[0].kernel', '<root>')
    """
    if not path:
        return "<root>"
    parts: list[str] = []
    for key in path:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif parts:
            parts.append(f".{key}")
        else:
            parts.append(str(key))
    return "".join(parts)


def flatten_to_paths(tree: object, *, is_leaf: IsLeaf = None) -> dict[Path, object]:
    """Flatten `tree` to an insertion-ordered `{path: leaf}` dict, in jax's leaf order.

    Args:
        tree: any pytree.
        is_leaf: as in `jax.tree_util.tree_flatten`: stop at nodes it returns True for.

    Returns:
        `{path: leaf}`, one entry per leaf of `jax.tree_util.tree_leaves(tree)`.

    >>> flatten_to_paths({"b": [1, 2], "a": 3})
    {('a',): 3, ('b', 0): 1, ('b', 1): 2}
    """
    return flatten_with_treedef(tree, is_leaf=is_leaf)[0]


def flatten_with_treedef(
    tree: object, *, is_leaf: IsLeaf = None
) -> tuple[dict[Path, object], PyTreeDef]:
    """Like `flatten_to_paths`, also returning the treedef that `unflatten_paths` rebuilds.

    >>> flat, treedef = flatten_with_treedef({"w": 1.0, "b": 0.0})
    >>> unflatten_paths({path: 2 * leaf for path, leaf in flat.items()}, treedef)
    {'b': 0.0, 'w': 2.0}
    """
    leaves, treedef = tree_flatten(tree, is_leaf=is_leaf)
    paths = _PATH_CACHE.get(treedef)
    if paths is None:
        with_path, treedef = tree_flatten_with_path(tree, is_leaf=is_leaf)
        paths = _plain_paths(with_path)
        _PATH_CACHE.put(treedef, paths)
    return dict(zip(paths, leaves, strict=True)), treedef


def unflatten_paths(flat: Mapping[Path, object], treedef: PyTreeDef | None = None) -> object:
    """Rebuild a tree from a `{path: leaf}` dict.

    Args:
        flat: `{path: leaf}`, as `flatten_to_paths` or `flatten_with_treedef` return it.
        treedef: the structure to rebuild (from `flatten_with_treedef`). The original
            structure comes back exactly, in whatever order `flat` lists the paths.
            Without it, the result is nested dicts keyed by the path steps.

    Returns:
        The rebuilt tree. `flat` is never modified.

    Raises:
        KeyError: `flat` misses paths of `treedef` or has paths it lacks; the message
            names them.
        ValueError: without `treedef`, a path runs through another path's leaf.

    >>> unflatten_paths({("a", "x"): 1, ("b",): 2})
    {'a': {'x': 1}, 'b': 2}
    """
    if treedef is None:
        return _nest(flat)
    expected = _PATH_CACHE.get(treedef) or _treedef_paths(treedef)
    if len(flat) == len(expected) and tuple(flat) == expected:
        return treedef.unflatten(list(flat.values()))
    missing = [p for p in expected if p not in flat]
    expected_set = frozenset(expected)
    extra = [p for p in flat if p not in expected_set]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing {_path_list(missing)}")
        if extra:
            problems.append(f"unexpected {_path_list(extra)}")
        raise _PathKeyError(
            f"`flat` does not fit `treedef`: {'; '.join(problems)}. Pass the dict returned by "
            "`flatten_with_treedef` for the same tree, with only its leaves changed."
        )
    return treedef.unflatten([flat[p] for p in expected])


class _PathKeyError(KeyError):
    """A `KeyError` whose message prints as text, not as the repr of a key."""

    def __str__(self) -> str:
        return str(self.args[0])


def _path_list(paths: list[Path], limit: int = 5) -> str:
    shown = ", ".join(path_str(p) for p in paths[:limit])
    more = f", ... ({len(paths)} in all)" if len(paths) > limit else ""
    return f"path{'s' if len(paths) > 1 else ''} {shown}{more}"


class _PathCache:
    """Paths per treedef, bounded by the total number of paths it holds.

    Keys are treedefs, so a structure is looked up by value (jax hashes and compares
    treedefs in C++). Treedefs whose node data cannot be hashed or compared (arrays used
    as metadata) are simply not cached. The treedef objects most recently looked up are
    also found by identity, so `unflatten_paths` with the treedef that
    `flatten_with_treedef` just returned skips even the comparison.
    """

    def __init__(self, max_paths: int = 2_000_000, recent: int = 32) -> None:
        self._paths: dict[PyTreeDef, tuple[Path, ...]] = {}
        self._recent: dict[int, tuple[PyTreeDef, tuple[Path, ...]]] = {}
        self._max_recent = recent
        self._size = 0
        self._max_paths = max_paths
        self._lock = threading.Lock()

    def get(self, treedef: PyTreeDef) -> tuple[Path, ...] | None:
        seen = self._recent.get(id(treedef))
        if seen is not None and seen[0] is treedef:
            return seen[1]
        try:
            paths = self._paths.get(treedef)
        except (TypeError, ValueError):  # node data that cannot be hashed or compared
            return None
        if paths is not None:
            self._remember(treedef, paths)
        return paths

    def put(self, treedef: PyTreeDef, paths: tuple[Path, ...]) -> None:
        if len(paths) > self._max_paths:
            return
        with self._lock:
            try:
                if treedef in self._paths:
                    return
                self._paths[treedef] = paths
            except (TypeError, ValueError):
                return
            self._size += len(paths)
            while self._size > self._max_paths:
                oldest = next(iter(self._paths))
                self._size -= len(self._paths.pop(oldest))
        self._remember(treedef, paths)

    def _remember(self, treedef: PyTreeDef, paths: tuple[Path, ...]) -> None:
        # The entry holds `treedef` alive, so its id cannot be reused while it is here.
        recent = self._recent
        recent[id(treedef)] = (treedef, paths)
        if len(recent) > self._max_recent:
            try:
                del recent[next(iter(recent))]
            except (KeyError, RuntimeError, StopIteration):  # another thread got there first
                pass

    def clear(self) -> None:
        with self._lock:
            self._paths.clear()
            self._recent.clear()
            self._size = 0


_PATH_CACHE = _PathCache()


def _treedef_paths(treedef: PyTreeDef) -> tuple[Path, ...]:
    """The paths of `treedef`'s leaves, in order; read off a placeholder tree if unseen."""
    paths = _PATH_CACHE.get(treedef)
    if paths is None:
        placeholder = treedef.unflatten([_Slot()] * treedef.num_leaves)
        paths = _plain_paths(tree_flatten_with_path(placeholder, is_leaf=_is_slot)[0])
        _PATH_CACHE.put(treedef, paths)
    return paths


def _plain_paths(with_path: list[tuple[tuple[JaxKey, ...], object]]) -> tuple[Path, ...]:
    """The plain paths of `tree_flatten_with_path`'s output (the two common keys inlined)."""
    return tuple(
        [
            tuple(
                [
                    k.key
                    if type(k) is DictKey
                    else k.idx
                    if type(k) is SequenceKey
                    else key_to_plain(k)
                    for k in keypath
                ]
            )
            for keypath, _ in with_path
        ]
    )


class _Slot:
    """A leaf that no pytree registry knows, to read the key paths of a treedef."""


def _is_slot(x: object) -> bool:
    return isinstance(x, _Slot)


def _node_children_with_jax_keys(
    node: object, is_leaf: IsLeaf = None
) -> list[tuple[JaxKey, object]]:
    """The direct children of one pytree node with their jax keys; `[]` for a leaf."""
    if is_leaf is not None and is_leaf(node):
        return []
    # Everything below `node` counts as a leaf, so this flattens exactly one level (jax's
    # `flatten_one_level_with_keys` gives namedtuples the wrong keys in jax 0.10).
    with_path, _ = tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    return [(keypath[0], child) for keypath, child in with_path if keypath]


def node_children(node: object, is_leaf: IsLeaf = None) -> list[tuple[Key, object]]:
    """The direct children of one pytree node with their plain keys; `[]` for a leaf."""
    return [(key_to_plain(k), c) for k, c in _node_children_with_jax_keys(node, is_leaf)]


def _is_leaf(node: object, is_leaf: IsLeaf = None) -> bool:
    """True for a leaf of jax's registry (or one `is_leaf` picks); `None` is an empty node."""
    if is_leaf is not None and is_leaf(node):
        return True
    treedef = tree_flatten(node, is_leaf=lambda x: x is not node)[1]
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def _nest(flat: Mapping[Path, object]) -> dict:
    root: dict[Key, Any] = {}
    made = {id(root)}  # only descend into dicts built here: a leaf may be a dict itself
    for path, leaf in flat.items():
        if not path:
            raise ValueError(
                "the empty path names the whole tree and cannot be nested; "
                "pass `treedef` to rebuild a tree that is a single leaf."
            )
        node = root
        for depth, key in enumerate(path[:-1]):
            child = node.get(key)
            if child is None and key not in node:
                child = node[key] = {}
                made.add(id(child))
            if child is None or id(child) not in made:
                raise ValueError(
                    f"`flat` has a leaf at {path_str(path[: depth + 1])} and also the path "
                    f"{path_str(path)} below it; a leaf cannot have children."
                )
            node = child
        if id(node.get(path[-1])) in made:
            raise ValueError(
                f"`flat` has a leaf at {path_str(path)} and also paths below it; "
                "a leaf cannot have children."
            )
        node[path[-1]] = leaf
    return root
