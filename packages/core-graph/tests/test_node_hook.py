"""Node types come from plugins through `bryo_graph_node_types`."""

import dataclasses

import pytest

from bryo_graph import GraphError, NodeType, Param, graphdef, merge, split
from bryo_plugins import hookimpl


@dataclasses.dataclass(frozen=True)
class Pair:
    left: object
    right: object
    label: str = "pair"


class PairBackend:
    @hookimpl
    def bryo_graph_node_types(self):
        return (
            NodeType(
                Pair,
                flatten=lambda node: ((("left", node.left), ("right", node.right)), node.label),
                unflatten=lambda cls, label, children: cls(*(c for _, c in children), label),
                leaf_type=Param,
            ),
        )


def test_a_plugin_registers_an_immutable_node_type(bryo_plugin_manager):
    import numpy as np

    unregistered = Pair(1, 2)
    assert split(unregistered)[1] is unregistered  # not a pytree either: a leaf, as in Flax
    bryo_plugin_manager.register(PairBackend())
    tree = Pair(np.ones(2), Pair(np.zeros(1), 3, "inner"))
    graphdef_, state = split(tree)
    assert set(state.flat_state()) == {("left",), ("right", "left")}
    assert state["left"].type is Param  # the backend's leaf rule
    rebuilt = merge(graphdef_, state)
    assert rebuilt.right.label == "inner" and rebuilt.right.right == 3
    assert graphdef(rebuilt) == graphdef_


def test_unregistering_the_plugin_forgets_the_type(bryo_plugin_manager):
    plugin = PairBackend()
    bryo_plugin_manager.register(plugin)
    graphdef_, state = split(Pair(1, 2))
    bryo_plugin_manager.unregister(plugin)
    with pytest.raises(GraphError, match="no backend registers the node type Pair"):
        merge(graphdef_, state)
