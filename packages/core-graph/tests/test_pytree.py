"""Objects, `List` and `Dict` are JAX pytrees (Flax NNX 0.12 tree mode): data attributes
are children, static ones ride in the treedef; `data`/`static` markers; Flax's error for
data hidden in a static attribute; copies and pickling."""

import copy
import itertools
import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_graph import (
    BatchStat,
    Dict,
    List,
    Object,
    Param,
    data,
    dataclass,
    graphdef,
    is_data,
    merge,
    register_data_type,
    split,
    static,
    structure_changed,
)


class Linear(Object):
    def __init__(self, din, dout, seed=0):
        rng = np.random.default_rng(seed)
        self.kernel = Param(jnp.asarray(rng.normal(size=(din, dout)), jnp.float32))
        self.bias = Param(jnp.zeros((dout,)))
        self.din, self.dout = din, dout
        self.activation = "tanh"

    def __call__(self, x):
        y = x @ self.kernel
        return getattr(jnp, self.activation)(y + jnp.broadcast_to(self.bias, y.shape))


class MLP(Object):
    def __init__(self, sizes):
        self.layers = List([Linear(a, b, i) for i, (a, b) in enumerate(itertools.pairwise(sizes))])
        self.heads = Dict({"mean": Linear(sizes[-1], 1, 9)})
        self.count = BatchStat(jnp.array(0.0))
        self.name = "mlp"

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["mean"](x)


def test_leaves_are_the_arrays_and_statics_ride_in_the_treedef():
    layer = Linear(2, 3)
    leaves = jax.tree.leaves(layer)
    assert len(leaves) == 2 and leaves[0] is layer.bias.value and leaves[1] is layer.kernel.value
    treedef = jax.tree.structure(layer)
    assert treedef == jax.tree.structure(Linear(2, 3, seed=1))
    assert treedef != jax.tree.structure(Linear(2, 4))  # dout differs: a static value


def test_plain_jit_grad_and_tree_map_take_modules():
    model, x = MLP([2, 3, 2]), jnp.ones((4, 2))
    np.testing.assert_allclose(jax.jit(lambda m, x: m(x))(model, x), model(x), rtol=1e-6)
    grads = jax.grad(lambda m: jnp.sum(m(x)))(model)
    assert type(grads) is MLP and type(grads.layers[0].kernel) is Param
    assert grads.layers[0].kernel.value.shape == (2, 3) and grads.name == "mlp"
    zeros = jax.tree.map(jnp.zeros_like, model)
    assert zeros is not model and zeros.layers[0] is not model.layers[0]
    assert float(jnp.abs(model.layers[0].kernel.value).sum()) > 0  # the input is untouched
    assert float(jnp.abs(zeros.layers[0].kernel.value).sum()) == 0
    assert zeros.layers[0].activation == "tanh" and type(zeros.heads) is Dict


def test_lists_and_dicts_hold_static_items_in_the_treedef():
    items = List([Param(jnp.ones(1)), "static", 3, jnp.zeros(2)])
    assert len(jax.tree.leaves(items)) == 2
    rebuilt = jax.tree.map(lambda x: x + 1, items)
    assert type(rebuilt) is List and rebuilt[1:3] == ["static", 3]
    table = Dict(b=Param(jnp.ones(1)), a=jnp.zeros(1), fn=jnp.sin)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(table)[0]]
    assert paths == ["['a']", "['b'].value"]
    assert jax.tree.map(lambda x: x, table)["fn"] is jnp.sin


def test_the_cached_treedef_follows_attribute_changes():
    layer = Linear(2, 2)
    before = jax.tree.structure(layer)
    layer.dout = 7
    assert jax.tree.structure(layer) != before
    layer.extra = Param(jnp.ones(1))
    assert len(jax.tree.leaves(layer)) == 3
    del layer.extra
    assert len(jax.tree.leaves(layer)) == 2
    layers = List([layer])
    layers.append(Linear(2, 2))
    assert len(jax.tree.leaves(layers)) == 4


def test_a_plain_list_of_modules_gets_flax_error_naming_the_attribute():
    class Net(Object):
        def __init__(self):
            self.blocks = [Linear(2, 2), Linear(2, 2)]

    with pytest.raises(ValueError, match=r"static attribute 'blocks' of Pytree type 'Net'") as info:
        Net()
    assert "nnx.List(...)" in str(info.value) and "nnx.data(...)" in str(info.value)
    net = object.__new__(Net)
    with pytest.raises(ValueError, match=r"'pair' of Pytree type 'Net': it holds Param"):
        net.pair = (Param(1), 2)
    assert not hasattr(net, "pair")  # nothing was set


def test_data_and_static_markers():
    class Holder(Object):
        config: dict = static(default=None)

        def __init__(self):
            self.arrays = data([jnp.ones(2), jnp.zeros(1)])
            self.scale = data(2.0)
            self.table = static({"lr": 0.1})
            self.config = {"depth": 2}

    holder = Holder()
    assert type(holder.arrays) is list and holder.scale == 2.0
    assert len(jax.tree.leaves(holder)) == 3  # two arrays and the data float
    doubled = jax.jit(lambda h: jax.tree.map(lambda x: x * 2, h))(holder)
    assert float(doubled.scale) == 4.0 and doubled.table == {"lr": 0.1}
    with pytest.raises(ValueError, match=r"annotated with nnx.static\(...\) when setting attri"):
        holder.table = static([Param(1)])
    with pytest.raises(ValueError, match=r"attribute 'config' of Pytree type 'Holder'"):
        holder.config = [jnp.ones(1)]
    with pytest.raises(TypeError, match="either a value"):
        data(1, default=2)


def test_static_attributes_keep_their_status_and_refuse_data_as_flax_does():
    class Foo(Object):
        def __init__(self, a, b, c):
            self.a, self.b, self.c = data(a), static(b), c

    foo = Foo(a=1, b=2, c=jnp.array(3))
    assert len(jax.tree.leaves(foo)) == 2
    foo.a = static(3)
    foo.b = data(4)
    foo.c = static(5)
    assert jax.tree.leaves(foo) == [4]
    with pytest.raises(ValueError, match=r"Found data on value of type 'list' assigned to static"):
        foo.a = ["hi", jnp.array(6)]  # static since `static(3)`: data needs `data(...)`
    with pytest.raises(ValueError, match=r"Cannot assign data value of type '\w+' to static attr"):
        foo.c = jnp.array(4)
    assert foo.a == 3 and foo.c == 5  # nothing was set


def test_data_hidden_in_a_static_attribute_during_init_is_refused_after_init():
    class Foo(Object):
        def __init__(self):
            self.items = []
            self.items.append(jnp.array(1))

    with pytest.raises(ValueError, match=r"Found unexpected data on value of type 'list' in stat"):
        Foo()

    class Base(Object):
        def __init__(self):
            self.items = []
            self.items.append(jnp.array(1))

    class Fixed(Base):  # only the outermost __init__ checks: the subclass fixes it in time
        def __init__(self):
            super().__init__()
            self.items = List(self.items)

    assert len(jax.tree.leaves(Fixed())) == 1

    @dataclass
    class Declared(Object):
        a: jax.Array = static()

    with pytest.raises(ValueError, match=r"Found unexpected data on value of type '\w+' in static"):
        Declared(a=jnp.array(3))


def test_list_and_dict_items_take_data_and_static_marks():
    items = List([data(jnp.array(1)), static(100), data(2), static(200)])
    assert type(items[0]) is not type(data(1)) and items[1] == 100
    leaves, treedef = jax.tree.flatten(items)
    assert len(leaves) == 2 and leaves[1] == 2
    rebuilt = jax.tree.unflatten(treedef, [x * 2 for x in leaves])
    assert list(rebuilt)[1:] == [100, 4, 200]
    rebuilt.append(3)  # the marks stay with their positions after an unflatten
    assert jax.tree.leaves(rebuilt) == [2, 4]
    doubled = jax.jit(lambda t: jax.tree.map(lambda x: x * 2, t))(items)
    assert doubled[1] == 100 and int(doubled[2]) == 4
    table = Dict(a=data(1), b=2)
    assert jax.tree.leaves(table) == [1]
    assert split(table)[1].flat_state() == {("a",): 1}  # graph mode sees the mark too
    with pytest.raises(ValueError, match=r"annotated with nnx.static"):
        List([static([jnp.ones(1)])])


def test_graph_mode_keeps_data_marked_values_and_raw_arrays_raw_in_states():
    class Foo(Object):
        def __init__(self):
            self.scale = data(1)
            self.name = static("x")
            self.array = jnp.ones(2)

    foo = Foo()
    graph, leaves = split(foo)
    assert set(leaves.flat_state()) == {("scale",), ("array",)}
    assert type(leaves["scale"]) is int and isinstance(leaves["array"], jax.Array)
    again = merge(graph, jax.tree.map(lambda x: x + 1, leaves))
    assert again.scale == 2 and again.name == "x" and float(again.array[0]) == 2.0


def test_registered_data_types_are_children():
    class Token:
        pass

    assert not is_data(Token())
    register_data_type(Token)
    holder = Object()
    holder.token = Token()
    assert jax.tree.leaves(holder) == [holder.token]


def test_pytree_false_objects_are_graph_only_and_track_containers():
    class Graph(Object, pytree=False):
        def __init__(self):
            self.layers = [Linear(2, 2)]

    node = Graph()
    assert type(node.layers) is List
    assert jax.tree.leaves(node) == [node]  # a leaf for JAX
    assert graphdef(node) is not None and len(split(node)[1].flat_state()) == 2


def test_slots_are_refused():
    with pytest.raises(TypeError, match="declares __slots__"):

        class Slotted(Object):
            __slots__ = ("a",)


def test_copies_and_pickles_keep_sharing_and_cycles():
    model = MLP([2, 2])
    model.shared = model.layers[0]
    model.parent = model
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert twin is not model and twin.shared is twin.layers[0] and twin.parent is twin
        np.testing.assert_allclose(twin(jnp.ones((1, 2))), model(jnp.ones((1, 2))), rtol=1e-6)
        twin.layers[0].kernel.value = twin.layers[0].kernel.value * 0
        assert float(jnp.abs(model.layers[0].kernel.value).sum()) > 0
    assert jax.tree.structure(copy.deepcopy(model.layers[0])) == jax.tree.structure(model.layers[0])


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4))
def test_tree_map_round_trip_keeps_structure_and_values(sizes):
    model = MLP(sizes)
    again = jax.tree.map(lambda x: x, model)
    assert jax.tree.structure(again) == jax.tree.structure(model)
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(model), strict=True):
        assert a is b
    assert [layer.dout for layer in again.layers] == sizes[1:]


class Holder(Object):
    def __init__(self):
        self.a = Param(jnp.array([0.0]))
        self.items = List([jnp.array([1.0]), Param(jnp.array([2.0]))])
        self.table = Dict({"x": jnp.array([3.0])})


_CHANGES = (
    lambda h, v: setattr(h, "a", Param(v)),
    lambda h, v: setattr(h, "b", v),
    lambda h, v: h.__dict__.pop("b", None) is not None and structure_changed(h),
    lambda h, v: h.items.append(v),
    lambda h, v: h.items.insert(0, Param(v)),
    lambda h, v: h.items.__setitem__(-1, v) if h.items else h.items.append(v),
    lambda h, v: h.items.pop() if h.items else None,
    lambda h, v: h.items.extend([v, v]),
    lambda h, v: h.items.reverse(),
    lambda h, v: h.table.__setitem__("y", v),
    lambda h, v: h.table.update(x=Param(v)),
    lambda h, v: h.table.pop("y", None),
    lambda h, v: setattr(h, "items", List([v])),
)


@settings(deadline=None, max_examples=30)
@given(st.lists(st.integers(0, len(_CHANGES) - 1), max_size=10))
def test_the_cached_flattening_follows_every_reported_change(changes):
    """Each node caches its pytree flattening; every reported change must drop it: the
    leaves always match those of an uncached copy (pickling leaves the caches behind)."""
    holder = Holder()
    for step, change in enumerate(changes):
        jax.tree.leaves(holder)  # cached now
        _CHANGES[change](holder, jnp.array([10.0 + step]))
        expected = jax.tree.leaves(pickle.loads(pickle.dumps(holder)))
        assert [float(x[0]) for x in jax.tree.leaves(holder)] == [float(x[0]) for x in expected]
        assert jax.tree.structure(holder) == jax.tree.structure(pickle.loads(pickle.dumps(holder)))


def test_unflattened_nodes_flatten_to_their_new_children():
    model = MLP([2, 3])
    again = jax.tree.map(lambda x: x + 1, model)
    leaves = jax.tree.leaves(again)
    np.testing.assert_allclose(leaves[0], jax.tree.leaves(model)[0] + 1)
    again.layers[0].kernel = Param(jnp.zeros((2, 3)))
    assert float(jnp.abs(jax.tree.leaves(again.layers[0])[1]).sum()) == 0.0


def test_a_flattening_read_while_another_thread_writes_is_not_kept(monkeypatch):
    """A write reported while a node's flattening is made (another thread's) may leave it
    half old: it is returned but not cached, so the next flatten reads the node again."""
    from bryo_graph import _object

    layer = Linear(2, 2)
    ticks = iter(range(1_000_000))

    def write_count_with_a_write_in_between():
        if next(ticks) == 1:  # the children are read, the flattening not yet stored
            object.__setattr__(layer, "kernel", Param(jnp.zeros((2, 2))))
            structure_changed(layer)  # what another thread's `layer.kernel = ...` reports
        return _real_write_count()

    _real_write_count = _object.write_count
    monkeypatch.setattr(_object, "write_count", write_count_with_a_write_in_between)
    jax.tree.leaves(layer)
    monkeypatch.undo()
    assert float(jnp.abs(jax.tree.leaves(layer)[1]).sum()) == 0.0


def test_flattening_an_unchanged_model_runs_no_python_code():
    """A plain `jax.jit` flattens the module on every call: JAX reads each Object's, List's
    and Dict's cached flattening and each Variable's value and metadata in C, so no bryo
    code runs (a Python flatten function per node was most of a call's cost)."""
    model = MLP([2, 3, 1])
    jax.tree.leaves(model)  # the Objects' flattenings cached
    bryo_calls = []

    def record(frame, event, arg):
        if event == "call" and "bryo_" in frame.f_code.co_filename:
            bryo_calls.append(frame.f_code.co_name)

    sys.setprofile(record)
    try:
        leaves, treedef = jax.tree_util.tree_flatten(model)
    finally:
        sys.setprofile(None)
    assert bryo_calls == []
    assert len(leaves) == 7 and treedef == jax.tree.structure(MLP([2, 3, 1]))
