"""`dataclass`, `map`, `map_state`, `recursive_map` and `iter_children` of bryo_graph."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import (
    GraphState,
    List,
    Object,
    Param,
    State,
    Variable,
    data,
    dataclass,
    graphdef,
    iter_children,
    map,
    map_state,
    merge,
    recursive_map,
    split,
    state,
    unpack,
)


class Pair(Object):
    def __init__(self):
        self.a = Param(jnp.ones(2))
        self.b = Variable(jnp.zeros(3))
        self.items = List([Object()])


def test_dataclass_makes_fields_and_keeps_data_markers():
    @dataclass
    class Holder(Object):
        values: tuple = data()
        n: int = 3

    h = Holder((Variable(jnp.array(1)),))
    assert h.n == 3 and len(jax.tree.leaves(h)) == 1
    assert "Holder(" not in repr(h) or dataclasses.fields(h)  # repr is the class's own
    with pytest.raises(TypeError, match="repr"):
        dataclass(repr=True)


def test_map_builds_a_new_graph_from_new_variables():
    model = Pair()
    zeros = map(lambda path, v: v.replace(jnp.zeros_like(v.get_value())), model)
    assert type(zeros) is Pair and zeros is not model
    np.testing.assert_array_equal(zeros.a.get_value(), [0.0, 0.0])
    np.testing.assert_array_equal(model.a.get_value(), [1.0, 1.0])
    same = map(lambda path, v: v, model)
    assert same.a is model.a  # the State holds the live Variables
    doubled = map_state(lambda path, v: v.get_value() * 2, state(model))
    assert isinstance(doubled, State) and float(doubled["a"][0]) == 2.0
    bare = map(lambda path, v: (path, v), Variable(1))
    assert bare[0] == ()


def test_recursive_map_visits_children_first_on_a_copy():
    model = Pair()
    seen = []

    def tag(path, node):
        seen.append(path)
        if isinstance(node, Object):
            node.tag = len(seen)
        return node

    copy = recursive_map(tag, model)
    assert seen[-1] == () and seen.index(("items", 0)) < seen.index(("items",))
    assert copy.tag == len(seen) and not hasattr(model, "tag") and copy.a is model.a

    with pytest.raises(ValueError, match="cannot set 0 of the tuple"):
        recursive_map(lambda p, v: v + 1 if isinstance(v, int) else v, (1, 2))


@pytest.mark.parametrize("graph", [True, False])
def test_map_and_merge_keep_raw_values_without_recreating_variables(graph):
    model = Pair()
    raw = map(lambda path, v: 0, model, graph=graph, recreate_variables=False)
    assert raw.a == 0 and raw.b == 0 and isinstance(model.a, Param)
    wrapped = map(lambda path, v: 0, model, graph=graph)
    assert isinstance(wrapped.a, Param) and wrapped.a[...] == 0
    graphdef_, params, rest = split(model, Param, ..., graph=graph)
    zeros = State.from_flat_path({p: 0 for p in params.flat_state()})
    assert merge(graphdef_, zeros, rest, recreate_variables=False).a == 0


def test_recreate_variables_false_on_a_bare_variable_and_on_graph_states():
    graphdef_, _ = split(Param(1))
    assert merge(graphdef_, 0, recreate_variables=False) == 0
    assert map(lambda path, v: v + 1, Param(1), recreate_variables=False) == 2
    model = Pair()
    _, rest = unpack(model, Param, ...)
    zeros = GraphState(graphdef(model), State({"a": 0}))
    raw = merge(zeros, rest, recreate_variables=False)
    assert raw.a == 0 and isinstance(raw.b, Variable)
    assert isinstance(merge(zeros, rest).a, Param)


def test_iter_children_lists_graph_nodes_only():
    model = Pair()
    assert [k for k, _ in iter_children(model)] == ["items"]
    with pytest.raises(ValueError, match="takes a graph node"):
        list(iter_children(3))


def test_iter_children_in_tree_mode_refuses_a_non_pytree_object():
    class Opaque(Object, pytree=False):
        def __init__(self):
            self.x = 1

    assert list(iter_children(Opaque())) == []  # graph mode walks it
    with pytest.raises(ValueError, match="'iter_children' with graph=False on a 'Opaque'"):
        list(iter_children(Opaque(), graph=False))
    assert [k for k, _ in iter_children(Pair(), graph=False)] == ["items"]
