"""`flatten(..., ref_index=, ref_outer_index=)` / `unflatten(..., index_ref=,
outer_index_outer_ref=)`: Flax NNX's index maps, one numbering over several calls."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bryo_graph import (
    Dict,
    GraphError,
    IndexMap,
    Object,
    Param,
    RefEntry,
    RefMap,
    State,
    data,
    flatten,
    unflatten,
)


class Cell(Object):
    def __init__(self, w=1.0):
        self.w = Param(jnp.asarray(w))


class Pair(Object):
    def __init__(self):
        self.a = Cell(1.0)
        self.b = Cell(2.0)


def test_a_ref_map_is_keyed_by_identity_and_converts_to_an_index_map():
    left, right = [1], [1]  # equal, unhashable, distinct
    refs = RefMap([(left, 0)])
    refs[right] = 1
    assert refs[left] == 0 and refs[right] == 1 and len(refs) == 2
    assert list(refs) == [left, right] and [1] not in refs
    del refs[left]
    assert left not in refs and right in refs
    indices = IndexMap.from_refmap(refs)
    assert indices == {1: right} and indices[1] is right
    back = RefMap.from_indexmap(indices)
    assert back[right] == 1 and len(back) == 1
    assert "RefMap({list: 1})" == repr(back)


def test_ref_index_receives_the_nodes_and_variables_flatten_numbered():
    shared = {"a": 1, "b": Param(2)}
    tree = [shared, 3, shared, Param(4)]
    refs = RefMap()
    graphdef, flat = flatten(tree, ref_index=refs, graph=True)
    assert [path for path, _ in flat] == [(0, "b"), (3,)]
    # the two Variables, not the plain list and dicts (copied at each occurrence, as pytrees)
    assert len(refs) == 2 and shared["b"] in refs and tree[3] in refs
    numbered = {entry.index for entry in graphdef.nodes if hasattr(entry, "type")}
    assert refs[shared["b"]] in numbered and refs[tree[3]] in numbered
    _, leaves = flatten(tree, ref_index=RefMap(), with_paths=False)
    assert leaves == [shared["b"], tree[3]]


def test_a_second_flatten_with_the_same_ref_index_refers_to_what_the_first_met():
    pair = Pair()
    refs = RefMap()
    first, first_state = flatten(pair, ref_index=refs)
    second, second_state = flatten(pair.a, ref_index=refs)  # met whole: a reference
    third, third_state = flatten([pair.b.w, Param(5.0)], ref_index=refs)
    assert second.root == RefEntry(refs[pair.a]) and len(second_state) == 0
    assert third.root.children[0][1] == RefEntry(refs[pair.b.w])
    assert [path for path, _ in third_state] == [(1,)]
    held = [refs[node] for node in (pair, pair.a, pair.a.w, pair.b, pair.b.w)]
    assert sorted(held) == list(range(5))
    assert refs[third_state[0][1]] > 4  # new indices come past the held ones

    built = IndexMap()
    pair2 = unflatten(first, first_state, index_ref=built)
    a2 = unflatten(second, second_state, index_ref=built)
    tree3 = unflatten(third, third_state, index_ref=built)
    assert pair2 is not pair and a2 is pair2.a and tree3[0] is pair2.b.w
    assert built[refs[pair.a]] is pair2.a
    assert RefMap.from_indexmap(built)[pair2.b] == refs[pair.b]


def test_flattening_one_by_one_with_a_ref_map_matches_the_gaps_it_is_given():
    cell, other = Cell(), Cell(3.0)
    refs = RefMap({cell: 7})  # a numbering made elsewhere: new indices come past 7
    graphdef, _ = flatten([cell, other], ref_index=refs)
    assert graphdef.root.children[0][1] == RefEntry(7)
    assert min(refs[other], refs[other.w]) > 7


@pytest.mark.skipif(not hasattr(jax, "new_ref"), reason="jax.new_ref needs JAX >= 0.7.2")
def test_a_raw_array_ref_is_numbered_once_and_shared():
    class Holder(Object):
        def __init__(self):
            self.a = data(jax.new_ref(jnp.ones(2)))
            self.b = self.a

    holder = Holder()
    refs = RefMap()
    graphdef, flat = flatten(holder, ref_index=refs)
    assert len(flat) == 1 and len(refs) == 2 and holder.a in refs  # the Holder and its ref
    rebuilt = unflatten(graphdef, flat, index_ref=IndexMap())
    assert rebuilt.a is rebuilt.b


def _through_jit(model, edit):
    """Flax's hand-written lifted transform: outer flatten, inner unflatten/edit/flatten
    under `jax.jit`, outer unflatten into the original objects."""
    outer_refs = RefMap()
    graphdef, state = flatten(model, ref_index=outer_refs)
    state = State.from_flat_path(state)

    def pure(graphdef, state):
        inner_built = IndexMap()
        inner = unflatten(graphdef, state, index_ref=inner_built)
        edit(inner)
        graphdef, state = flatten(
            inner, ref_index=RefMap(), ref_outer_index=RefMap.from_indexmap(inner_built)
        )
        return State.from_flat_path(state), graphdef

    state, graphdef = jax.jit(pure, static_argnums=0)(graphdef, state)
    return unflatten(graphdef, state, outer_index_outer_ref=IndexMap.from_refmap(outer_refs))


def test_outer_indices_carry_identity_across_jit_through_swaps_and_new_objects():
    pair = Pair()
    a, b = pair.a, pair.b

    def edit(inner):
        inner.a, inner.b = inner.b, inner.a
        inner.a.w[...] = inner.a.w[...] * 10
        inner.c = Cell(5.0)  # made inside: a new object outside
        inner.me = inner  # a new reference to an outer node

    same = _through_jit(pair, edit)
    assert same is pair and pair.a is b and pair.b is a and pair.me is pair
    assert float(b.w[...]) == 20.0 and float(a.w[...]) == 1.0
    assert isinstance(pair.c, Cell) and float(pair.c.w[...]) == 5.0


def test_outer_variables_are_swapped_in_place():
    pair = Pair()
    wa, wb = pair.a.w, pair.b.w

    def edit(inner):
        inner.a.w, inner.b.w = inner.b.w, inner.a.w

    _through_jit(pair, edit)
    assert pair.a.w is wb and pair.b.w is wa


def test_bad_index_maps_are_refused_naming_the_argument():
    cell = Cell()
    with pytest.raises(TypeError, match=r"`ref_index` must be an `nnx.graphlib.RefMap`.*dict"):
        flatten(cell, ref_index={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`ref_outer_index` must be"):
        flatten(cell, ref_outer_index=IndexMap())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tree mode \(`graph=False`\).*pass `graph=True`"):
        flatten(cell, ref_index=RefMap(), graph=False)
    refs = RefMap()
    graphdef, state = flatten(cell, ref_index=refs)
    again, empty = flatten(cell, ref_index=refs)
    with pytest.raises(ValueError, match=r"reference to node #0, which `index_ref` does not"):
        unflatten(again, empty, index_ref=IndexMap())
    with pytest.raises(TypeError, match=r"`index_ref` must be an `nnx\.graphlib\.IndexMap`"):
        unflatten(graphdef, state, index_ref=RefMap())  # type: ignore[arg-type]
    tree_def, tree_state = flatten(cell, graph=False)
    with pytest.raises(ValueError, match="tree mode's"):
        unflatten(tree_def, tree_state, index_ref=IndexMap())


def test_an_outer_object_of_another_type_is_refused_before_anything_changes():
    cell = Cell()
    graphdef, state = flatten(cell, ref_index=RefMap())
    box = Dict(w=Param(jnp.asarray(9.0)))
    with pytest.raises(GraphError, match=r"outer_index_outer_ref=\)` got a Cell at index 0"):
        unflatten(graphdef, state, outer_index_outer_ref=IndexMap({0: box}))
    assert float(box["w"][...]) == 9.0 and set(box) == {"w"}


@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_split_calls_sharing_maps_rebuild_the_sharing_of_one_flatten(picks):
    cells = [Cell(float(i)) for i in range(4)]
    roots = [cells[i] for i in picks]
    refs, built = RefMap(), IndexMap()
    pieces = [flatten(root, ref_index=refs) for root in roots]
    rebuilt = [unflatten(graphdef, flat, index_ref=built) for graphdef, flat in pieces]
    for i, j in ((i, j) for i in range(len(picks)) for j in range(len(picks))):
        assert (rebuilt[i] is rebuilt[j]) == (picks[i] == picks[j])
    for root, new in zip(roots, rebuilt, strict=True):
        assert new is not root and float(new.w[...]) == float(root.w[...])
