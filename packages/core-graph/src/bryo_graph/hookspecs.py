"""The graph extension point: backends describe how their node types flatten and rebuild.

Hook family `graph`. A backend's entry point goes in group `bryo.graph.<module>`, one per
top-level module its types come from (`bryo.graph.equinox`): bryo imports the backend the
first time a graph lookup meets a class whose MRO holds a class of that module. Answers
are merged by `bryo_plugins.hook_table`: for a type two plugins declare, the plugin called
first wins and a `PluginConflictWarning` names both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bryo_plugins import hookspec

from ._nodes import NodeType


@hookspec
def bryo_graph_node_types() -> Sequence[NodeType]:
    """Return the `NodeType`s this plugin knows.

    Each says how a node type flattens into `(key, child)` pairs and is rebuilt, whether
    it is mutable (NNX-style objects with shared references) or immutable (Equinox-style
    pytrees), and what kind of `Variable` its raw array leaves stand for. See
    `bryo_graph.NodeType` for the contract. Called once per plugin-manager epoch.
    """
    ...


@hookspec
def bryo_graph_logical_axes() -> Mapping[type, Callable[[object], Sequence[str | None]]]:
    """Value types that carry their own axis names, each with `value -> names`.

    `names` has one entry per dimension, None for an unnamed one. Sharding reads these
    names as the value's logical axes when its Variable has no `sharding` metadata (a
    named-axis backend's arrays). Called once per plugin-manager epoch; the mappings of all
    plugins are merged (the plugin called first wins a type both declare).
    """
    ...
