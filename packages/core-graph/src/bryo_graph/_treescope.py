"""Rich display in notebooks: treescope renderings of Objects (modules), Variables, States.

treescope (an optional dependency) calls `__treescope_repr__(path, subtree_renderer)` on
the objects it shows; the graph's classes answer through these functions, which import
treescope only when it is rendering, so core-graph never needs it. A module renders as a
constructor of its public attributes (submodules and Variables folded inside), a Variable
as its type with its value and metadata, a State as its type around its nested mapping.
Arrays are rendered by treescope itself (shape, dtype, and a value summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Colours treescope uses for the node kinds (as Flax NNX does: modules vs Variables).
MODULE_COLOR = "#cdeaff"
VARIABLE_COLOR = "#ffe5c2"
STATE_COLOR = "#e6f4d7"


def render_object(node: object, path: str | None, subtree_renderer: Any) -> Any:
    """A graph Object (a module, `Rngs`, ...) as `Type(attribute=..., ...)`: its public
    attributes, in the order they were set."""
    from treescope import repr_lib

    attributes = {k: v for k, v in vars(node).items() if not k.startswith("_")}
    return repr_lib.render_object_constructor(
        type(node), attributes, path, subtree_renderer, color=MODULE_COLOR
    )


def render_variable(variable: Any, path: str | None, subtree_renderer: Any) -> Any:
    """A Variable as `Param(value=..., sharding=...)`: its type, value and metadata."""
    from treescope import repr_lib

    attributes: dict[str, object] = {"value": variable.value, **variable.metadata}
    return repr_lib.render_object_constructor(
        variable.type, attributes, path, subtree_renderer, color=VARIABLE_COLOR
    )


def render_state(state: Mapping[Any, Any], path: str | None, subtree_renderer: Any) -> Any:
    """A State as `State({...})` around its nested mapping of Variables."""
    from treescope import repr_lib

    return repr_lib.render_dictionary_wrapper(
        type(state), dict(state.items()), path, subtree_renderer, color=STATE_COLOR
    )
