"""Rich display in notebooks: treescope renderings of MoX nodes.

treescope (an optional dependency) calls `__treescope_repr__(path, subtree_renderer)` on
what it shows; `Mox`, `ModuleCall` and `Equation` answer through these functions, which
import treescope only while it renders (and nothing of `_ir`: the nodes come in as
arguments, so this module stays below `_ir`). A node renders as a constructor whose fields are
its inputs' and outputs' types, its attributes (a module call's) or params (an
equation's), and its children: a MoX folds open module by module, down to equations.
"""

from __future__ import annotations

from typing import Any

from ._types import type_str

MODULE_COLOR = "#cdeaff"
EQUATION_COLOR = "#eeeeee"


def _types(avals: tuple[Any, ...]) -> list[str]:
    return [type_str(aval) for aval in avals]


def _signature(node: Any) -> dict[str, object]:
    return {"inputs": _types(node.in_avals), "outputs": _types(node.out_avals)}


def render_mox(mox: Any, path: str | None, subtree_renderer: Any) -> Any:
    """The root: its inputs' and outputs' types, added parameters, and its nodes."""
    from treescope import repr_lib

    attributes: dict[str, object] = _signature(mox)
    if mox.extra_params:
        attributes["extra_params"] = {k: type_str(v) for k, v in mox.extra_params}
    attributes["nodes"] = list(mox.block.nodes)
    return repr_lib.render_object_constructor(
        type(mox), attributes, path, subtree_renderer, color=MODULE_COLOR
    )


def render_module_call(call: Any, path: str | None, subtree_renderer: Any) -> Any:
    """A module call: type, name, attributes, state counts, types, and its body's nodes."""
    from treescope import repr_lib

    attributes = {
        "type": call.type,
        "name": call.name,
        "attrs": dict(call.attrs),
        "n_state": call.n_state,
        "n_state_out": call.n_state_out,
        **_signature(call),
        "nodes": list(call.body.nodes),
    }
    return repr_lib.render_object_constructor(
        type(call), attributes, path, subtree_renderer, color=MODULE_COLOR
    )


def render_equation(equation: Any, path: str | None, subtree_renderer: Any) -> Any:
    """An equation: its primitive, name, params (as text) and types."""
    from treescope import repr_lib

    attributes: dict[str, object] = {"primitive": equation.primitive.name}
    if equation.name:
        attributes["name"] = equation.name
    attributes["params"] = {
        k: str(v) for k, v in equation.params.items() if not _is_region(equation, k)
    }
    attributes.update(_signature(equation))
    return repr_lib.render_object_constructor(
        type(equation), attributes, path, subtree_renderer, color=EQUATION_COLOR
    )


def _is_region(equation: Any, param: str) -> bool:
    return any(region.param == param for region in equation.regions)
