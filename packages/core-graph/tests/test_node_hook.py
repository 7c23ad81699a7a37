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
    assert "from plugin 'lists-only', hook `bryo_graph_node_types`, returned list" in message
    assert "not a pair while flattening the node at pair." in message
    assert "`flatten(node)` must return `(children, aux)`" in message


# Each function of a backend's NodeType misbehaving in turn: the error names the plugin,
# the function, the node's path and the contract, chains what the function raised (and
# keeps its type), and the model is left as it was.


class Box:
    """A mutable node: made empty by `create`, filled by `init_key`."""

    def __init__(self, **children):
        vars(self).update(children)


def _boom(*args):
    raise ZeroDivisionError("boom")


def _box_set(node, key, child):
    vars(node)[key] = child


def _set_all_but_extra(node, key, child):
    if key == "extra":
        raise ZeroDivisionError("boom")
    vars(node)[key] = child


def _node_types(pair=None, box=None):
    pair_fields = {"flatten": _flatten_pair, "unflatten": _unflatten_pair, "leaf_type": Param}
    box_fields = {
        "flatten": lambda node: (sorted(vars(node).items()), None),
        "create": lambda cls, aux: object.__new__(cls),
        "init_key": _box_set,
        "set_key": _box_set,
        "pop_key": lambda node, key: vars(node).pop(key),
        "leaf_type": Param,
    }

    class Misbehaving:
        @hookimpl
        def bryo_graph_node_types(self):
            return [
                NodeType(Pair, **{**pair_fields, **(pair or {})}),
                NodeType(Box, **{**box_fields, **(box or {})}),
            ]

    return Misbehaving()


def _unflatten_pair(cls, label, children):
    return cls(*(c for _, c in children), label)


def _model():
    import numpy as np

    inner = Pair(np.zeros(1), np.ones(3), "in")
    return {"outer": Pair(np.ones(2), Box(inner=inner, bias=np.ones(1)))}


@pytest.mark.parametrize(
    ("pair", "box", "action", "expected"),
    [
        (
            {"flatten": _boom},
            None,
            "split",
            "`flatten` .* raised ZeroDivisionError: boom while flattening the node at outer\\.",
        ),
        (
            {"flatten": lambda node: ([node.left, node.right], None)},
            None,
            "split",
            "`flatten` .* returned a child .* that is not a `\\(key, child\\)` pair while "
            "flattening the node at outer",
        ),
        (
            {"flatten": lambda node: (3, None)},
            None,
            "split",
            "`flatten` .* returned children 3, not a list of `\\(key, child\\)` pairs",
        ),
        (
            {"flatten": lambda node: ([("left", node.left)], [node.label])},
            None,
            "split",
            "`flatten` .* returned an unhashable aux \\['pair'\\] .* at outer\\.",
        ),
        ({"static_keys": _boom}, None, "split", "`static_keys` .* raised ZeroDivisionError"),
        ({"static_keys": lambda node: 3}, None, "split", "`static_keys` .* returned int 3"),
        ({"leaf_metadata": _boom}, None, "split", "`leaf_metadata` .* raised ZeroDivision"),
        ({"leaf_metadata": lambda node: [1]}, None, "split", "`leaf_metadata` .* returned list"),
        (
            {"unflatten": _boom},
            None,
            "merge",
            "`unflatten` .* raised ZeroDivisionError: boom "
            "while rebuilding the node at outer.right.inner",
        ),
        (
            {"unflatten": lambda cls, aux, children: None},
            None,
            "merge",
            "`unflatten` .* returned None while rebuilding the node at outer.right.inner",
        ),
        (None, {"create": _boom}, "merge", "`create` .* raised .* at outer.right"),
        (None, {"create": lambda cls, aux: None}, "merge", "`create` .* returned None"),
        (None, {"init_key": _boom}, "merge", "`init_key` .* raised .* at outer.right"),
        (None, {"init_items": _boom}, "merge", "`init_items` .* raised .* at outer.right"),
        (
            None,
            {"set_key": _set_all_but_extra},
            "update",
            "`set_key` .* raised .* while `update` wrote outer.right.extra",
        ),
        (
            None,
            {"pop_key": _boom},
            "pop",
            "`pop_key` .* raised .* while `pop` removed outer.right.bias",
        ),
    ],
)
def test_a_misbehaving_node_type_function_is_named(
    bryo_plugin_manager, pair, box, action, expected
):
    """Each failed deep inside bryo naming nothing (ZeroDivisionError, "'int' object is not
    iterable", "unhashable type: 'list'", "'NoneType' object has no attribute ...")."""
    import numpy as np

    from bryo_graph import pop, update
    from bryo_plugins import PluginCallbackError

    bryo_plugin_manager.register(_node_types(pair, box), name="acme-nodes")
    model = _model()
    box_node = model["outer"].right
    before = {key: np.array(value) for key, value in vars(box_node).items() if key == "bias"}
    with pytest.raises(PluginCallbackError) as raised:
        if action == "split":
            split(model)
        elif action == "merge":
            merge(*_split_well(model, bryo_plugin_manager))
        elif action == "update":  # `bias` is written first, then undone
            update(model, {"outer": {"right": {"bias": np.zeros(1), "extra": np.ones(1)}}})
        else:
            pop(model, lambda path, value: path[-1] == "bias")
    message = str(raised.value)
    assert re.search(expected, message), message
    assert "from plugin 'acme-nodes', hook `bryo_graph_node_types`" in message
    assert "BRYO_BLOCK_PLUGINS=acme-nodes" in message
    if action != "pop":
        assert "Your model is unchanged." in message
        assert vars(box_node)["bias"] == before["bias"] and "extra" not in vars(box_node)
    error = raised.value
    cause = error.__cause__
    if cause is not None:  # it raised: the error chains it and is one of its kind too
        assert isinstance(cause, ZeroDivisionError | TypeError) and isinstance(error, type(cause))
    else:
        assert isinstance(error, GraphError)


def _split_well(model, pm):
    """The model split by the well-behaved node types; the misbehaving ones merge it."""
    good = _node_types()
    bad = pm.get_plugin("acme-nodes")
    pm.unregister(bad)
    pm.register(good, name="acme-nodes")
    parts = split(model)
    pm.unregister(good)
    pm.register(bad, name="acme-nodes")
    return parts


def test_a_failing_function_is_named_by_a_compiled_merge_too(bryo_plugin_manager):
    """A GraphDef merged often is built by generated code calling the functions directly:
    a failure there is named as by the first merges."""
    from bryo_plugins import PluginCallbackError

    failing = []

    def unflatten(cls, label, children):
        if failing:
            raise ValueError("no more Pairs")
        return _unflatten_pair(cls, label, children)

    bryo_plugin_manager.register(_node_types({"unflatten": unflatten}), name="acme-nodes")
    graphdef_, state = split(_model())
    for _ in range(20):  # compiled after 16 builds
        merge(graphdef_, state)
    assert graphdef_._builder is not None
    failing.append(True)
    with pytest.raises(ValueError, match="no more Pairs") as raised:  # still a ValueError
        merge(graphdef_, state)
    assert isinstance(raised.value, PluginCallbackError)
    assert "`unflatten` of NodeType" in str(raised.value)
    assert "from plugin 'acme-nodes'" in str(raised.value)


def test_a_raising_unchanged_check_is_named(bryo_plugin_manager):
    from bryo_plugins import PluginCallbackError

    bryo_plugin_manager.register(_node_types({"unchanged": _boom}), name="acme-nodes")
    import numpy as np

    root = Pair(np.ones(1), 0)
    split(root)
    with pytest.raises(PluginCallbackError, match=r"`unchanged` of NodeType.* raised Zero"):
        split(root)  # the cached flattening is checked


def test_errors_of_built_in_node_types_pass_as_they_are(bryo_plugin_manager):
    """bryo's own node types (of a package's built-in plugin) say what is wrong themselves:
    there is no third-party plugin to name."""
    from bryo_plugins import PluginCallbackError, PluginSource

    bryo_plugin_manager.register(_node_types({"flatten": _boom}), name="own")
    bryo_plugin_manager.sources["own"] = PluginSource("bryo-core-graph", None, builtin=True)
    with pytest.raises(ZeroDivisionError) as raised:
        split(_model())
    assert not isinstance(raised.value, PluginCallbackError)


def test_a_graph_error_a_backend_raises_is_its_message_and_passes(bryo_plugin_manager):
    """A backend telling the user what to change raises a GraphError: not named as the
    plugin's bug (Equinox's backend refuses an `update` it cannot do so)."""
    from bryo_plugins import PluginCallbackError

    def refuses(node):
        raise GraphError("split the State the last call returned")

    bryo_plugin_manager.register(_node_types({"flatten": refuses}), name="acme-nodes")
    with pytest.raises(GraphError, match="split the State the last call") as raised:
        split(_model())
    assert not isinstance(raised.value, PluginCallbackError)
