"""Prefix broadcasting, as JAX does for `vmap`'s `in_axes` (seed 004).

An optional-parameter tree may be a *prefix* of the value tree it describes: a leaf of the
prefix stands for the whole subtree of the value below it. `broadcast_prefix` expands the
prefix to the value's full structure, and names the first path where the two disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jax.tree_util import tree_flatten, tree_structure

from ._paths import Key, Path, _is_leaf, node_children, path_str


class PrefixError(ValueError):
    """A prefix tree does not fit the tree it is broadcast against."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def broadcast_prefix(
    prefix: object,
    tree: object,
    *,
    is_leaf: Callable[[object], bool] | None = None,
    name: str = "prefix",
) -> object:
    """Expand `prefix` to the full structure of `tree`.

    Every leaf of `prefix` (`None` counts as a leaf, as `in_axes=None` does in JAX) is
    repeated over the subtree of `tree` at the same path. The result has `tree`'s exact
    structure with prefix leaves in place of `tree`'s leaves:

    >>> broadcast_prefix((None, 0), (1, {"k1": 2, "k2": 3}))
    (None, {'k1': 0, 'k2': 0})

    Raises:
        PrefixError: `prefix` is not a prefix of `tree`; the message names the first path
            where they disagree and what each side has there. `name` says which argument
            the prefix came from (`in_axes`, say).
    """
    leaves: list[object] = []

    def expand(_path: Path, prefix_leaf: object, subtree: object) -> None:
        count = tree_structure(subtree, is_leaf=is_leaf).num_leaves
        leaves.extend([prefix_leaf] * count)

    _walk(prefix, tree, (), expand, is_leaf, name)
    return tree_structure(tree, is_leaf=is_leaf).unflatten(leaves)


def _walk(
    prefix: object,
    tree: object,
    path: Path,
    on_leaf: Callable[[Path, object, object], None],
    is_leaf: Callable[[object], bool] | None,
    name: str,
) -> None:
    if prefix is None or _is_leaf(prefix):
        on_leaf(path, prefix, tree)
        return
    if _is_leaf(tree, is_leaf):
        raise PrefixError(
            f"`{name}` does not fit the value at {path_str(path)}: `{name}` has a "
            f"{type(prefix).__name__} there, the value has the leaf {_short(tree)}. A leaf of "
            f"`{name}` may stand for a whole subtree, never the other way round.",
            path,
        )
    prefix_children = node_children(prefix)
    tree_children = node_children(tree, is_leaf)
    prefix_keys = [key for key, _ in prefix_children]
    tree_keys = [key for key, _ in tree_children]
    if type(prefix) is type(tree) and prefix_keys != tree_keys:
        prefix_children = _in_key_order(prefix_children, tree_keys)
        prefix_keys = [key for key, _ in prefix_children]
    if type(prefix) is not type(tree) or prefix_keys != tree_keys:
        raise PrefixError(
            f"`{name}` does not fit the value at {path_str(path)}: `{name}` has "
            f"{_describe(prefix, prefix_keys)}, the value has {_describe(tree, tree_keys)}. "
            f"Make `{name}` a prefix of the value's structure (same containers and keys), "
            "or use one leaf for the whole subtree.",
            path,
        )
    for (key, prefix_child), (_, tree_child) in zip(prefix_children, tree_children, strict=True):
        _walk(prefix_child, tree_child, (*path, key), on_leaf, is_leaf, name)


def _in_key_order(children: list[tuple[Key, object]], keys: list[Key]) -> list[tuple[Key, object]]:
    """`children` in the order of `keys` when they hold the same keys in another order (a
    mapping node built in another insertion order, such as a State written by hand);
    unchanged otherwise."""
    by_key = dict(children)
    if len(by_key) != len(children) or by_key.keys() != set(keys):
        return children
    return [(key, by_key[key]) for key in keys]


def _describe(node: object, keys: Sequence[object]) -> str:
    shown = ", ".join(repr(k) for k in keys[:6])
    more = ", ..." if len(keys) > 6 else ""
    return f"a {type(node).__name__} with keys [{shown}{more}]"


def _short(value: object) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__}{tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def tree_map_with_prefix(
    f: Callable[..., object],
    prefix: object,
    tree: object,
    *,
    is_leaf: Callable[[object], bool] | None = None,
    name: str = "prefix",
) -> object:
    """Map `f(prefix_leaf, tree_leaf)` over `tree`, broadcasting `prefix` first."""
    full = broadcast_prefix(prefix, tree, is_leaf=is_leaf, name=name)
    tree_leaves, treedef = tree_flatten(tree, is_leaf=is_leaf)
    prefix_leaves = treedef.flatten_up_to(full)
    return treedef.unflatten(map(f, prefix_leaves, tree_leaves))


__all__ = ["PrefixError", "broadcast_prefix", "tree_map_with_prefix"]
