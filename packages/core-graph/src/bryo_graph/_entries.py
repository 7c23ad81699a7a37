"""The entries of a GraphDef: one small named record per kind of thing in a graph.

A GraphDef is a tree of entries: a `NodeEntry` per node with its children, a
`VariableEntry` per Variable and a `LeafEntry` per raw array (their values are in the
State), a `StaticEntry` per static value, and a `RefEntry` for a node or Variable met
before (shared references and cycles). The records are NamedTuples, so a GraphDef hashes
and compares at C speed like the plain tuple it is; the trailing `kind` field (filled in
by default, never passed) keeps entries of different kinds with equal fields apart
(`RefEntry(3) != StaticEntry(3)`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple, TypeAlias, final

from bryo_pytree import Key, Path

from ._variables import Variable


@final
class NodeEntry(NamedTuple):
    """A graph node: its class, its GraphDef index, its static aux data and its children.

    Attributes:
        type: the node's class (its `NodeType` rebuilds it).
        index: the node's GraphDef index; a later `RefEntry(index)` refers to it.
        aux: the hashable static data its `NodeType.flatten` returned.
        children: `(key, entry)` pairs in the node type's order.
    """

    type: type
    index: int
    aux: Hashable
    children: tuple[tuple[Key, Entry], ...]
    kind: str = "node"

    def child(self, key: Key) -> Entry:
        """The entry of the child under `key` (a `KeyError` if there is none)."""
        for child_key, entry in self.children:
            if child_key == key:
                return entry
        raise KeyError(key)


@final
class RefEntry(NamedTuple):
    """A node or Variable seen before in the flattening: a shared reference."""

    index: int
    kind: str = "ref"


@final
class VariableEntry(NamedTuple):
    """A Variable of class `type` with GraphDef `index`; its value is a State leaf."""

    type: type
    index: int
    kind: str = "variable"


@final
class LeafEntry(NamedTuple):
    """A raw leaf in a node (an array, a `data(...)` value); its value is a State leaf, in a
    `type` Variable when the node type names one (else `type` is `Variable`, the leaf raw).

    A raw `jax.Ref` (mutable array) gets a GraphDef `index`, as a Variable does: where the
    graph holds it again, a `RefEntry(index)` refers to it, and `merge` shares it again
    (Flax NNX 0.12's array refs). Other raw leaves are values: `index` is None."""

    type: type
    index: int | None = None
    kind: str = "leaf"


@final
class StaticEntry(NamedTuple):
    """A static value kept in the GraphDef (wrapped by `bryo_pytree.hashable`)."""

    value: Hashable
    kind: str = "static"


Entry: TypeAlias = NodeEntry | RefEntry | VariableEntry | LeafEntry | StaticEntry


def collect_leaf_paths(entry: Entry, path: Path, out: list[Path]) -> None:
    """Append the paths of the State leaves under `entry` (at `path`) to `out`, in order."""
    stack = [(entry, path)]
    while stack:
        entry, path = stack.pop()
        if type(entry) is VariableEntry or type(entry) is LeafEntry:
            out.append(path)
        elif type(entry) is NodeEntry:
            stack.extend((child, (*path, key)) for key, child in reversed(entry.children))


def entries_equal(a: Entry, b: Entry) -> bool:
    """Whether two entries are equal, however deep they nest (tuple `==` recurses in C and
    stops at the interpreter's recursion limit; this walk has no limit)."""
    try:
        return a == b
    except RecursionError:
        pass
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y) or len(x) != len(y):
            return False
        if type(x) is NodeEntry:
            if x[:3] != y[:3] or len(x.children) != len(y.children):  # type: ignore[union-attr]  # y has the type of x
                return False
            for (kx, cx), (ky, cy) in zip(x.children, y.children, strict=True):  # type: ignore[union-attr]  # y: as x
                if kx != ky:
                    return False
                stack.append((cx, cy))
        elif x != y:
            return False
    return True


def render(entry: Entry) -> str:
    """`entry` as indented text, for `repr(graphdef)`."""
    lines: list[str] = []
    # (entry, depth, prefix, suffix): children are pushed in reverse, closing lines last
    stack: list[tuple[Entry | str, int, str, str]] = [(entry, 0, "", "")]
    while stack:
        item, depth, prefix, suffix = stack.pop()
        if isinstance(item, str):  # a closing parenthesis
            lines.append(item + suffix)
            continue
        if isinstance(item, NodeEntry):
            head = f"{prefix}{item.type.__name__}#{item.index}"
            if not item.children:
                lines.append(head + "()" + suffix)
                continue
            lines.append(head + "(")
            stack.append(("  " * depth + ")", depth, "", suffix))
            pad = "  " * (depth + 1)
            last = len(item.children) - 1
            for i in range(last, -1, -1):
                key, child = item.children[i]
                stack.append((child, depth + 1, f"{pad}{key}=", "" if i == last else ","))
            continue
        lines.append(prefix + _render_leaf(item) + suffix)
    return "\n".join(lines)


def _render_leaf(entry: Entry) -> str:
    if isinstance(entry, RefEntry):
        return f"<ref #{entry.index}>"
    if isinstance(entry, VariableEntry):
        return f"{entry.type.__name__}#{entry.index}"
    if isinstance(entry, LeafEntry):  # raw in States unless its node type names a Variable
        return "<leaf>" if entry.type is Variable else f"<array as {entry.type.__name__}>"
    return repr(entry.value)  # type: ignore[union-attr]  # a StaticEntry (render takes NodeEntry)
