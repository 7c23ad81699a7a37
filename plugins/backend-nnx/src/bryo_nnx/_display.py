"""`display`: show Modules, `Rngs`, States and Variables as readable trees.

In a notebook (IPython) with treescope installed, `display` hands each node to
`treescope.display`, which draws a foldable tree through the nodes' `__treescope_repr__`
(as Flax NNX's `nnx.display` does). Elsewhere it prints indented text: arrays show as
`f32[20,10]` (scalars with their value), typed keys as `key<fry>[]`, and a module's
heading counts its parameters, so `display(model)` fits on a screen.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType

import jax.numpy as jnp

from bryo_graph import GraphError, Object, Param, State, Variable, object_attributes
from bryo_pytree import describe_leaf, is_shaped

_INDENT = "  "


def display(*nodes: object) -> None:
    """Show each of `nodes` (Modules, Rngs, States, Variables, ...): with treescope in a
    notebook, as treescope's foldable tree; otherwise printed as an indented text tree."""
    treescope = _notebook_treescope()
    for node in nodes:
        if treescope is not None:
            treescope.display(node, ignore_exceptions=True)
        else:
            print(render(node))


def _notebook_treescope() -> ModuleType | None:
    """treescope, when it is installed and this runs inside IPython; None otherwise."""
    ipython = sys.modules.get("IPython")
    if ipython is None or getattr(ipython, "get_ipython", lambda: None)() is None:
        return None
    try:
        import treescope
    except ImportError:
        return None
    return treescope


def render(node: object) -> str:
    """The text `display` prints for `node`."""
    return _render(node, 0, set())


def _render(node: object, depth: int, seen: set[int]) -> str:
    if isinstance(node, Variable):
        return _render_variable(node)
    if isinstance(node, State):
        return "State(" + _render_mapping(node.to_nested(), depth, seen, "{", "}") + ")"
    if isinstance(node, Object):
        return _render_object(node, depth, seen)
    if isinstance(node, Mapping):
        return _render_mapping(node, depth, seen, "{", "}")
    if isinstance(node, list | tuple) and node and any(_is_branch(v) for v in node):
        open_, close = ("[", "]") if isinstance(node, list) else ("(", ")")
        return _render_items([(None, v) for v in node], depth, seen, open_, close)
    return _leaf(node)


def _is_branch(value: object) -> bool:
    return isinstance(value, Object | Variable | State | Mapping | list | tuple)


def _leaf(value: object) -> str:
    if isinstance(value, list | tuple):
        return repr(type(value)(_Raw(_leaf(v)) for v in value))
    if isinstance(value, type) and hasattr(value, "dtype"):  # jnp.float32 and friends
        return f"jnp.{jnp.dtype(value).name}"
    if callable(value) and hasattr(value, "__qualname__") and not isinstance(value, type):
        return f"<function {value.__qualname__}>"
    if is_shaped(value):
        text = describe_leaf(value)
        if getattr(value, "ndim", 1) == 0 and not jnp.issubdtype(value.dtype, jnp.dtype("V")):  # type: ignore[attr-defined]  # is_shaped(value) checked above
            try:
                return f"{text} {value.item()}"  # type: ignore[attr-defined]  # a 0-d array (checked above) has .item()
            except (TypeError, ValueError, NotImplementedError):  # a tracer, or a key
                return text
        return text
    return repr(value)


class _Raw(str):
    def __repr__(self) -> str:
        return str(self)


def _render_variable(variable: Variable) -> str:
    fields = [f"value={_leaf(variable.get_raw_value())}"]
    fields += [f"{k}={v!r}" for k, v in variable.metadata.items()]
    return f"{variable.type.__name__}({', '.join(fields)})"


def _render_object(node: Object, depth: int, seen: set[int]) -> str:
    name = type(node).__name__
    if id(node) in seen:
        return f"{name}(...)  # shared, shown above"
    seen.add(id(node))
    items = object_attributes(node)
    if not items:
        return f"{name}()"
    count, size = _param_totals(node)
    note = f"  # {count:,} params ({_bytes(size)})" if count else ""
    lines = [f"{name}({note}"]
    pad = _INDENT * (depth + 1)
    for key, value in items:
        lines.append(f"{pad}{key}={_render(value, depth + 1, seen)},")
    lines.append(_INDENT * depth + ")")
    return "\n".join(lines)


def _render_mapping(mapping: Mapping, depth: int, seen: set[int], open_: str, close: str) -> str:
    return _render_items(list(mapping.items()), depth, seen, open_, close)


def _render_items(items: list, depth: int, seen: set[int], open_: str, close: str) -> str:
    if not items:
        return open_ + close
    pad = _INDENT * (depth + 1)
    lines = [open_]
    for key, value in items:
        label = "" if key is None else f"{key!r}: "
        lines.append(f"{pad}{label}{_render(value, depth + 1, seen)},")
    lines.append(_INDENT * depth + close)
    return "\n".join(lines)


def _param_totals(node: Object) -> tuple[int, int]:
    from bryo_graph import variables

    count = size = 0
    try:
        params = variables(node, Param)
    except GraphError:  # not a graph bryo can walk: show no totals
        return 0, 0
    for variable in params.flat_state().values():
        value = variable.value
        n = int(getattr(value, "size", 0))
        count += n
        size += n * getattr(getattr(value, "dtype", None), "itemsize", 0)
    return count, size


def _bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
