"""Node types come from plugins through `bryo_graph_node_types`."""

import dataclasses
import re

import pytest

from bryo_graph import GraphError, NodeType, Param, flat_graph, graphdef, merge, split
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


class Ticket:
    """An immutable node that its library can void behind bryo's back (as Equinox empties
    an `eqx.nn.State` that `state.set` used)."""

    def __init__(self, value):
        self.value = value
        self.void = False


def _ticket_flatten(node):
    if node.void:
        raise ValueError("this Ticket was voided")
    return (("value", node.value),), None


class TicketBackend:
    def __init__(self):
        self.checked = 0

    def unchanged(self, node):
        self.checked += 1
        return not node.void

    @hookimpl
    def bryo_graph_node_types(self):
        return (
            NodeType(
                Ticket,
                flatten=_ticket_flatten,
                unflatten=lambda cls, aux, children: cls(children[0][1]),
                unchanged=self.unchanged,
            ),
        )


@pytest.mark.parametrize("wrap", [lambda t: t, lambda t: Pair(t, 0)], ids=["root", "inside"])
def test_unchanged_is_asked_before_a_cached_flattening_is_reused(bryo_plugin_manager, wrap):
    import numpy as np

    backend = TicketBackend()
    bryo_plugin_manager.register(backend)
    bryo_plugin_manager.register(PairBackend())
    ticket = Ticket(np.ones(2))
    root = wrap(ticket)
    flat = flat_graph(root)
    assert flat_graph(root) is flat and backend.checked == 1  # reused: it said unchanged
    ticket.void = True
    with pytest.raises(ValueError, match="voided"):  # walked again: `flatten` refuses
        split(root)
    with pytest.raises(ValueError, match="voided"):
        split(root)


def test_a_cached_flattening_does_not_keep_a_checked_root_alive(bryo_plugin_manager):
    import gc
    import weakref

    import numpy as np

    bryo_plugin_manager.register(TicketBackend())
    ticket = Ticket(np.ones(2))
    split(ticket)
    gone = weakref.ref(ticket)
    del ticket
    gc.collect()
    assert gone() is None


def _flatten_pair(node):
    return (("left", node.left), ("right", node.right)), node.label


def _answering(**fields):
    class Incomplete:
        @hookimpl
        def bryo_graph_node_types(self):
            return [NodeType(Pair, **fields)]

    return Incomplete()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"flatten": _flatten_pair}, "give exactly one of `unflatten`.*it has neither"),
        (
            {"flatten": _flatten_pair, "unflatten": print, "create": print},
            "exactly one of .* it has both",
        ),
        ({"flatten": _flatten_pair, "create": print}, "needs `init_key"),
        ({"flatten": None, "unflatten": print}, "`flatten` is required"),
        ({"flatten": _flatten_pair, "unflatten": "print"}, "`unflatten` must be a function"),
        ({"flatten": _flatten_pair, "unflatten": print, "leaf_type": "Param"}, "`leaf_type` must"),
    ],
)
def test_an_incomplete_node_type_is_refused_naming_the_plugin(bryo_plugin_manager, fields, message):
    """A node type with neither `unflatten` nor `create` was accepted, and `merge` then
    failed with "'NoneType' object is not callable", naming neither plugin nor type."""
    bryo_plugin_manager.register(_answering(**fields), name="incomplete")
    with pytest.warns(RuntimeWarning, match="'incomplete' failed in hook `bryo_graph_node_types`"):
        split({"a": 1})  # the table is built: the plugin is disabled, the rest works
    [failure] = bryo_plugin_manager.failures
    assert f"NodeType({__name__}.Pair)" in str(failure.error)
    assert re.search(message, str(failure.error))


def test_a_flatten_answering_something_else_than_a_pair_is_named(bryo_plugin_manager):
    """It failed with "too many values to unpack (expected 2)", naming nothing."""

    class ListsOnly:
        @hookimpl
        def bryo_graph_node_types(self):
            flatten = lambda node: [("left", node.left), ("right", node.right)]  # no aux
            return [NodeType(Pair, flatten=flatten, unflatten=lambda cls, aux, ch: None)]

    bryo_plugin_manager.register(ListsOnly(), name="lists-only")
    with pytest.raises(GraphError) as raised:
        split({"pair": Pair(1, 2)})
    message = str(raised.value)
    assert f"The `flatten` of NodeType({__name__}.Pair)" in message
    assert "returned list for the node at pair; it must return a pair `(children, aux)`" in message
