"""Change tracking: a cached flattening lives until one of *its* nodes changes; caches never
keep a model alive; `clear_caches` empties them; copies and pickles carry no cache."""

import copy
import gc
import pickle
import weakref

import numpy as np
import pytest

from bryo_graph import (
    Dict,
    List,
    Object,
    Param,
    clear_caches,
    flat_graph,
    merge,
    register_cache,
    split,
    state,
    structure_changed,
)

_cleared: list[int] = []


def _clear_test_cache() -> None:
    _cleared.append(1)


class Leaf(Object):
    def __init__(self, seed: int = 0) -> None:
        self.w = Param(np.full((2,), float(seed), np.float32))
        self.size = 2


class Model(Object):
    def __init__(self) -> None:
        self.layers = List([Leaf(0), Leaf(1)])
        self.table = Dict({"a": Leaf(2)})
        self.head = Leaf(3)


def test_an_unchanged_model_reuses_its_flattening():
    model = Model()
    assert flat_graph(model) is flat_graph(model)


def test_a_write_to_an_unrelated_module_keeps_the_cache():
    model, other = Model(), Leaf()
    flat = flat_graph(model)
    other.flag = 1
    other.w.tag = "x"  # metadata of an unrelated Variable
    del other.flag
    assert flat_graph(model) is flat


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "extra", 1),
        lambda m: setattr(m.head, "size", 3),
        lambda m: delattr(m.head, "size"),
        lambda m: m.layers.append(Leaf(4)),
        lambda m: m.layers.__setitem__(0, Leaf(5)),
        lambda m: m.layers.pop(),
        lambda m: m.table.__setitem__("b", Leaf(6)),
        lambda m: m.table.update(c=Leaf(7)),
        lambda m: m.table.pop("a"),
        lambda m: setattr(m.layers[1].w, "tag", "frozen"),  # Variable metadata
    ],
    ids=[
        "root attribute",
        "nested attribute",
        "deleted attribute",
        "List.append",
        "List item",
        "List.pop",
        "Dict item",
        "Dict.update",
        "Dict.pop",
        "Variable metadata",
    ],
)
def test_a_change_to_one_of_its_nodes_expires_the_cache(change):
    model = Model()
    flat = flat_graph(model)
    change(model)
    fresh = flat_graph(model)
    assert fresh is not flat
    structure_changed()  # every cache expires: a cold walk
    assert flat_graph(model).paths == fresh.paths


def test_a_metadata_change_reaches_filters():
    model = Model()
    assert len(state(model, lambda path, v: getattr(v, "tag", None) == "x")) == 0
    model.head.w.tag = "x"
    assert list(state(model, lambda path, v: getattr(v, "tag", None) == "x").flat_state()) == [
        ("head", "w")
    ]


def test_a_submodule_and_its_model_cache_independently():
    model = Model()
    whole, head = flat_graph(model), flat_graph(model.head)
    model.extra = 1  # the root changed, not the head
    assert flat_graph(model.head) is head and flat_graph(model) is not whole
    whole = flat_graph(model)
    model.head.size = 4  # in both graphs
    assert flat_graph(model.head) is not head and flat_graph(model) is not whole


def test_tracked_containers_as_roots():
    layers = List([Leaf(0)])
    table = Dict({"a": Leaf(1)})
    for root in (layers, table):
        assert flat_graph(root) is flat_graph(root)
    flat = flat_graph(layers)
    layers.append(Leaf(2))
    assert flat_graph(layers) is not flat


def test_writes_behind_trackings_back_need_structure_changed():
    # `vars(node)` and `object.__setattr__` are not tracked (documented): tell bryo.
    model = Model()
    split(model)
    object.__setattr__(model.head, "bias", Param(np.zeros(2, np.float32)))
    structure_changed(model.head)
    assert ("head", "bias") in split(model)[1].flat_state()
    vars(model.head)["scale"] = Param(np.ones(2, np.float32))
    structure_changed(model.head)
    assert ("head", "scale") in split(model)[1].flat_state()
    assert ("head", "scale") in split(model, graph=False)[1].flat_state()  # the pytree, too


def test_structure_changed_without_a_node_expires_everything():
    model = Model()
    flat = flat_graph(model)
    structure_changed()
    assert flat_graph(model) is not flat


def test_copies_and_pickles_carry_no_cache():
    model = Model()
    graphdef, params = split(model)
    for _ in range(20):  # hot: the GraphDef gets a compiled builder
        merge(graphdef, params)
    shallow = copy.copy(model)
    shallow.extra = 1
    assert flat_graph(shallow) is not flat_graph(model)
    assert "extra" not in {path[0] for path in flat_graph(model).paths}
    plain = Object()  # (no Variables: pickling them is the Variable's business)
    plain.children = List([Object(), Object()])
    plain.children[0].size = 2
    plain_graphdef = split(plain)[0]
    restored = pickle.loads(pickle.dumps(plain))
    assert "_object__flat" not in vars(restored)
    assert split(restored)[0] == plain_graphdef
    assert pickle.loads(pickle.dumps(plain.children))[0].size == 2


def test_a_cache_never_keeps_a_model_alive():
    model = Model()
    split(model)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_the_cache_of_an_immutable_root_holds_it_weakly(box):
    root = box(np.ones(2))
    flat = flat_graph(root)
    assert flat_graph(root) is flat  # cached
    assert flat.sources[0].parent is root
    ref = weakref.ref(root)
    del root, flat
    gc.collect()
    assert ref() is None


def test_clear_caches_empties_every_cache_and_calls_registered_ones():
    register_cache(_clear_test_cache)
    register_cache(_clear_test_cache)  # once is enough
    calls = len(_cleared)
    model = Model()
    graphdef, params = split(model)
    for _ in range(20):
        merge(graphdef, params)
    flat = flat_graph(model)
    clear_caches()
    assert "_object__flat" not in vars(model)
    assert graphdef._builder is None
    assert flat_graph(model) is not flat
    assert len(_cleared) == calls + 1
    assert merge(graphdef, params).head.size == 2


def _own_leaves(flat, node):
    return [flat.sources[i].variable for i in flat.leaves_of(node)]


def test_leaves_of_a_nested_node_are_its_own_flattenings_leaves():
    model = Model()
    flat = flat_graph(model)
    for node in (model, model.layers, model.layers[1], model.table, model.table["a"], model.head):
        assert _own_leaves(flat, node) == [s.variable for s in flat_graph(node).sources]
    assert flat.leaves_of(model) == range(len(flat.sources))


def test_leaves_of_refuses_nodes_sharing_with_an_earlier_part():
    model = Model()
    model.head = model.layers[0]  # shared module, walked first as `head` (keys are sorted)
    model.table["a"].w = model.layers[1].w  # a Variable met before `table`
    flat = flat_graph(model)
    assert flat.leaves_of(model.layers) is None  # it refers to `head`, walked before it
    assert flat.leaves_of(model.table) is None and flat.leaves_of(model.table["a"]) is None
    assert _own_leaves(flat, model.head) == [model.layers[0].w]
    assert _own_leaves(flat, model.layers[1]) == [model.layers[1].w]


def test_node_spans_hold_every_mutable_node_with_its_leaves_of():
    model = Model()
    model.head = model.layers[0]
    flat = flat_graph(model)
    spans = flat.node_spans()
    assert spans is flat.node_spans()
    assert {id(node) for _, node in flat.nodes} == set(spans)
    for _, node in flat.nodes:
        assert spans[id(node)] == (node, flat.leaves_of(node))


def test_leaves_of_a_node_outside_the_graph_or_a_leaf_is_none():
    model = Model()
    flat = flat_graph(model)
    assert flat.leaves_of(Leaf()) is None and flat.leaves_of(model.head.w) is None


def test_a_flattening_not_kept_is_watched_but_not_reused():
    model = Model()
    first, second = flat_graph(model, keep=False), flat_graph(model, keep=False)
    assert first is not second and first.watch.is_valid() and second.watch.is_valid()
    assert flat_graph(model) is not first  # nothing was stored on the model
    model.head.size = 5
    assert not first.watch.is_valid() and not second.watch.is_valid()
