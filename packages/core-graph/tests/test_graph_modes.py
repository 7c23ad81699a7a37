"""Graph functions with Flax NNX 0.12's semantics: States hold live Variables, `merge`
uses the Variables it is given, `update` adds paths, bare Variables and arrays are
graphs, static attributes stay in the GraphDef; tree mode (`graph=False`) and
`set_graph_mode`."""

import copy
import dataclasses
import functools
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import (
    BatchStat,
    GraphDef,
    GraphError,
    GraphState,
    List,
    Object,
    Param,
    State,
    StaticEntry,
    TreeDef,
    TreeNodeDef,
    Variable,
    VariableEntry,
    check_tree,
    clone,
    data,
    flatten,
    graphdef,
    iter_graph,
    merge,
    set_graph_mode,
    split,
    state,
    unpack,
    update,
)


class Linear(Object):
    def __init__(self, din, dout):
        self.kernel = Param(jnp.ones((din, dout)))
        self.bias = Param(jnp.zeros((dout,)))
        self.sizes = [din, dout]  # a static plain list


class MLP(Object):
    def __init__(self):
        self.layers = List([Linear(2, 3), Linear(3, 1)])
        self.count = BatchStat(jnp.array(0.0))


def test_states_hold_the_live_variables_and_merge_uses_them():
    model = MLP()
    graphdef_, params, rest = split(model, Param, ...)
    assert params["layers"][0]["kernel"] is model.layers[0].kernel
    assert state(model)["count"] is model.count
    rebuilt = merge(graphdef_, params, rest)
    assert rebuilt is not model and rebuilt.layers[0] is not model.layers[0]
    assert rebuilt.layers[0].kernel is model.layers[0].kernel  # shared, as in Flax 0.12
    copied = merge(graphdef_, params, rest, copy=True)
    assert copied.layers[0].kernel is not model.layers[0].kernel
    np.testing.assert_array_equal(copied.layers[0].kernel.value, 1.0)


def test_tree_map_of_a_state_gives_new_variables_for_update():
    model = MLP()
    doubled = jax.tree.map(lambda x: x * 2, state(model, Param))
    assert doubled["layers"][0]["kernel"] is not model.layers[0].kernel
    np.testing.assert_array_equal(model.layers[0].kernel.value, 1.0)
    update(model, doubled)
    np.testing.assert_array_equal(model.layers[0].kernel.value, 2.0)


def test_clone_copies_variables_and_optionally_arrays():
    model = MLP()
    twin = clone(model)
    assert twin.layers[0].kernel is not model.layers[0].kernel
    assert twin.layers[0].kernel.value is model.layers[0].kernel.value
    deep = clone(model, arrays=True)
    assert deep.layers[0].kernel.value is not model.layers[0].kernel.value
    shallow = clone(model, variables=False)
    assert shallow.layers[0].kernel is model.layers[0].kernel
    with pytest.raises(ValueError, match="copies the Variables too"):
        clone(model, variables=False, arrays=True)


def test_update_adds_paths_under_existing_nodes():
    model = MLP()
    extra = State({"layers": {0: {"scale": Param(jnp.full(3, 2.0))}}, "note": jnp.ones(1)})
    update(model, extra)
    assert (
        isinstance(model.layers[0].scale, Param)
        and model.layers[0].scale is not (extra["layers"][0]["scale"])
    )
    np.testing.assert_array_equal(model.note, 1.0)
    assert ("layers", 0, "scale") in state(model).flat_state()


def test_update_adds_paths_under_plain_dicts_and_lists():
    """Flax 0.12: a plain dict's static entry (an int) or a new key is written in place."""
    node = {"a": {"b": 1, "c": Param(jnp.array(2)), "d": 3}, "l": [jnp.ones(1)]}
    update(node, {"a": {"b": 4, "c": jnp.array(10), "e": Param(5)}})
    assert node["a"]["b"] == 4 and node["a"]["d"] == 3 and int(node["a"]["c"][...]) == 10
    assert isinstance(node["a"]["e"], Param)
    with pytest.raises(GraphError, match=r"does not have: t\[0\], and cannot(.|\n)*no State paths"):
        update({"t": (1,)}, {"t": {0: jnp.ones(1)}})  # a tuple cannot take a new child
    node = {"a": {"b": 1}, "t": (1,)}
    with pytest.raises(GraphError, match=r"does not have: t\[0\]"):
        update(node, {"a": {"b": 2}, "t": {0: jnp.ones(1)}})  # one good path, one bad
    assert node == {"a": {"b": 1}, "t": (1,)}  # nothing was written


def test_update_refuses_paths_without_a_parent_and_changes_nothing():
    model = MLP()
    before = model.layers[0].kernel.value
    bad = State.from_flat_path(
        {("layers", 0, "kernel"): Param(jnp.zeros((2, 3))), ("ghost", "w"): Param(1)}
    )
    with pytest.raises(GraphError, match=r"does not have: ghost\.w, and cannot add them"):
        update(model, bad)
    assert model.layers[0].kernel.value is before and not hasattr(model, "ghost")


def test_bare_variables_and_arrays_are_graphs():
    v = Param(jnp.ones(2), tag="t")
    graphdef_, leaf = split(v)
    assert leaf is v and state(v) is v and isinstance(graphdef_, GraphDef)
    assert merge(graphdef_, leaf) is v
    assert merge(graphdef_, leaf, copy=True) is not v
    array = jnp.arange(3.0)
    graphdef_, leaf = split(array)
    assert leaf is array and merge(graphdef_, jnp.zeros(3)).shape == (3,)
    update(v, Param(jnp.zeros(2)))
    np.testing.assert_array_equal(v.value, 0.0)
    with pytest.raises(GraphError, match="exactly one non-empty state"):
        update(v, Param(1), Param(2))


@pytest.mark.parametrize("graph", [True, False])
def test_a_bare_leaf_split_with_filters_is_its_own_state(graph):
    x = jnp.array(1.0)
    graphdef_, matched, rest = split(x, jax.Array, ..., graph=graph)
    assert matched is x and isinstance(rest, State) and not rest
    assert merge(graphdef_, matched, rest) is x
    v = Param(jnp.ones(2))
    graphdef_, params, rest = split(v, Param, ..., graph=graph)
    assert params is v and merge(graphdef_, params, rest) is v


def test_tree_mode_graphdefs_are_graphdefs():
    """Flax NNX 0.12: `split(..., graph=False)` returns a GraphDef too."""
    treedef = graphdef(MLP(), graph=False)
    assert isinstance(treedef, TreeDef) and isinstance(treedef, GraphDef)
    assert issubclass(TreeDef, GraphDef) and not issubclass(GraphDef, TreeDef)
    assert isinstance(unpack(MLP(), graph=False)._graphdef, GraphDef)
    assert graphdef(MLP()) != treedef and treedef != graphdef(MLP())


def test_tree_mode_graphdef_nodes_are_flax_nnx_view_of_the_pytree():
    """Flax NNX 0.12: a tree-mode GraphDef's `nodes` start with a `TreeNodeDef` (its root
    type, pytree structure and leaves in sorted path order), then a VariableDef per
    Variable, numbered in that order (which `flatten(..., graph=False)` returns)."""
    model = MLP()
    treedef = graphdef(model, graph=False)
    root, *variables = treedef.nodes
    assert isinstance(root, TreeNodeDef) and root.type is MLP
    assert root.treedef == jax.tree.structure(model, is_leaf=_is_var)
    paths = [path for path, _ in root.path_index]
    assert paths == sorted(paths, key=str) and set(paths) == set(treedef.paths)
    _, leaves = flatten(model, graph=False, with_paths=False)
    positions = jax.tree.leaves(model, is_leaf=_is_var)
    assert [positions[i] for _, i in root.path_index] == leaves  # leaves in sorted order
    assert [(v.type, v.index) for v in variables] == [
        (type(leaf), i) for i, leaf in enumerate(leaves) if isinstance(leaf, Variable)
    ]
    assert type(variables[0]) is VariableEntry and hash(root) == hash(treedef.nodes[0])
    bare, raw = graphdef(Param(1.0), graph=False), graphdef(jnp.ones(2), graph=False)
    assert bare.nodes[0].type is Param and bare.nodes[0].path_index == (((), 0),)
    assert bare.nodes[1] == VariableEntry(Param, 0)
    assert raw.nodes == (TreeNodeDef(type(jnp.ones(2)), raw.treedef, (((), 0),)),)
    assert not isinstance(graphdef(model).nodes[0], TreeNodeDef)  # graph mode's


def test_static_attributes_are_kept_whole_and_keep_the_cache():
    model = MLP()
    entry = graphdef(model).root.child("layers").child(0).child("sizes")
    assert isinstance(entry, StaticEntry)
    first = graphdef(model)
    assert graphdef(model) is first  # a static plain list does not stop caching
    assert graphdef(MLP()) == first  # equal static lists: equal GraphDefs
    rebuilt = merge(*split(model))
    assert rebuilt.layers[1].sizes == [3, 1] and type(rebuilt.layers[1].sizes) is list


def test_graphdefs_are_static_under_jit_and_subscriptable():
    model = MLP()
    graphdef_, state_ = split(model)

    @jax.jit
    def forward(pair, x):
        inner = merge(*pair)
        return x @ inner.layers[0].kernel

    assert forward((graphdef_, state_), jnp.ones((1, 2))).shape == (1, 3)
    assert GraphDef[MLP] is not None


def test_tree_mode_split_merge_state_and_graphdef():
    model = MLP()
    treedef, params, rest = split(model, Param, ..., graph=False)
    assert params["layers"][0]["kernel"] is model.layers[0].kernel
    rebuilt = merge(treedef, params, rest)
    assert type(rebuilt) is MLP and rebuilt.layers[1].sizes == [3, 1]
    raw = jax.tree.map(lambda v: v.value, state(model, graph=False), is_leaf=_is_var)
    again = merge(treedef, raw)  # raw values become Variables of their recorded types
    assert type(again.count) is BatchStat
    assert graphdef(model, graph=False) == treedef
    assert clone(model, graph=False).layers[0].kernel is not model.layers[0].kernel


def _is_var(x):
    return isinstance(x, Variable)


def test_tree_mode_refuses_sharing_cycles_and_graph_only_objects():
    model = MLP()
    model.tied = model.layers[0].kernel
    # Flax NNX 0.12's text: what, both paths, then the ways out
    shared = r"Duplicate Param\(.*\)\nfound at paths:\n\n  - layers\[0\]\.kernel\n  - tied\n"
    with pytest.raises(ValueError, match=shared + r"(.|\n)*graph=True to split"):
        split(model, graph=False)

    class GraphOnly(Object, pytree=False):
        pass

    holder = MLP()
    holder.inner = GraphOnly()
    with pytest.raises(ValueError, match=r"pytree=False.*Found at path: inner"):
        state(holder, graph=False)
    looped = MLP()
    looped.layers.append(looped)
    with pytest.raises(
        ValueError,
        match=r"Cycle detected for MLP\nfound at paths:\n\n  - <root>\n  - layers\[2\]\n",
    ):
        list(iter_graph(looped, graph=False))


@pytest.mark.parametrize(
    "call",
    [
        lambda g: split(g, graph=False),
        lambda g: state(g, graph=False),
        lambda g: graphdef(g, graph=False),
        lambda g: clone(g, graph=False),
        lambda g: check_tree((g, 1), name="jit"),
    ],
    ids=["split", "state", "graphdef", "clone", "check_tree"],
)
def test_tree_mode_finds_cycles_before_jax_flattens(call):
    looped = MLP()
    looped.layers[1].back = looped  # JAX's recursive flatten would never return
    with pytest.raises(ValueError, match=r"Cycle detected for MLP\nfound at paths:\n\n  - "):
        call(looped)
    assert jax.tree.leaves([[1], (2,)]) == [1, 2]  # the interpreter still flattens


def test_tree_mode_cycle_error_names_both_paths():
    a = List([1])
    b = List([2, a])
    a.append(b)
    match = r"Cycle detected for List\nfound at paths:\n\n  - <root>\n  - \[1\]\[1\]\n"
    with pytest.raises(ValueError, match=match + r"(.|\n)*graph=True to split"):
        split(a, graph=False)
    held = MLP()
    held.extra = data([held])  # through a plain list: checked, never cached
    with pytest.raises(ValueError, match=r"  - <root>\n  - extra\[0\]\n"):
        state(held, graph=False)


def test_tree_mode_cycle_check_sees_changes_after_a_check():
    model = MLP()
    inner = model.layers[0]
    split(inner, graph=False)  # proven acyclic, cached on inner
    split(model, graph=False)  # reuses inner's proof
    assert "_object__acyclic" in vars(inner) and "_object__acyclic" in vars(model)
    inner.back = model  # a change below both proofs
    with pytest.raises(ValueError, match=r"  - <root>\n  - layers\[0\]\.back\n"):
        split(model, graph=False)
    del inner.back
    assert len(state(model, graph=False).flat_state()) == 5
    plain = MLP()
    plain.extra = data([jnp.ones(1)])
    split(plain, graph=False)
    plain.extra.append(plain)  # untracked: the earlier check was not cached
    with pytest.raises(ValueError, match="Cycle detected for MLP"):
        split(plain, graph=False)


def test_tree_mode_allows_a_node_without_variables_twice():
    class Static(Object):
        def __init__(self):
            self.rate = 0.5

    twice = Static()
    treedef, flat = split([twice, twice], graph=False)  # not a cycle: JAX copies it
    assert len(flat) == 0
    rebuilt = merge(treedef, flat)
    assert rebuilt[0].rate == rebuilt[1].rate == 0.5


def test_tree_mode_refuses_a_shared_mutable_array():
    ref = jax.new_ref(jnp.ones(2))
    with pytest.raises(ValueError, match=r"Duplicate Ref(.|\n)*  - \[0\]\n  - \[1\]\n"):
        split([ref, ref], graph=False)
    _, flat = split([ref, jax.new_ref(jnp.ones(2))], graph=False)
    assert flat[0] is ref


def test_tree_mode_proofs_are_not_copied():
    model = MLP()
    split(model, graph=False)
    assert "_object__acyclic" not in vars(copy.deepcopy(model))
    assert "_object__acyclic" not in vars(pickle.loads(pickle.dumps(model.layers)))


@functools.partial(jax.tree_util.register_dataclass, data_fields=["a"], meta_fields=["b"])
@dataclasses.dataclass(frozen=True)
class Pair:
    a: object
    b: str


def test_graph_mode_walks_a_pytree_held_as_data():
    class Holder(Object):
        def __init__(self):
            self.pair = data(Pair(Param(jnp.array(1.0)), "tag"))
            self.none = data(None)

    model = Holder()
    graphdef_, state_ = split(model)
    assert state_["pair"]["a"] is model.pair.a  # the pytree's leaves are State leaves
    rebuilt = merge(graphdef_, state_)
    assert type(rebuilt.pair) is Pair and rebuilt.pair is not model.pair
    assert rebuilt.pair.a is model.pair.a and rebuilt.pair.b == "tag"
    assert rebuilt.none is None
    other = Holder()
    other.pair = data(Pair(Param(jnp.array(1.0)), "other"))
    assert graphdef(other) != graphdef_  # its static fields are in the GraphDef
    update(model, {"pair": {"a": jnp.array(2.0)}})  # into the Variable it holds
    assert float(model.pair.a[...]) == 2.0
    model.raw = data(Pair(jnp.array(1.0), "raw"))  # a raw array: no place to write it
    with pytest.raises(TypeError, match="cannot set 'a' of a Pair in place"):
        update(model, {"raw": {"a": jnp.array(2.0)}})
    assert float(model.raw.a) == 1.0


@pytest.mark.parametrize("graph", [True, False])
def test_unpack_bundles_the_graphdef_and_merge_takes_graph_states(graph):
    model = MLP()
    params, rest = unpack(model, Param, ..., graph=graph)
    assert isinstance(params, GraphState) and params._graphdef == rest._graphdef
    assert params["layers"][0]["kernel"] is model.layers[0].kernel
    rebuilt = merge(params, rest)
    assert type(rebuilt) is MLP and rebuilt.layers[0].kernel is model.layers[0].kernel
    whole = unpack(model, graph=graph)
    assert set(whole) == {"layers", "count"} and "count" in whole
    keyed = jax.tree_util.tree_flatten_with_path(whole)[0]
    assert [p for p, _ in keyed] == [
        p for p, _ in jax.tree_util.tree_flatten_with_path(state(model, graph=graph))[0]
    ]  # the State's own paths
    doubled = jax.tree.map(lambda x: x * 2, whole)
    assert isinstance(doubled, GraphState)
    assert float(merge(doubled).count[...]) == 0.0


def test_graph_states_read_write_and_update_like_their_state():
    model = MLP()
    whole = unpack(model)
    whole["count"] = jnp.array(5.0)
    whole.layers[0].kernel = jnp.zeros((2, 3))
    update(model, whole)
    assert float(model.count[...]) == 5.0 and float(model.layers[0].kernel[...].sum()) == 0.0


def test_graph_states_are_graph_nodes_like_their_state():
    model = MLP()
    whole = unpack(model)
    params = state(whole, Param)  # what an optimizer does with `unpack`ed gradients
    assert params == state(model, Param)
    graphdef_, rest = split(whole)
    rebuilt = merge(graphdef_, rest)
    assert isinstance(rebuilt, GraphState) and rebuilt._graphdef is whole._graphdef
    update(whole, {"count": jnp.array(3.0)})
    assert float(whole["count"][...]) == 3.0


def test_merge_of_graph_states_checks_them():
    params, _ = unpack(MLP(), Param, ...)
    with pytest.raises(ValueError, match="Expected GraphState object at position 1"):
        merge(params, state(MLP()))
    with pytest.raises(ValueError, match="GraphDef must be the same"):
        merge(params, unpack(Linear(1, 1)))
    with pytest.raises(
        TypeError, match=r"merge\(\) missing 1 required positional argument: 'state'(.|\n)*no State"
    ):
        merge(graphdef(MLP()))


def test_tree_mode_iter_graph_goes_children_first():
    paths = [path for path, _ in iter_graph(Linear(1, 1), graph=False)]
    assert paths == [("bias",), ("kernel",), ()]


def test_tree_mode_iter_graph_yields_objects_without_data_as_nodes():
    class Static(Object):  # a pytree node with no children (all attributes static)
        def __init__(self):
            self.rate = 0.5

    holder = MLP()
    holder.extra = Static()
    found = dict(iter_graph(holder, graph=False))
    assert found[("extra",)] is holder.extra
    assert ("extra", "rate") not in found  # static attributes are not pytree leaves


def test_set_graph_mode_plain_context_and_decorator():
    model = MLP()
    with set_graph_mode(False):
        assert isinstance(graphdef(model), TreeDef)
    assert not isinstance(graphdef(model), TreeDef)

    @set_graph_mode(False)
    def tree_graphdef():
        return graphdef(model)

    assert isinstance(tree_graphdef(), TreeDef) and not isinstance(graphdef(model), TreeDef)
    set_graph_mode(False)
    try:
        assert isinstance(graphdef(model), TreeDef)
    finally:
        set_graph_mode(True)
    with pytest.raises(TypeError, match="takes True or False"):
        set_graph_mode("no")


def test_states_graphdefs_and_treedefs_copy_and_pickle():
    import copy
    import pickle

    model = MLP()
    graphdef_, state_ = split(model)
    merge(graphdef_, state_)  # the GraphDef now holds a compiled builder
    treedef = graphdef(model, graph=False)
    sub = state_["layers"][0]
    for obj in (state_, sub, graphdef_, treedef):
        for twin in (copy.copy(obj), copy.deepcopy(obj), pickle.loads(pickle.dumps(obj))):
            assert twin == obj and twin is not obj
    again = pickle.loads(pickle.dumps(state_))
    assert again["layers"][0]["kernel"] is not model.layers[0].kernel
    assert merge(pickle.loads(pickle.dumps(graphdef_)), again).layers[1].sizes == [3, 1]
    assert list(copy.deepcopy(sub).flat_state()) == [("bias",), ("kernel",)]
