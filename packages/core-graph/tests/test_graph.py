"""split/merge/state/update/clone/pop/iter_graph on mutable graphs (seed 000)."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_filters import PathContains
from bryo_graph import (
    BatchStat,
    Dict,
    GraphDef,
    GraphError,
    Intermediate,
    LeafEntry,
    List,
    NodeEntry,
    Object,
    Param,
    RefEntry,
    State,
    StaticEntry,
    Variable,
    VariableEntry,
    VariableState,
    clone,
    graph,
    graphdef,
    iter_graph,
    merge,
    pop,
    split,
    state,
    update,
    variables,
)


class Foo(Object):
    def __init__(self):
        self.a = Param(0)
        self.b = BatchStat(True)


class Linear(Object):
    def __init__(self, din, dout, seed=0):
        rng = np.random.default_rng(seed)  # numpy keeps model building free of jax dispatch
        self.kernel = Param(rng.normal(size=(din, dout)).astype(np.float32))
        self.bias = Param(np.zeros((dout,), np.float32))
        self.din, self.dout = din, dout

    def __call__(self, x):
        y = x @ self.kernel.value
        return y + jnp.broadcast_to(self.bias.value, y.shape)


class MLP(Object):
    def __init__(self, sizes):
        self.layers = List([Linear(a, b, i) for i, (a, b) in enumerate(itertools.pairwise(sizes))])
        self.count = Variable(np.array(0))

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


class SpecialParam(Param):
    pass


def test_split_by_type_as_in_the_seed():
    graphdef_, params, batch_stats = split(Foo(), Param, BatchStat)
    assert params.flat_state() == {("a",): params["a"]}
    assert params["a"].type is Param and params["a"].value == 0
    assert batch_stats["b"].type is BatchStat and batch_stats["b"].value is True
    assert isinstance(graphdef_, GraphDef)


def test_filtering_is_order_dependent():
    class Bar(Object):
        def __init__(self):
            self.a = Param(0)
            self.b = SpecialParam(0)

    bar = Bar()
    _, params, special = split(bar, Param, SpecialParam)
    assert set(params.flat_state()) == {("a",), ("b",)} and not special.flat_state()
    _, special, params = split(bar, SpecialParam, Param)
    assert set(special.flat_state()) == {("b",)} and set(params.flat_state()) == {("a",)}


def test_split_with_no_matching_filter_names_path_and_value():
    model = MLP([2, 3])
    with pytest.raises(ValueError, match=r"No filter matched path count .*Variable"):
        split(model, Param)
    assert isinstance(model.count, Variable)  # untouched


def test_round_trip_keeps_values_and_behaviour():
    model = MLP([4, 8, 2])
    x = jnp.ones((3, 4))
    graphdef_, params, rest = split(model, Param, ...)
    copy = merge(graphdef_, params, rest)
    assert copy is not model and copy.layers[0] is not model.layers[0]
    np.testing.assert_allclose(copy(x), model(x))
    assert copy.layers[1].din == 8


def test_shared_references_and_cycles_survive():
    model = MLP([2, 2, 2])
    model.shared = model.layers[0]
    model.tied = model.layers[1].kernel
    model.parent = model  # a cycle
    graphdef_, state_ = split(model)
    assert ("tied",) not in state_.flat_state()  # a second reference is a ref, not a leaf
    copy = merge(graphdef_, state_)
    assert copy.shared is copy.layers[0]
    assert copy.tied is copy.layers[1].kernel
    assert copy.parent is copy


def test_a_plain_dict_met_twice_is_copied_its_variables_stay_shared():
    inner = {"w": Param(jnp.ones(2)), "raw": jnp.zeros(2), "n": 1}
    tree = [inner, inner]
    graphdef_, state_ = split(tree)
    assert set(state_.flat_state()) == {(0, "w"), (0, "raw"), (1, "raw")}
    rebuilt = merge(graphdef_, state_)
    assert rebuilt[0] is not rebuilt[1] and rebuilt[0]["w"] is rebuilt[1]["w"]
    shared = Dict(inner)  # a graph node stays one node
    rebuilt = merge(*split(List([shared, shared])))
    assert rebuilt[0] is rebuilt[1]


def test_a_plain_list_containing_itself_is_refused():
    looped: list = [Param(1.0)]
    looped.append(looped)
    with pytest.raises(GraphError, match=r"plain list at \[1\] contains itself.*nnx.List"):
        split(looped)
    assert len(looped) == 2


def test_graphdef_is_hashable_and_structural():
    a, b = MLP([2, 3]), MLP([2, 3])
    assert graphdef(a) == graphdef(b) and hash(graphdef(a)) == hash(graphdef(b))
    assert graphdef(a) != graphdef(MLP([2, 4]))
    assert {graphdef(a): 1}[graphdef(b)] == 1


def test_graphdef_entries_are_named_records():
    model = MLP([2, 3])
    model.tied = model.layers[0].kernel
    model.raw = Dict({"w": np.ones(2)})
    root = graphdef(model).root
    assert isinstance(root, NodeEntry) and root.type is MLP and root.index == 0
    kernel = root.child("layers").child(0).child("kernel")
    assert isinstance(kernel, VariableEntry) and kernel.type is Param
    assert root.child("tied") == RefEntry(kernel.index)
    assert root.child("raw").child("w") == LeafEntry(Variable)
    assert root.child("layers").child(0).child("din") == StaticEntry(2)
    with pytest.raises(KeyError):
        root.child("missing")


def test_graphdef_entries_of_different_kinds_never_compare_equal():
    # Equal fields, different kinds: a Python int static vs a reference, a class kept
    # as a static value vs a raw array shown as that class.
    assert RefEntry(3) != StaticEntry(3)
    assert StaticEntry(Param) != LeafEntry(Param)
    static_class, array_leaf = Object(), Object()
    static_class.x, array_leaf.x = Variable, np.zeros(2)
    assert graphdef(static_class) != graphdef(array_leaf)


def test_resplitting_an_unchanged_model_reuses_its_graphdef():
    model = MLP([2, 3, 4])
    first = graphdef(model)
    model.layers[0].kernel.value = model.layers[0].kernel.value * 2  # values: not structure
    assert graphdef(model) is first
    model.layers.append(Linear(4, 4))  # structure
    assert graphdef(model) is not first and graphdef(model) != first
    model.extra = 3
    assert ("extra",) not in state(model).flat_state()
    assert "extra=3" in repr(graphdef(model))


def test_cached_split_reads_current_values():
    model = MLP([2, 2])
    split(model)
    model.layers[0].bias.value = jnp.full((2,), 7.0)
    _, state_ = split(model)
    np.testing.assert_array_equal(state_["layers"][0]["bias"].value, 7.0)


def test_state_with_filters():
    model = MLP([2, 3])
    params = state(model, Param)
    assert set(params.flat_state()) == {("layers", 0, "kernel"), ("layers", 0, "bias")}
    params, rest = state(model, Param, ...)
    assert set(rest.flat_state()) == {("count",)}
    nothing = state(model, BatchStat)
    assert nothing.flat_state() == {}
    kernels = state(model, PathContains("kernel"))
    assert list(kernels.flat_state()) == [("layers", 0, "kernel")]


def test_update_writes_in_place():
    model = MLP([2, 3])
    doubled = jax.tree.map(lambda x: x * 2, state(model, Param))
    kernel = model.layers[0].kernel
    before = kernel.value
    update(model, doubled)
    assert model.layers[0].kernel is kernel
    np.testing.assert_allclose(kernel.value, before * 2)


def test_update_with_unknown_paths_changes_nothing():
    model = MLP([2, 3])
    good = state(model, Param)
    bad = State.merge(
        jax.tree.map(lambda x: x + 1, good),
        State.from_flat_path({("layers", 5, "kernel"): VariableState(Param, jnp.ones(1))}),
    )
    before = model.layers[0].kernel.value
    with pytest.raises(GraphError, match=r"layers\[5\]\.kernel") as info:
        update(model, bad)
    assert "paths the model does not have" in str(info.value)
    np.testing.assert_array_equal(model.layers[0].kernel.value, before)


def test_update_cannot_write_arrays_inside_immutable_nodes():
    graph_ = {"frozen": (jnp.ones(2),), "var": Param(jnp.zeros(2))}
    with pytest.raises(GraphError, match=r"frozen\[0\].*merge"):
        update(graph_, State.from_flat_path({("frozen", 0): jnp.zeros(2)}))


def test_update_of_raw_arrays_in_mutable_nodes():
    class Raw(Object):
        def __init__(self):
            self.w = jnp.ones(2)

    model = Raw()
    _, state_ = split(model)
    assert type(state_["w"]) is type(model.w)  # a raw array stays raw (Flax NNX 0.12)
    assert state(model, Variable) == State({}) and "w" in state(model, ...)
    update(model, jax.tree.map(lambda x: x * 3, state_))
    np.testing.assert_array_equal(model.w, 3.0)
    assert merge(*split(model)).w is not None


def test_merge_rejects_a_state_that_does_not_fit():
    model = MLP([2, 3])
    graphdef_, params, rest = split(model, Param, ...)
    with pytest.raises(GraphError, match=r"missing count"):
        merge(graphdef_, params)
    extra = State.from_flat_path({("ghost",): VariableState(Param, 1)})
    with pytest.raises(GraphError, match=r"not in the graph ghost"):
        merge(graphdef_, params, rest, extra)


def test_merge_accepts_raw_values_in_place_of_variable_states():
    model = Foo()
    graphdef_, _ = split(model)
    raw = State.from_flat_path({("a",): 5, ("b",): False})
    copy = merge(graphdef_, raw)
    assert isinstance(copy.a, Param) and copy.a.value == 5


def test_graph_flatten_and_unflatten_as_in_the_seed():
    graphdef_, state_ = graph.flatten(Foo())
    flat = state_.flat_state()
    assert list(flat) == [("a",), ("b",)]
    rebuilt = State.from_flat_path(flat)
    foo = graph.unflatten(graphdef_, rebuilt)
    assert foo.a.value == 0 and foo.b.value is True


def test_clone_is_deep():
    model = MLP([2, 2])
    model.shared = model.layers[0]
    copy = clone(model)
    assert copy.layers[0] is not model.layers[0] and copy.shared is copy.layers[0]
    copy.layers[0].kernel.value = jnp.zeros((2, 2))
    assert not np.allclose(model.layers[0].kernel.value, 0)


def test_pop_removes_matching_variables():
    model = MLP([2, 2])
    model.layers[0].activations = Intermediate(jnp.ones(3))
    popped = pop(model, Intermediate)
    assert list(popped.flat_state()) == [("layers", 0, "activations")]
    assert not hasattr(model.layers[0], "activations")
    assert state(model, Intermediate).flat_state() == {}


def test_iter_graph_visits_each_object_once_children_first():
    model = MLP([2, 2])
    model.shared = model.layers[0]
    seen = list(iter_graph(model))
    paths = [path for path, _ in seen]
    assert paths[-1] == ()
    assert ("layers", 0) in paths and ("shared",) not in paths
    assert paths.index(("layers", 0, "kernel")) < paths.index(("layers", 0))
    assert sum(1 for _, v in seen if v is model.layers[0]) == 1


def test_variables_are_live():
    model = MLP([2, 2])
    live = variables(model, Param)
    assert live["layers"][0]["kernel"] is model.layers[0].kernel


def test_a_leaf_is_a_graph_of_its_own_and_pytrees_that_are_no_nodes_are_refused():
    for leaf in (3.0, Param(1), jnp.arange(3)):  # as in Flax NNX 0.12
        graphdef_, state_ = split(leaf)
        assert state_ is leaf and merge(graphdef_, state_) is leaf

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Point:  # a JAX pytree no backend registered as a graph node
        x: jax.Array

    with pytest.raises(GraphError, match=r"must be a graph node .* a JAX pytree that is no"):
        split(Point(jnp.ones(1)))


def test_dict_and_list_roots():
    tree = {"w": Param(jnp.ones(2)), "xs": [Param(1), 2]}
    graphdef_, state_ = split(tree)
    assert set(state_.flat_state()) == {("w",), ("xs", 0)}
    copy = merge(graphdef_, state_)
    assert copy["xs"][1] == 2 and isinstance(copy["w"], Param)


def test_split_and_merge_inside_jit():
    model = MLP([3, 3])
    graphdef_, state_ = split(model)

    @jax.jit
    def forward(state_, x):
        return merge(graphdef_, state_)(x)

    x = jnp.ones((2, 3))
    np.testing.assert_allclose(forward(state_, x), model(x), rtol=1e-6)


def test_grad_through_merge():
    model = MLP([3, 2])
    graphdef_, params, rest = split(model, Param, ...)

    def loss(params):
        return merge(graphdef_, params, rest)(jnp.ones((1, 3))).sum()

    grads = jax.grad(loss)(params)
    assert isinstance(grads, State)
    assert grads["layers"][0]["kernel"].type is Param
    assert grads["layers"][0]["kernel"].value.shape == (3, 2)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=5), st.data())
def test_round_trip_property(sizes, data):
    model = MLP(sizes)
    if data.draw(st.booleans()):
        model.shared = model.layers[data.draw(st.integers(0, len(model.layers) - 1))]
    graphdef_, *states = split(model, Param, ...)
    copy = merge(graphdef_, *states)
    assert graphdef(copy) == graphdef_
    pairs = zip(state(model).flat_state().items(), state(copy).flat_state().items(), strict=True)
    for (pa, a), (pb, b) in pairs:
        assert pa == pb and a.type is b.type
        np.testing.assert_array_equal(a.value, b.value)
