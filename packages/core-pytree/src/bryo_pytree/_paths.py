"""Paths into pytrees as plain tuples of `str`/`int` keys, such as `('layers', 0, 'kernel')`.

JAX names a position in a tree with a tuple of key objects (`DictKey`, `SequenceKey`,
`GetAttrKey`, `FlattenedIndexKey`). bryo uses the plain keys inside them: they print
well, hash fast, and are what filters such as `PathContains` compare against. These
helpers convert between the two and flatten a tree to a `{path: leaf}` dict and back,
always through `jax.tree_util`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from typing import TypeAlias

import jax
from jax.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    tree_flatten_with_path,
)

Key: TypeAlias = Hashable
"""One step of a path: a `str` (dict key or attribute) or an `int` (sequence index)."""

Path: TypeAlias = tuple[Key, ...]
"""A position in a tree: `('layers', 0, 'kernel')`."""

JaxKey: TypeAlias = DictKey | SequenceKey | GetAttrKey | FlattenedIndexKey


def key_to_plain(key: JaxKey) -> Key:
    """The plain key inside one jax path entry (`DictKey('a')` -> `'a'`)."""
    if isinstance(key, DictKey):
        return key.key
    if isinstance(key, SequenceKey):
        return key.idx
    if isinstance(key, GetAttrKey):
        return key.name
    if isinstance(key, FlattenedIndexKey):
        return key.key
    raise TypeError(
        f"`key` must be a jax.tree_util path entry (DictKey, SequenceKey, GetAttrKey or "
        f"FlattenedIndexKey); got {type(key).__name__}: {key!r}."
    )


def keypath_to_path(keypath: tuple[JaxKey, ...]) -> Path:
    """Turn a jax key path into a plain path: `(GetAttrKey('w'), SequenceKey(0))` -> `('w', 0)`."""
    return tuple(map(key_to_plain, keypath))


def path_to_keypath(path: Path, tree: object | None = None) -> tuple[JaxKey, ...]:
    """Turn a plain path back into a jax key path.

    Without `tree`, ints become `SequenceKey`s and everything else `DictKey`s. With `tree`,
    the key types are the ones jax itself uses for that position (so attribute steps come
    back as `GetAttrKey`), and a path that is not in `tree` raises a `KeyError`.
    """
    if tree is None:
        return tuple(SequenceKey(k) if isinstance(k, int) else DictKey(k) for k in path)
    for keypath, _ in tree_flatten_with_path(tree)[0]:
        if len(keypath) >= len(path) and keypath_to_path(keypath[: len(path)]) == tuple(path):
            return tuple(keypath[: len(path)])
    raise KeyError(f"path {path_str(path)} is not in the tree; its paths are {_some_paths(tree)}")


def path_str(path: Path) -> str:
    """A path as a user reads it: `('layers', 0, 'kernel')` -> `layers[0].kernel`."""
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


def _some_paths(tree: object, limit: int = 5) -> str:
    paths = list(flatten_to_paths(tree))
    shown = ", ".join(path_str(p) for p in paths[:limit])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > limit else "")


def flatten_to_paths(
    tree: object, *, is_leaf: Callable[[object], bool] | None = None
) -> dict[Path, object]:
    """Flatten `tree` to an insertion-ordered `{path: leaf}` dict (jax's leaf order)."""
    with_path, _ = tree_flatten_with_path(tree, is_leaf=is_leaf)
    return {tuple(map(key_to_plain, keypath)): leaf for keypath, leaf in with_path}


def flatten_with_treedef(
    tree: object, *, is_leaf: Callable[[object], bool] | None = None
) -> tuple[dict[Path, object], jax.tree_util.PyTreeDef]:
    """Like `flatten_to_paths`, also returning the treedef that `unflatten_paths` rebuilds."""
    with_path, treedef = tree_flatten_with_path(tree, is_leaf=is_leaf)
    return {tuple(map(key_to_plain, keypath)): leaf for keypath, leaf in with_path}, treedef


def unflatten_paths(
    flat: Mapping[Path, object], treedef: jax.tree_util.PyTreeDef | None = None
) -> object:
    """Rebuild a tree from a `{path: leaf}` dict.

    With `treedef` (from `flatten_with_treedef`), the original structure comes back
    exactly, in whatever order `flat` lists the paths; a missing or extra path raises a
    `KeyError` naming it. Without it, the result is nested dicts keyed by the path steps.
    """
    if treedef is None:
        return _nest(flat)
    expected = _treedef_paths(treedef)
    if len(flat) == len(expected) and tuple(flat) == expected:
        return treedef.unflatten(list(flat.values()))
    missing = [p for p in expected if p not in flat]
    extra = [p for p in flat if p not in frozenset(expected)]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing paths {', '.join(map(path_str, missing[:5]))}")
        if extra:
            problems.append(f"unexpected paths {', '.join(map(path_str, extra[:5]))}")
        raise KeyError(
            f"`flat` does not fit `treedef`: {'; '.join(problems)}. Pass the dict returned by "
            "`flatten_with_treedef` for the same tree, with only its leaves changed."
        )
    return treedef.unflatten([flat[p] for p in expected])


@functools.lru_cache(maxsize=256)
def _treedef_paths(treedef: jax.tree_util.PyTreeDef) -> tuple[Path, ...]:
    placeholder = treedef.unflatten([_Slot()] * treedef.num_leaves)
    with_path = tree_flatten_with_path(placeholder, is_leaf=_is_slot)[0]
    return tuple(tuple(map(key_to_plain, keypath)) for keypath, _ in with_path)


class _Slot:
    """A leaf that no pytree registry knows, to read the key paths of a treedef."""


def _is_slot(x: object) -> bool:
    return isinstance(x, _Slot)


def _nest(flat: Mapping[Path, object]) -> dict:
    root: dict = {}
    for path, leaf in flat.items():
        if not path:
            raise ValueError(
                "the empty path names the whole tree and cannot be nested; "
                "pass `treedef` to rebuild a tree that is a single leaf."
            )
        node = root
        for key in path[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"path {path_str(path)} goes through the leaf at {path_str(path[:-1])}"
                )
            node = child
        node[path[-1]] = leaf
    return root
