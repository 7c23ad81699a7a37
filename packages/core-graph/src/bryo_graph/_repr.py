"""The text form of graph nodes: what `repr(module)` and `display` print, laid out as
Flax NNX 0.12 does.

A node shows as a block: its first line opens it (`Linear(`, `List([`, `Dict({`), then one
child per line in the order the attributes were set, indented by two spaces, then a line
that closes it. A module's first line carries a comment with the sizes of the Variables
below it, by type (`# Param: 44 (176 B), BatchStat: 8 (32 B), Total: 52 (208 B)`), and
so does a Variable's (`kernel=Param( # 12 (48 B)`). Arrays show compactly (`f32[3,4]`,
scalars with their value). A node met a second time, through a shared reference or a
cycle, shows as `Block(...)`, as in Flax.

The statistics come from one walk over the graph in its flattening order (sorted keys),
as Flax's do: each node counts the Variables below it that the walk meets for the first
time there, so the root counts every Variable once and a node shared with an earlier part
of the walk adds nothing to its second parent. Rendering is iterative and visits each node
once: a model of thousands of layers (or nested deeper than Python's recursion limit)
prints in time linear in its size.

Classes opt in through `_repr_block` (`Object`, `List` and `Dict` in `_object`, which
imports this module); Variables are known here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bryo_pytree import describe_leaf, is_shaped

from ._errors import GraphError
from ._nodes import node_type_of
from ._variables import Variable

INDENT = "  "


class ReprBlock(NamedTuple):
    """How a node shows as a block of lines.

    Attributes:
        head: what opens the first line (`Linear(`, `List([`).
        tail: what closes the last line (`)`, `])`).
        items: `(label, child)` per line in between: `("kernel=", ...)`, `("", ...)`.
        counted: whether the first line carries the node's statistics comment.
    """

    head: str
    tail: str
    items: list[tuple[str, object]]
    counted: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class SizeBytes:
    """How many array elements, and how many bytes, some Variables hold."""

    size: int
    bytes: int

    def __add__(self, other: SizeBytes) -> SizeBytes:
        return SizeBytes(self.size + other.size, self.bytes + other.bytes)

    def __str__(self) -> str:
        return f"{self.size:,} ({format_bytes(self.bytes)})"


def format_bytes(count: float) -> str:
    """`176 B`, `24.3 KB`, `4.0 MB`: decimal units with one decimal, as Flax writes them."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count > scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{int(count):,} B"


def render(node: object) -> str:
    """`node` as indented text: modules, `List`s, `Dict`s and Variables as blocks with
    their statistics, everything else as its short form (`f32[3,4]`) or repr.

    >>> from bryo_graph import Param
    >>> print(render(Param(jnp.ones((2, 3)))))
    Param( # 6 (24 B)
      value=f32[2,3]
    )
    """
    return "\n".join(_Renderer().lines(node))


def variable_size(variable: Variable) -> SizeBytes:
    """The elements and bytes of the arrays `variable` holds."""
    raw = variable.get_raw_value()
    leaves = [raw] if is_shaped(raw) else jax.tree.leaves(raw)
    size = nbytes = 0
    for leaf in leaves:
        if is_shaped(leaf):
            count = math.prod(leaf.shape)  # type: ignore[attr-defined]  # is_shaped
            dtype = leaf.dtype  # type: ignore[attr-defined]  # is_shaped
            size += count
            nbytes += count * (getattr(dtype, "itemsize", None) or jnp.dtype(dtype).itemsize)
    return SizeBytes(size, nbytes)


Stats = dict[type, SizeBytes]


class _Statistics:
    """Per node, the sizes of the Variables below it by type, from one walk (see the
    module docstring). Keeps the nodes it met alive while it lives, so ids stay unique."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[object, Stats]] = {}

    def of(self, node: object) -> Stats:
        entry = self._memo.get(id(node))
        if entry is None:
            self._walk(node)
            entry = self._memo[id(node)]
        return entry[1]

    def _walk(self, root: object) -> None:
        memo = self._memo
        stats: Stats = {}
        memo[id(root)] = (root, stats)
        stack = [(stats, iter(_children(root) or ()))]
        while stack:
            stats, children = stack[-1]
            for child in children:
                if id(child) in memo:
                    continue
                if isinstance(child, Variable):
                    memo[id(child)] = (child, _variable_stats(child))
                    _add(stats, memo[id(child)][1])
                    continue
                grandchildren = _children(child)
                if grandchildren is None:
                    continue
                child_stats: Stats = {}
                memo[id(child)] = (child, child_stats)
                stack.append((child_stats, iter(grandchildren)))
                break
            else:
                stack.pop()
                if stack:
                    _add(stack[-1][0], stats)


def _children(node: object) -> Iterable[object] | None:
    """The children of a graph node in flattening order; None for a leaf."""
    if isinstance(node, Variable):
        return ()
    node_type = node_type_of(node)
    if node_type is None:
        return None
    try:
        children, _ = node_type.flatten(node)
    except (GraphError, TypeError, ValueError):  # a node its backend cannot flatten now: a
        return ()  # repr must still print, without this node's statistics
    return [child for _, child in children]


def _variable_stats(variable: Variable) -> Stats:
    size = variable_size(variable)
    return {variable.stats_type or variable.var_type: size} if size.size else {}


def _add(total: Stats, more: Stats) -> None:
    for var_type, size in more.items():
        total[var_type] = total[var_type] + size if var_type in total else size


def stats_comment(stats: Stats) -> str:
    """` # Param: 44 (176 B), BatchStat: 8 (32 B), Total: 52 (208 B)`; empty for none."""
    if not stats:
        return ""
    text = " # " + ", ".join(f"{t.__name__}: {size}" for t, size in stats.items())
    if len(stats) > 1:
        text += f", Total: {sum(stats.values(), SizeBytes(0, 0))}"
    return text


class _Line(NamedTuple):
    """A child waiting to be rendered: `{label}{text}{suffix}` at `depth`."""

    label: str
    value: object
    suffix: str
    depth: int


class _Renderer:
    def __init__(self) -> None:
        self._stats = _Statistics()
        self._seen: set[int] = set()
        self._holds_nodes: dict[int, bool] = {}

    def lines(self, root: object) -> list[str]:
        out: list[str] = []
        stack: list[_Line | str] = [_Line("", root, "", 0)]
        while stack:
            entry = stack.pop()
            if isinstance(entry, str):
                out.append(entry)
                continue
            label, value, suffix, depth = entry
            pad = INDENT * depth
            block = self._block(value)
            if block is None:
                text = leaf_text(value).replace("\n", "\n" + pad)
                out.append(f"{pad}{label}{text}{suffix}")
            elif id(value) in self._seen:
                out.append(f"{pad}{label}{block.head}...{block.tail}{suffix}")
            elif not block.items:
                out.append(f"{pad}{label}{block.head}{block.tail}{suffix}")
            else:
                if not isinstance(value, Variable):  # Flax prints shared Variables again
                    self._seen.add(id(value))
                out.append(f"{pad}{label}{block.head}{self._comment(value, block)}")
                stack.append(f"{pad}{block.tail}{suffix}")
                last = len(block.items) - 1
                for i in range(last, -1, -1):
                    item_label, child = block.items[i]
                    stack.append(_Line(item_label, child, "" if i == last else ",", depth + 1))
        return out

    def _block(self, value: object) -> ReprBlock | None:
        if isinstance(value, Variable):
            return variable_block(value)
        make: Callable[[object], ReprBlock] | None = getattr(type(value), "_repr_block", None)
        if make is not None and not isinstance(value, type):
            return make(value)
        container = _plain_container(value)
        if container is not None and self._holds_graph_nodes(container):
            return _container_block(container)
        return None

    def _comment(self, value: object, block: ReprBlock) -> str:
        if isinstance(value, Variable):
            size = variable_size(value)
            return f" # {size}" if size.size else ""
        return stats_comment(self._stats.of(value)) if block.counted else ""

    def _holds_graph_nodes(self, container: list | tuple | dict) -> bool:
        """Whether a plain container holds Variables or nodes with blocks (directly or in
        plain containers), memoized so nested containers are looked at once."""
        known = self._holds_nodes.get(id(container))
        if known is not None:
            return known
        self._holds_nodes[id(container)] = False  # a container holding itself
        values = container.values() if isinstance(container, dict) else container
        found = any(
            isinstance(v, Variable)
            or hasattr(type(v), "_repr_block")
            or ((inner := _plain_container(v)) is not None and self._holds_graph_nodes(inner))
            for v in values
        )
        self._holds_nodes[id(container)] = found
        return found


def _plain_container(value: object) -> list | tuple | dict | None:
    """`value` if it is a plain list, tuple or dict (not a subclass: a NamedTuple or a
    tracked `List` shows its own way), else None."""
    return value if type(value) in (list, tuple, dict) else None  # type: ignore[return-value]  # one of the three


def variable_block(variable: Variable) -> ReprBlock:
    """A Variable as a block: its value, then its metadata, one per line."""
    items: list[tuple[str, object]] = [("value=", variable.get_raw_value())]
    items += [(f"{k}=", v) for k, v in variable.metadata.items()]
    if variable.hijax:  # named by its Variable class, as Flax shows one
        items.append(("hijax=", True))
    return ReprBlock(f"{variable.var_type.__name__}(", ")", items)


def _container_block(container: list | tuple | dict) -> ReprBlock:
    if isinstance(container, dict):
        return ReprBlock("{", "}", [(f"{k!r}: ", v) for k, v in container.items()])
    open_, close = ("[", "]") if isinstance(container, list) else ("(", ")")
    return ReprBlock(open_, close, [("", v) for v in container])


def leaf_text(value: object) -> str:
    """The one-line form of a value that is no block: `f32[3,4]` for an array (`f32[] 0.5`
    for a scalar), `float32` for a class, `<function relu>` for a function, plain lists,
    tuples and dicts of those, else the repr."""
    container = _plain_container(value)
    if isinstance(container, dict):
        return "{" + ", ".join(f"{k!r}: {leaf_text(v)}" for k, v in container.items()) + "}"
    if container is not None:
        texts = [leaf_text(v) for v in container]
        if isinstance(container, tuple):
            return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"
        return "[" + ", ".join(texts) + "]"
    if isinstance(value, type):
        return value.__name__
    if is_shaped(value):
        return _array_text(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return f"<function {value.__qualname__}>"
    return repr(value)


def _array_text(value: object) -> str:
    text = describe_leaf(value)
    if getattr(value, "ndim", 1) != 0 or jnp.issubdtype(value.dtype, jax.dtypes.prng_key):  # type: ignore[attr-defined]  # is_shaped(value): an array
        return text
    try:
        return f"{text} {value.item()}"  # type: ignore[attr-defined]  # a 0-d array has .item()
    except (TypeError, ValueError, NotImplementedError, AttributeError):  # a tracer, a key
        return text
