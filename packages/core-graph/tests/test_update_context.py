"""`update_context`, `split_context` and `merge_context`: identity across a function boundary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import (
    Dict,
    GraphError,
    NodeEntry,
    Object,
    Param,
    RefEntry,
    State,
    UpdateContext,
    Variable,
    current_update_context,
    data,
    merge_context,
    split_context,
    update_context,
)


class Cell(Object):
    def __init__(self, w=1.0, count=0):
        self.w = Param(jnp.asarray(w))
        self.count = data(jnp.asarray(count))


class Pair(Object):
    def __init__(self):
        self.left = Cell(1.0)
        self.right = self.left


def _round_trip(model, inner_fn, *, jit=False):
    """Split outside, merge/edit/split inside (maybe under jit), merge outside."""
    with update_context("t"):
        with split_context("t") as ctx:
            graphdef, state = ctx.split(model)

        def inside(graphdef, state):
            with merge_context("t", inner=True) as ctx:
                inner = ctx.merge(graphdef, state)
            out = inner_fn(inner)
            with split_context("t") as ctx:
                return ctx.split((inner, out))

        graphdef, state = (jax.jit(inside) if jit else inside)(graphdef, state)
        with merge_context("t", inner=False) as ctx:
            return ctx.merge(graphdef, state)


@pytest.mark.parametrize("jit", [False, True])
def test_outer_merge_updates_the_original_objects_in_place(jit):
    model = Pair()
    left = model.left
    kernel = left.w

    def edit(inner):
        inner.left.w.value = inner.left.w.value + 1
        inner.left.count = inner.left.count + 5
        inner.extra = Cell(7.0)  # a new node
        inner.me = inner  # a cycle
        return Cell(3.0)

    same, new = _round_trip(model, edit, jit=jit)
    assert same is model and model.left is left and model.right is left
    assert left.w is kernel and float(kernel.value) == 2.0
    assert int(left.count) == 5
    assert isinstance(model.extra, Cell) and float(model.extra.w.value) == 7.0
    assert model.me is model
    assert isinstance(new, Cell) and float(new.w.value) == 3.0


def test_attributes_removed_inside_are_removed_outside():
    model = Pair()

    def drop(inner):
        del inner.right

    _round_trip(model, drop)
    assert not hasattr(model, "right") and hasattr(model, "left")


def test_splits_of_one_split_context_share_references():
    model = Pair()
    with split_context() as ctx:
        g1, s1 = ctx.split(model)
        g2, s2 = ctx.split(model.left)
    assert isinstance(g1.nodes[0], NodeEntry) and isinstance(g2.nodes[0], RefEntry)
    assert len(s2) == 0
    with merge_context() as ctx:
        m1 = ctx.merge(g1, s1)
        m2 = ctx.merge(g2, s2)
    assert m2 is m1.left and m1 is not model


def test_split_with_filters_and_flatten():
    model = Cell()
    with split_context() as ctx:
        _, params, rest = ctx.split(model, Param, ...)
        graphdef, flat = ctx.flatten(Cell())
    assert list(params) == ["w"] and list(rest) == ["count"]
    assert dict(flat).keys() == {("w",), ("count",)}
    with merge_context() as ctx:
        rebuilt = ctx.unflatten(graphdef, flat)
    assert isinstance(rebuilt, Cell)


def test_bare_variable_keeps_its_identity():
    v = Param(jnp.asarray(1.0))

    def bump(inner):
        inner.value = inner.value + 1

    assert _round_trip(v, bump)[0] is v
    assert float(v.value) == 2.0


def test_update_context_is_a_decorator_and_current_update_context_finds_it():
    @update_context("deco")
    def f():
        return current_update_context("deco")

    ctx = f()
    assert isinstance(ctx, UpdateContext) and ctx.tag == "deco"
    with pytest.raises(ValueError, match=r"No update context found for tag 'deco'"):
        current_update_context("deco")


def test_nested_update_contexts_of_one_tag():
    with update_context("n") as outer, update_context("n") as inner:
        assert current_update_context("n") is inner
    with update_context("n") as outer:
        assert current_update_context("n") is outer


def test_tagged_contexts_need_an_open_update_context():
    with pytest.raises(ValueError, match=r"update_context\('missing'\)"):
        with split_context("missing"):
            pass
    with pytest.raises(ValueError, match="No update context"):
        with merge_context("missing", inner=True):
            pass


def test_tagged_merge_context_needs_inner():
    with update_context("x"), pytest.raises(ValueError, match="needs `inner`"):
        with merge_context("x"):
            pass


def test_contexts_used_after_their_with_block_are_refused():
    with split_context() as sctx:
        graphdef, state = sctx.split(Cell())
    with pytest.raises(GraphError, match=r"after its `with` block ended"):
        sctx.split(Cell())
    assert not hasattr(sctx, "ctxtag")
    with merge_context() as mctx:
        pass
    with pytest.raises(GraphError, match=r"after its `with` block ended"):
        mctx.merge(graphdef, state)


def test_reference_to_a_graph_not_merged_in_this_context_is_refused():
    model = Pair()
    with split_context() as ctx:
        ctx.split(model)
        g2, s2 = ctx.split(model.left)
    with merge_context() as ctx, pytest.raises(GraphError, match="no earlier `merge`"):
        ctx.merge(g2, s2)


def test_outer_merge_of_a_mismatched_graphdef_changes_nothing():
    model = Dict(a=Cell(1.0))
    with update_context("m"):
        with split_context("m") as ctx:
            ctx.split(model)
        with split_context() as ctx:  # not this context's inner split: index 0 is a Cell
            graphdef, state = ctx.split(Cell(5.0))
        with merge_context("m", inner=False) as ctx, pytest.raises(GraphError, match="index 0"):
            ctx.merge(graphdef, state)
    assert isinstance(model, Dict) and float(model["a"].w.value) == 1.0


def test_state_of_a_reference_is_empty_and_merge_accepts_states():
    model = Cell()
    with split_context() as ctx:
        graphdef, state = ctx.split(model)
    with merge_context() as ctx:
        rebuilt = ctx.merge(graphdef, State({}), state)
    np.testing.assert_array_equal(rebuilt.w.value, model.w.value)
    assert isinstance(rebuilt.w, Variable)


def test_array_ref_variables_send_back_only_what_was_made_inside():
    from bryo_graph import ArrayRefOutput, NoUpdate, with_vars

    model = with_vars(Dict(a=Cell(1.0)), ref=True)
    kernel = model["a"].w
    with update_context("r"):
        with split_context("r") as ctx:
            graphdef, state = ctx.split(model)
        with merge_context("r", inner=True) as ctx:
            inner = ctx.merge(graphdef, state)
        inner["a"].w[...] = 5.0  # written through the shared ref
        made = with_vars(Cell(2.0), ref=True)
        with split_context("r") as ctx:
            graphdef, state = ctx.split((inner, made))
        assert isinstance(state[0]["a"]["w"].raw_value, NoUpdate)
        assert isinstance(state[1]["w"].raw_value, ArrayRefOutput)
        assert (
            len(jax.tree.leaves(state)) == 3
        )  # one ArrayRefOutput and the two `count` data leaves
        with merge_context("r", inner=False) as ctx:
            same, new = ctx.merge(graphdef, state)
    assert same is model and model["a"].w is kernel and float(kernel[...]) == 5.0
    assert new is not made and float(new.w[...]) == 2.0 and new.w.ref


def test_deep_graphs_go_through_an_update_context():
    root = node = Object()
    for _ in range(3000):  # deeper than Python's recursion limit
        node.child = Object()
        node = node.child
    node.w = Param(jnp.asarray(0.0))

    def bump(inner):
        leaf = inner
        while hasattr(leaf, "child"):
            leaf = leaf.child
        leaf.w.value = leaf.w.value + 1

    assert _round_trip(root, bump)[0] is root
    assert float(node.w.value) == 1.0
