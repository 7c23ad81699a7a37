"""`merge` hands its flattening over: the first `flat_graph` of a graph that `merge` just
built (nothing written since) is made from what the merge knew instead of walking the
graph. It must equal a walk of the same graph in everything (GraphDef, paths, sources,
nodes, node spans, the watch), and a change after the merge must make it walk again."""

import copy
import gc
import pickle
import threading
import weakref

import jax
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
    RefEntry,
    State,
    Variable,
    data,
    flat_graph,
    merge,
    register_data_type,
    split,
    state,
)

MERGED = "_object__merged"  # where merge leaves its record on the root


class Count(Variable):
    pass


class Leaf(Object):
    def __init__(self, seed: int = 0) -> None:
        self.w = Param(np.full((2,), float(seed), np.float32))
        self.stats = BatchStat(np.zeros((1,), np.float32))
        self.size = 2
        self.name = f"leaf{seed}"


class Model(Object):
    def __init__(self) -> None:
        self.layers = List([Leaf(0), Leaf(1)])
        self.table = Dict({"a": Leaf(2), "b": Leaf(3)})
        self.head = Leaf(4)
        self.pair = data((Leaf(5), Count(np.zeros(()))))  # a tuple of data
        self.raw = np.arange(3.0)  # a raw array leaf
        self.sizes = (1, 2, 3)  # static


def _shared_module() -> Model:
    model = Model()
    model.tail = model.layers[0]  # walked first as `head`? no: keys sort: layers < tail
    model.head = model.table["a"]  # `head` sorts before `table`: the Dict refers back
    return model


def _shared_variable() -> Model:
    model = Model()
    model.table["b"].w = model.layers[1].w
    return model


def _cycle() -> Model:
    model = Model()
    model.layers[1].parent = model  # a cycle back to the root
    return model


def _list_root() -> List:
    return List([Leaf(0), Leaf(1), Dict({"x": Leaf(2)})])


def _dict_root() -> Dict:
    return Dict({"a": Leaf(0), "b": List([Leaf(1)])})


class Bare(Object, pytree=False):
    pass


def _graph_only() -> Object:
    bare = Bare()
    bare.leaf = Leaf(7)
    bare.value = np.ones(2)
    bare.note = "static"
    return bare


MODELS = [Model, _shared_module, _shared_variable, _cycle, _list_root, _dict_root, _graph_only]


def _handed_and_walked(graphdef, *states, copy=False):
    """A graph merged from `graphdef`, its handed-over flattening, and a walk of it."""
    flat_graph(merge(graphdef, *states, copy=copy), keep=False)  # the first: walked, checked
    model = merge(graphdef, *states, copy=copy)
    assert MERGED in vars(model)
    handed = flat_graph(model, keep=False)
    walked = flat_graph(model, keep=False)  # the record is gone: a walk
    assert MERGED not in vars(model)
    return model, handed, walked


def _assert_same(handed, walked, *, watched=True):
    assert handed.graphdef == walked.graphdef
    assert hash(handed.graphdef) == hash(walked.graphdef)
    assert handed.paths == walked.paths
    assert len(handed.sources) == len(walked.sources)
    for a, b in zip(handed.sources, walked.sources, strict=True):
        assert a.variable is b.variable and a.value is b.value
        assert a.leaf_type is b.leaf_type and a.parent_type is b.parent_type
        assert a.parent is b.parent and a.key == b.key
    assert [(p, id(n)) for p, n in handed.nodes] == [(p, id(n)) for p, n in walked.nodes]
    spans, walked_spans = handed.node_spans(), walked.node_spans()
    assert list(spans) == list(walked_spans)
    for key, (node, span) in spans.items():
        assert node is walked_spans[key][0] and span == walked_spans[key][1]
    assert handed.watch is not None and walked.watch is not None
    if watched:  # (another thread's writes make a flattening's watch born expired)
        assert handed.watch.is_valid() and walked.watch.is_valid()
    assert handed.flat_state() == walked.flat_state()


@pytest.mark.parametrize("make", MODELS)
def test_a_handed_over_flattening_equals_a_walk(make):
    graphdef, params = split(make())
    _, handed, walked = _handed_and_walked(graphdef, params)
    assert handed.graphdef is graphdef  # handed over (a walk makes a new GraphDef)
    assert walked.graphdef is not graphdef
    _assert_same(handed, walked)
    assert graphdef == split(make())[0]


@pytest.mark.parametrize("make", MODELS)
def test_handing_over_from_a_compiled_builder(make):
    graphdef, params = split(make())
    for _ in range(20):  # hot: the GraphDef gets a compiled builder
        flat_graph(merge(graphdef, params), keep=False)
    assert graphdef._builder is not None
    _, handed, walked = _handed_and_walked(graphdef, params)
    assert handed.graphdef is graphdef
    _assert_same(handed, walked)


def test_states_in_groups_raw_values_and_copies_hand_over():
    graphdef, params, rest = split(Model(), Param, ...)
    _, handed, walked = _handed_and_walked(graphdef, params, rest)
    assert handed.graphdef is graphdef
    _assert_same(handed, walked)
    raw = jax.tree.map(np.asarray, split(Model())[1])  # raw values: merge makes Variables
    _, handed, walked = _handed_and_walked(graphdef, raw)
    assert handed.graphdef is graphdef
    _assert_same(handed, walked)
    _, handed, walked = _handed_and_walked(graphdef, params, rest, copy=True)
    assert handed.graphdef is graphdef
    _assert_same(handed, walked)


def test_a_graphdef_from_another_equal_model_hands_over():
    graphdef = split(Model())[0]
    other_graphdef, params = split(Model())
    assert other_graphdef == graphdef and other_graphdef is not graphdef
    _, handed, walked = _handed_and_walked(graphdef, params)
    assert handed.graphdef is graphdef
    _assert_same(handed, walked)


def test_a_traced_merge_hands_over():
    graphdef, params = split(Model())
    found = []

    def f(params):
        _, handed, walked = _handed_and_walked(graphdef, params)
        found.append(handed.graphdef is graphdef)
        _assert_same(handed, walked)
        return 0

    jax.make_jaxpr(f)(params)
    assert found == [True]


def test_a_variable_given_twice_is_shared_as_a_walk_finds_it():
    model = Model()
    graphdef, params = split(model)
    flat_graph(merge(graphdef, params), keep=False)
    given = dict(params.flat_state())
    given[("table", "b", "w")] = given[("layers", 0, "w")]  # one Variable at two paths
    merged = merge(graphdef, State.from_flat_path(given))
    flat = flat_graph(merged, keep=False)
    assert flat.graphdef != graphdef  # the second place is a reference
    assert type(flat.graphdef.root.child("table").child("b").child("w")) is RefEntry
    _assert_same(flat, flat_graph(merged, keep=False))


def test_a_variable_of_another_class_is_walked():
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    given = dict(params.flat_state())
    given[("head", "w")] = Count(np.zeros(2))  # the GraphDef says Param
    merged = merge(graphdef, State.from_flat_path(given))
    flat = flat_graph(merged, keep=False)
    assert flat.graphdef != graphdef
    assert flat.sources[flat.paths.index(("head", "w"))].leaf_type is Count
    _assert_same(flat, flat_graph(merged, keep=False))


@pytest.mark.parametrize(
    "raw", [Param(np.arange(3.0)), 2.5, np.arange(3)], ids=["variable", "scalar", "int_array"]
)
def test_a_raw_leaf_given_as_a_variable_or_a_scalar_is_walked(raw):
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    given = dict(params.flat_state())
    given[("raw",)] = raw
    merged = merge(graphdef, State.from_flat_path(given))
    flat = flat_graph(merged, keep=False)
    assert (flat.graphdef is graphdef) == (type(raw) is np.ndarray)  # an array: handed over
    _assert_same(flat, flat_graph(merged, keep=False))
    assert flat.graphdef == split(merged)[0]


def _change_attribute(model):
    model.layers[1].extra = Param(np.ones(1))


def _change_list(model):
    model.layers.append(Leaf(9))


def _change_dict(model):
    del model.table["b"]


def _change_metadata(model):
    model.head.w.set_metadata(tag="x")


def _change_root(model):
    model.size = 3


@pytest.mark.parametrize(
    "change", [_change_attribute, _change_list, _change_dict, _change_metadata, _change_root]
)
def test_a_change_after_merge_makes_the_flattening_walk(change):
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    model = merge(graphdef, params)
    change(model)
    flat = flat_graph(model, keep=False)
    assert flat.graphdef is not graphdef
    fresh = flat_graph(model, keep=False)
    _assert_same(flat, fresh)
    assert flat.graphdef == split(model)[0]


def test_a_write_anywhere_after_merge_makes_the_flattening_walk():
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    model = merge(graphdef, params)
    Leaf().size = 5  # (a write to another model: the counter cannot say whose)
    flat = flat_graph(model, keep=False)
    assert flat.graphdef is not graphdef and flat.graphdef == graphdef


def test_a_change_after_the_handover_expires_its_watch():
    graphdef, params = split(Model())
    for change in (_change_attribute, _change_list, _change_dict, _change_metadata):
        _, handed, _ = _handed_and_walked(graphdef, params)
        model = merge(graphdef, params)
        handed = flat_graph(model, keep=False)
        assert handed.graphdef is graphdef and handed.watch.is_valid()
        change(model)
        assert not handed.watch.is_valid()


def test_a_kept_handover_is_the_cached_flattening():
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    model = merge(graphdef, params)
    flat = flat_graph(model)
    assert flat.graphdef is graphdef and flat_graph(model) is flat
    model.head.size = 5
    assert flat_graph(model) is not flat


def test_a_merged_model_is_freed_without_the_garbage_collector():
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    gc.disable()
    try:
        for flatten in (False, True):
            model = merge(graphdef, params)
            ref = weakref.ref(model)
            if flatten:
                assert flat_graph(model, keep=False).graphdef is graphdef
                assert "_object__flat" not in vars(model)
            del model
            assert ref() is None  # no reference cycle through merge's record
    finally:
        gc.enable()


def test_copies_and_pickles_drop_the_record():
    graphdef, params = split(Leaf())
    flat_graph(merge(graphdef, params), keep=False)
    model = merge(graphdef, params)
    assert MERGED in vars(model)
    assert MERGED not in vars(copy.copy(model)) and MERGED not in vars(copy.deepcopy(model))
    assert MERGED not in vars(pickle.loads(pickle.dumps(model)))
    lst = merge(*split(List([Leaf()])))
    assert MERGED in vars(lst) and MERGED not in vars(copy.copy(lst))


def test_a_graph_with_a_backends_own_node_kind_is_always_walked(box):
    model = Model()
    model.box = data(box(Leaf(8)))
    graphdef, params = split(model)
    flat_graph(merge(graphdef, params), keep=False)
    assert graphdef._handover is False  # refused: the walk decides
    model = merge(graphdef, params)
    assert MERGED not in vars(model)
    flat = flat_graph(model, keep=False)
    assert flat.graphdef is not graphdef and flat.graphdef == graphdef


def test_a_new_data_type_makes_the_next_flattening_check_again():
    graphdef, params = split(Model())
    _handed_and_walked(graphdef, params)

    @register_data_type
    class Marker:
        pass

    model = merge(graphdef, params)
    assert flat_graph(model, keep=False).graphdef is not graphdef  # walked, checked again
    model = merge(graphdef, params)
    assert flat_graph(model, keep=False).graphdef is graphdef


def test_threads_merging_and_flattening_get_right_flattenings():
    graphdef, params = split(Model())
    flat_graph(merge(graphdef, params), keep=False)
    errors = []

    def work():
        try:
            for _ in range(30):
                model = merge(graphdef, params)
                flat = flat_graph(model, keep=False)
                assert flat.graphdef == graphdef
                _assert_same(flat, flat_graph(model, keep=False), watched=False)
        except AssertionError as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


# Random models --------------------------------------------------------------------------


class Node(Object):
    pass


_VARIABLE_TYPES = (Param, BatchStat, Count)


def _draw_value(draw, depth: int, made: list):
    kinds = ["variable", "array", "static"]
    if depth < 3:
        kinds += ["node", "list", "dict", "tuple"]
    if made:
        kinds.append("shared")
    kind = draw(st.sampled_from(kinds))
    if kind == "variable":
        cls = draw(st.sampled_from(_VARIABLE_TYPES))
        value = cls(np.full((draw(st.integers(1, 3)),), float(len(made)), np.float32))
        made.append(value)
        return value
    if kind == "array":
        return np.zeros((draw(st.integers(0, 2)),), np.float32)
    if kind == "static":
        return draw(st.sampled_from([1, "s", None, (1, 2), 2.5]))
    if kind == "shared":
        return draw(st.sampled_from(made))
    if kind == "tuple":
        size = draw(st.integers(0, 2))
        return data(tuple(_draw_value(draw, depth + 1, made) for _ in range(size)))
    if kind == "list":
        node = List([])
        made.append(node)
        for _ in range(draw(st.integers(0, 3))):
            node.append(_draw_value(draw, depth + 1, made))
        return node
    if kind == "dict":
        node = Dict({})
        made.append(node)
        for i in range(draw(st.integers(0, 3))):
            node[f"k{i}"] = _draw_value(draw, depth + 1, made)
        return node
    node = Node()
    made.append(node)
    for i in range(draw(st.integers(0, 4))):
        setattr(node, f"a{draw(st.integers(0, 5))}{i}", _draw_value(draw, depth + 1, made))
    return node


@st.composite
def _models(draw):
    root = Node()
    made: list = [root]
    for i in range(draw(st.integers(1, 5))):
        setattr(root, f"c{i}", _draw_value(draw, 1, made))
    return root


@settings(max_examples=60, deadline=None)
@given(_models(), st.booleans(), st.booleans())
def test_random_models_hand_over_flattenings_equal_to_walks(model, grouped, hot):
    graphdef, *states = split(model, Param, ...) if grouped else split(model)
    if hot:
        for _ in range(17):
            merge(graphdef, *states)
    merged, handed, walked = _handed_and_walked(graphdef, *states)
    assert handed.graphdef is graphdef  # (Objects, Lists, Dicts, tuples: always handed over)
    _assert_same(handed, walked)
    assert state(merged).flat_state().keys() == state(model).flat_state().keys()
