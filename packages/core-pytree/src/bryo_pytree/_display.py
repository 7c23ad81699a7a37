"""A readable, indented display of a pytree's structure, for debugging.

`jax.tree_util.tree_structure` prints a treedef as one long line; `tree_display` prints
one line per node with its path key, container type, and for arrays their dtype and
shape instead of their values, so a model's layout reads at a glance.
"""

from __future__ import annotations

from collections.abc import Callable

from ._paths import _is_leaf, node_children


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

    Containers show their type, leaves `describe_leaf`; `None` and empty containers (which
    jax treats as nodes without leaves) show as `None`, `dict (empty)` and so on.

    Args:
        tree: any pytree.
        is_leaf: as in `jax.tree_util.tree_flatten`: show nodes it returns True for as leaves.
        indent: the indentation per level.

    Returns:
        The display, lines joined by newlines (no trailing newline).

    >>> print(tree_display({"w": np.ones((2, 3), np.float32), "b": [1, None]}))  # doctest: +SKIP
    dict
      b: list
        [0]: 1
        [1]: None
      w: f32[2,3]
    """
    lines = [_node_label(tree, is_leaf)]
    _render(tree, 1, lines, is_leaf, indent)
    return "\n".join(lines)


def _node_label(node: object, is_leaf: Callable[[object], bool] | None) -> str:
    if node is None:
        return "None"
    if _is_leaf(node, is_leaf):
        return describe_leaf(node)
    if not node_children(node, is_leaf):
        return f"{type(node).__name__} (empty)"
    return type(node).__name__


def _render(
    node: object,
    depth: int,
    lines: list[str],
    is_leaf: Callable[[object], bool] | None,
    indent: str,
) -> None:
    for key, child in node_children(node, is_leaf):
        label = f"[{key}]" if isinstance(key, int) else str(key)
        lines.append(f"{indent * depth}{label}: {_node_label(child, is_leaf)}")
        _render(child, depth + 1, lines, is_leaf, indent)
