"""YAX's functions that bryo spells otherwise: `map_mox`, `dump_xml`, `dump_yson`.

`from bryo import mox as yax` gives YAX's public names (see docs/mox.md, "Coming from
YAX"); the node classes carry YAX's attribute names themselves (`_ir`), the query
dialect is `_dialect`, and `sub` takes YAX's replacements (`_sub`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from ._errors import MoxError
from ._ir import ModuleCall, Mox, Node, is_root
from ._serialize import dump


def map_mox(fn: Callable[[Node], Any], tree: Mox) -> None:
    """Call `fn` on every node of `tree`, the root first, in document order (YAX's walk).

    The walk enters the children of a node only when `fn` returns a `Mox` (the root or a
    module call, usually the node itself): returning anything else skips its subtree.
    Equations' sub-jaxprs are not entered. Iterative: as deep as the model nests.

    Example:
        >>> types = []
        >>> map_mox(lambda n: types.append(type(n).__name__) or n, mox)  # doctest: +SKIP
    """
    if not is_root(tree):
        raise MoxError(f"`tree` must be a Mox (from `make_mox`), got {type(tree).__name__}.")
    stack: list[Node] = [tree]
    while stack:
        node = stack.pop()
        result = fn(node)
        if is_root(result) or isinstance(result, ModuleCall):
            stack.extend(reversed(result.children))


def dump_xml(expr: Mox, fileobj: IO[str] | IO[bytes]) -> None:
    """Write `expr` as bryo's XML file to the open file object `fileobj` (text or binary):
    `dump(expr, fileobj, format="xml")`. `load(fileobj, format="xml")` reads it back."""
    dump(expr, fileobj, format="xml")


def dump_yson(expr: Mox, fileobj: IO[bytes] | IO[str]) -> None:
    """Write `expr` as bryo's YSON file to the open file object `fileobj` (binary or
    text): `dump(expr, fileobj, format="yson")`. `load(fileobj, format="yson")` reads it
    back."""
    dump(expr, fileobj, format="yson")
