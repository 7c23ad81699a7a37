"""`to_tree` / `from_tree` / `NodeStates`: pytrees holding graphs as pure pytrees and back."""

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import (
    BatchStat,
    GraphError,
    NodeEntry,
    NodeStates,
    Object,
    Param,
    RefEntry,
    SplitContext,
    clear_non_graph_nodes,
    from_tree,
    to_tree,
    update_context,
)


class Stats(Object):
    def __init__(self, size=3):
        self.w = Param(jnp.zeros(()))
        self.mean = BatchStat(jnp.arange(float(size)))


def test_shared_objects_stay_shared_and_other_leaves_pass_through():
    m = Stats()
    pure = to_tree((m, 1, {"again": m}))
    first, again = pure[0], pure[2]["again"]
    assert isinstance(first, NodeStates) and pure[1] == 1
    assert isinstance(first.graphdef.nodes[0], NodeEntry)
    assert isinstance(again.graphdef.nodes[0], RefEntry) and len(again.state) == 0
    out = from_tree(pure)
    assert out[0] is out[2]["again"] and out[0] is not m and out[1] == 1


def test_pure_tree_goes_through_jit_and_update_context_keeps_identity():
    m = Stats()
    with update_context("tt"):
        pure = to_tree((m, {"again": m}), ctxtag="tt")

        @jax.jit
        def f(pure):
            inner, again = from_tree(pure, ctxtag="tt", is_inner=True)
            assert inner is again["again"]
            inner.w.value = inner.w.value + 2
            return to_tree((inner, again, Stats(1)), ctxtag="tt")

        out, again, new = from_tree(f(pure), ctxtag="tt", is_inner=False)
    assert out is m and again["again"] is m and float(m.w.value) == 2.0
    assert isinstance(new, Stats) and new.mean.value.shape == (1,)


def test_prefix_reaches_split_fn_and_vmap_in_axes():
    m = Stats(size=4)

    def split_fn(ctx: SplitContext, path, prefix, leaf):
        assert prefix == "axes"
        return NodeStates.from_split(*ctx.split(leaf, Param, BatchStat))

    pure = to_tree((m,), prefix=("axes",), split_fn=split_fn)
    in_axes = (NodeStates.from_prefixes((None, 0)),)
    total = jax.vmap(lambda node: node.states[0]["w"] + node.states[1]["mean"], in_axes=in_axes)(
        *pure
    )
    assert total.shape == (4,)


def test_inconsistent_prefixes_for_a_shared_variable_are_refused():
    m = Stats()
    to_tree((m, 1, m), prefix=(0, None, 0))
    with pytest.raises(ValueError, match="Inconsistent aliasing detected"):
        to_tree((m, 1, m), prefix=(0, None, 1))


def test_a_prefix_that_does_not_fit_the_tree_is_refused():
    with pytest.raises(ValueError, match="must be a tree prefix"):
        to_tree((Stats(), Stats()), prefix=(0, 0, 0))


def test_from_tree_refuses_a_leaf_that_is_not_node_states():
    with pytest.raises(GraphError, match=r"found a Stats at \[0\]"):
        from_tree(
            (Stats(),),
            is_node_leaf=lambda x: isinstance(x, Stats),
            is_leaf=lambda x: isinstance(x, Stats),
        )


def test_node_states_without_graphdef_says_how_to_make_one():
    with pytest.raises(ValueError, match="from_split"):
        _ = NodeStates.from_states({}).graphdef
    with pytest.raises(ValueError, match="exactly one State"):
        _ = NodeStates.from_states({}, {}).state


def test_clear_non_graph_nodes_keeps_only_graph_objects():
    m = Stats()
    assert clear_non_graph_nodes((m, 1, [2, m.w])) == (m, None, [None, m.w])
