"""A readable, indented display of a pytree's structure, for debugging.

`jax.tree_util.tree_structure` prints a treedef as one long line; `tree_display` prints
one line per node with its path key, container type, and for arrays their dtype and
shape instead of their values, so a model's layout reads at a glance.
"""

from __future__ import annotations

from collections.abc import Callable

from jax.tree_util import tree_flatten_with_path

from ._paths import key_to_plain


def describe_leaf(leaf: object) -> str:
    """`f32[3,4]` for an array, the repr (cut to 60 characters) for anything else."""
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{_short_dtype(str(dtype))}[{','.join(map(str, shape))}]"
    text = repr(leaf)
    return text if len(text) <= 60 else text[:57] + "..."


def _short_dtype(name: str) -> str:
    for long, short in (("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        if name.startswith(long):
            return short + name[len(long) :]
    return name


def tree_display(
    tree: object, *, is_leaf: Callable[[object], bool] | None = None, indent: str = "  "
) -> str:
    """One line per container and leaf, indented by depth.

    >>> print(tree_display({"w": jnp.ones((2, 3)), "b": [1, 2]}))  # doctest: +SKIP
    dict
      b: list
        [0]: 1
        [1]: 2
      w: f32[2,3]
    """
    lines = [_node_label(tree, is_leaf)]
    _render(tree, 1, lines, is_leaf, indent)
    return "\n".join(lines)


def _node_label(node: object, is_leaf: Callable[[object], bool] | None) -> str:
    if _is_leaf(node, is_leaf):
        return describe_leaf(node)
    return type(node).__name__


def _is_leaf(node: object, is_leaf: Callable[[object], bool] | None) -> bool:
    if is_leaf is not None and is_leaf(node):
        return True
    with_path, treedef = tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def _render(
    node: object,
    depth: int,
    lines: list[str],
    is_leaf: Callable[[object], bool] | None,
    indent: str,
) -> None:
    if _is_leaf(node, is_leaf):
        return
    with_path, _ = tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    for keypath, child in with_path:
        key = key_to_plain(keypath[0])
        label = f"[{key}]" if isinstance(key, int) else str(key)
        lines.append(f"{indent * depth}{label}: {_node_label(child, is_leaf)}")
        _render(child, depth + 1, lines, is_leaf, indent)
