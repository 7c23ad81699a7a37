"""Graphs far deeper than Python's recursion limit split, merge, compare and print; the
graph functions run from several threads at once on separate models."""

import sys
import threading

import numpy as np

from bryo_graph import (
    GraphDef,
    List,
    NodeType,
    Object,
    Param,
    flat_graph,
    iter_graph,
    merge,
    split,
    state,
    update,
)
from bryo_plugins import hookimpl

DEPTH = 1000  # each level nests three tuples deep in the GraphDef's entries


class Link(Object):
    def __init__(self, inner: object, seed: int) -> None:
        self.inner = inner
        self.w = Param(np.full((2,), float(seed), np.float32))


def _chain(depth: int) -> Link:
    node = Link(None, 0)
    for i in range(1, depth):
        node = Link(node, i)
    return node


def test_a_model_deeper_than_the_recursion_limit_splits_and_merges():
    assert DEPTH * 3 > sys.getrecursionlimit()
    model = _chain(DEPTH)
    graphdef, params = split(model)
    assert len(params.flat_state()) == DEPTH
    for _ in range(20):  # past the point where a shallow GraphDef would be compiled
        rebuilt = merge(graphdef, params)
    assert rebuilt is not model and rebuilt.w is model.w  # States hold the live Variables
    node, depth = rebuilt, 0
    while node.inner is not None:
        node, depth = node.inner, depth + 1
    assert depth == DEPTH - 1 and float(node.w[0]) == 0.0
    assert split(rebuilt)[0] == graphdef  # equality walks the entries iteratively
    assert hash(split(_chain(DEPTH))[0]) == hash(graphdef)
    assert split(_chain(DEPTH))[0] == graphdef


def test_deep_graphs_iterate_print_and_update():
    model = _chain(DEPTH)
    paths = [path for path, _ in iter_graph(model)]
    assert len(paths) == 2 * DEPTH + 1  # every Link and Param, and the innermost `None`
    assert paths[-1] == ()  # children first, the root last
    text = repr(flat_graph(model).graphdef)
    assert text.count("Link#") == DEPTH
    params = state(model, Param)
    text = repr(params)  # the State prints iteratively too
    assert text.count("'inner': {") == DEPTH - 1 and text.endswith("\n})")
    assert text.count("'w': Param(") == DEPTH
    update(model, params)
    order = flat_graph(model).graphdef.leaf_order  # depth first, attributes by name
    assert order[0] == ("inner",) * (DEPTH - 1) + ("w",) and order[-1] == ("w",)


class Stack(Object):
    def __init__(self, n: int, seed: int) -> None:
        self.layers = List([Link(None, seed + i) for i in range(n)])


def test_graph_functions_from_several_threads_on_separate_models():
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(seed: int) -> None:
        try:
            model = Stack(8, seed)
            barrier.wait()
            for step in range(100):
                graphdef, params = split(model)
                rebuilt = merge(graphdef, params)
                assert float(rebuilt.layers[3].w[0]) == seed + 3
                model.layers[step % 8].flag = step  # a structural change of its own model
                update(model, state(model, Param))
                assert isinstance(flat_graph(model).graphdef, GraphDef)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(10 * i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


class Frozen:
    """An immutable node whose backend hands out a new container on every flatten."""

    def __init__(self, content: object) -> None:
        self.content = content


class FrozenBackend:
    @hookimpl
    def bryo_graph_node_types(self):
        return (
            NodeType(
                Frozen,
                flatten=lambda node: ((("content", tuple(node.content)),), None),
                unflatten=lambda cls, aux, children: cls(list(children[0][1])),
            ),
        )


def test_nodes_made_on_the_fly_by_a_flatten_are_not_mistaken_for_shared_ones(
    bryo_plugin_manager,
):
    # Each flatten makes new tuples that nothing else holds: their ids must not be reused
    # for other nodes during the walk (which would turn them into references).
    bryo_plugin_manager.register(FrozenBackend())
    model = {"a": Frozen([Frozen([1]), Frozen([2])]), "b": Frozen([Frozen([3])])}
    rebuilt = merge(*split(model))
    assert [f.content for f in rebuilt["a"].content] == [[1], [2]]
    assert [f.content for f in rebuilt["b"].content] == [[3]]
    kinds = [type(node).__name__ for _, node in iter_graph(model)]
    assert kinds.count("tuple") == 5 and kinds.count("Frozen") == 5
