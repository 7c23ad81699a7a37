"""Flax NNX 0.12's graph utilities in bryo_graph: `find_duplicates`, `call` and
`GraphDef.apply`, `cached_partial`, `flatten`/`unflatten` with `FlatState`, the `Data`/
`Static` annotations, `check_pytree`, the Variable name registry, and State equality
with plain mappings."""

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import (
    BatchStat,
    Data,
    FlatState,
    GraphDef,
    GraphError,
    GraphObject,
    List,
    Object,
    Param,
    PureState,
    State,
    Static,
    TreeDef,
    Variable,
    as_pure,
    cached_partial,
    call,
    check_pytree,
    data,
    find_duplicates,
    flatten,
    graph,
    merge,
    pure,
    register_variable_name,
    set_graph_mode,
    set_graph_updates,
    split,
    static,
    unflatten,
    variable_name_from_type,
    variable_type_from_name,
)


class Counter(Object):
    def __init__(self, n: int = 0) -> None:
        self.w = Param(jnp.ones((2,)))
        self.count = Variable(jnp.asarray(n))

    def increment(self) -> None:
        self.count.value = self.count.value + 1

    def __call__(self, x: jax.Array) -> jax.Array:
        self.increment()
        return x * self.w.value


# find_duplicates -----------------------------------------------------------------------


class Shared(Object):
    def __init__(self) -> None:
        self.a = Counter()
        self.b = Counter()
        self.c = self.a  # a shared module
        self.p = Param(1.0)
        self.q = self.p  # a shared Variable
        self.plain = data({"x": self.b.w})  # a plain dict is walked, not reported


def test_find_duplicates_lists_shared_nodes_and_variables_by_path():
    duplicates = find_duplicates(Shared())
    assert [("a",), ("c",)] in duplicates
    assert [("p",), ("q",)] in duplicates
    assert [("b", "w"), ("plain", "x")] in duplicates
    assert len(duplicates) == 3


def test_find_duplicates_only_filters_and_unshared_graph_has_none():
    assert find_duplicates(Shared(), only=Param) == [
        [("b", "w"), ("plain", "x")],
        [("p",), ("q",)],
    ]
    assert find_duplicates(Counter()) == []


def test_find_duplicates_refuses_a_plain_list_containing_itself():
    looped: list = [1]
    looped.append(looped)
    with pytest.raises(ValueError, match="plain list that contains itself, at \\[1\\]"):
        find_duplicates(looped)


# call / GraphDef.apply -----------------------------------------------------------------


def test_call_runs_a_method_purely_and_returns_the_new_pair():
    counter = Counter()
    pair = split(counter)
    y, pair2 = call(pair)(jnp.full((2,), 3.0))
    assert y.tolist() == [3.0, 3.0]
    assert counter.count.value == 0 and pair[1]["count"].value == 0  # nothing given changed
    assert merge(*pair2).count.value == 1
    _, pair3 = call(pair2).increment()
    assert merge(*pair3).count.value == 2


def test_call_under_jit_and_item_access():
    nodes = {"a": Counter(), "b": Counter(5)}

    @jax.jit
    def bump_b(pair: PureState[dict]) -> PureState[dict]:
        return call(pair)["b"].increment()[1]

    pair = bump_b(split(nodes))
    pair = bump_b(pair)
    rebuilt = merge(*pair)
    assert (rebuilt["a"].count.value, rebuilt["b"].count.value) == (0, 7)
    assert nodes["b"].count.value == 5


def test_graphdef_apply_in_both_modes():
    counter = Counter()
    for mode in (True, False):
        graphdef, state = split(counter, graph=mode)
        _, (new_def, new_state) = graphdef.apply(state)(jnp.ones((2,)))
        assert isinstance(new_def, TreeDef if not mode else GraphDef)
        assert new_state["count"].value == 1 and counter.count.value == 0


def test_call_errors_name_the_problem():
    with pytest.raises(TypeError, match="`call` takes the `\\(graphdef, state\\)` pair"):
        call(Counter())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a GraphDef"):
        call((1, State({})))
    pair = split({"a": Counter()})
    with pytest.raises(AttributeError, match="cannot reach `\\['b'\\]`"):
        call(pair)["b"].increment()
    with pytest.raises(TypeError, match=r"`\['a'\].count.value`, a .*, which is not callable"):
        call(pair)["a"].count.value()


# cached_partial, pure ------------------------------------------------------------------


def test_cached_partial_binds_the_models_in_graph_mode_only():
    counter = Counter()
    step = cached_partial(lambda m, x: m(x), counter)
    step(jnp.ones((2,)))
    step(jnp.ones((2,)))
    assert counter.count.value == 2
    with pytest.raises(ValueError, match="graph-mode API"):
        cached_partial(lambda m: m, counter, graph=False)
    with set_graph_updates(False), pytest.raises(ValueError, match="graph_updates=True"):
        cached_partial(lambda m: m, counter)


def test_cached_partial_passes_one_copy_sharing_the_variables():
    """As Flax's: `f` gets a copy of the given module holding the same Variables (what it
    writes reaches the module), made once: a returned module is that copy every call."""
    counter = Counter()
    seen = []

    def step(copy: Counter, x: jax.Array) -> Counter:
        seen.append(copy)
        copy(x)
        return copy

    cached = cached_partial(step, counter)
    first, second = cached(jnp.ones((2,))), cached(jnp.ones((2,)))
    assert first is second is seen[0] is seen[1] and first is not counter
    assert first.count is counter.count and first.w is counter.w
    assert counter.count.value == 2


def test_cached_partial_copies_modules_sharing_a_submodule_as_one_graph():
    inner = Counter()
    outer = List([inner])
    seen = []
    cached_partial(lambda a, b, rest: seen.extend([a, b, rest]), outer, inner, {"n": 3})()
    copied_outer, copied_inner, rest = seen
    assert copied_outer[0] is copied_inner and copied_inner is not inner
    assert copied_inner.w is inner.w and rest == {"n": 3}


def test_cached_partial_refuses_a_structure_change_and_copies_again():
    """A change `f` leaves in the copy's structure would not reach the given module: a
    ValueError after the call (as Flax's); the next call copies the module again."""
    counter = Counter()

    def grow(copy: Counter) -> None:
        copy.extra = Param(jnp.zeros(()))

    with pytest.raises(ValueError, match=r"'grow', given a Counter by `cached_partial`"):
        cached_partial(grow, counter)()
    assert not hasattr(counter, "extra")

    def swap(copy: Counter) -> None:
        copy.w = Param(jnp.ones((2,)))  # the same structure, another Variable

    with pytest.raises(ValueError, match="which Variable sits where"):
        cached_partial(swap, counter)()

    calls = []

    def temporary(copy: Counter) -> None:
        calls.append(copy)
        if len(calls) == 1:
            copy.note = 1
            del copy.note  # undone before returning: allowed
        else:
            copy.note = len(calls)

    cached = cached_partial(temporary, counter)
    cached()
    with pytest.raises(ValueError, match="'temporary'"):
        cached()
    changed = calls[-1]
    calls.clear()
    cached()  # a fresh copy, without the note
    assert calls[0] is not changed and changed.note == 2 and not hasattr(calls[0], "note")


def test_cached_partial_sees_structure_changes_made_to_the_given_module():
    counter = Counter()
    seen = []
    cached = cached_partial(lambda copy: seen.append(copy), counter)
    cached()
    counter.scale = Param(jnp.ones(()))
    cached()
    assert seen[0] is not seen[1] and seen[1].scale is counter.scale


def test_pure_is_as_pure():
    assert pure is as_pure
    assert pure({"w": Param(2.0)}) == {"w": 2.0}


# flatten / unflatten / FlatState -------------------------------------------------------


def test_flatten_gives_a_flat_state_of_live_variables():
    counter = Counter()
    graphdef, flat = flatten(counter)
    assert isinstance(graphdef, GraphDef) and isinstance(flat, FlatState)
    assert flat.paths == (("count",), ("w",))
    assert flat.leaves[1] is counter.w
    rebuilt = unflatten(graphdef, flat)
    assert rebuilt is not counter and rebuilt.w is counter.w


def test_flatten_without_paths_and_in_tree_mode():
    counter = Counter()
    graphdef, leaves = flatten(counter, with_paths=False)
    assert type(leaves) is list and leaves[0] is counter.count
    assert unflatten(graphdef, leaves).count is counter.count
    with set_graph_mode(False):
        treedef, flat = flatten(counter)
    assert isinstance(treedef, TreeDef)
    assert unflatten(treedef, flat).w is counter.w
    assert unflatten(treedef, flat.leaves).w is counter.w


def test_merge_takes_what_flatten_returned_also_for_a_bare_leaf():
    x = jnp.ones(2)
    for mode in (True, False):
        graphdef, flat = flatten(x, graph=mode)
        assert flat[0][1] is x and merge(graphdef, flat) is x
    counter = Counter()
    assert merge(*flatten(counter)).w is counter.w


def test_unflatten_refuses_the_wrong_number_of_leaves():
    graphdef, leaves = flatten(Counter(), with_paths=False)
    given = leaves[:1]
    with pytest.raises(GraphError, match="got 1 for a GraphDef of 2 \\(count, w\\)"):
        unflatten(graphdef, given)
    assert len(given) == 1
    with pytest.raises(GraphError, match="Incorrect number of leaves: 0 given, 2 expected"):
        unflatten(graphdef, State({}))


def test_graph_flatten_gives_flax_pairs_and_keeps_the_seed_spelling():
    counter = Counter()
    graphdef, state = graph.flatten(counter)
    assert isinstance(state, FlatState)  # Flax's: iterating yields (path, leaf) pairs
    pairs = [(path, value) for path, value in state]
    assert pairs == [(("count",), counter.count), (("w",), counter.w)]
    assert state.flat_state() == dict(pairs)  # seed 000's older spelling
    params = State.from_flat_path({p: v for p, v in state if isinstance(v, Param)})
    assert graph.unflatten(graphdef, state).w is counter.w and set(params) == {"w"}


def test_flat_state_reads_filters_and_nests():
    flat = FlatState.from_sorted_keys_values([("a",), ("b", "c")], [Param(1.0), BatchStat(2.0)])
    assert flat == [(("a",), flat.leaves[0]), (("b", "c"), flat.leaves[1])]
    params, rest = flat.split(Param, ...)
    assert params.paths == (("a",),) and rest.paths == (("b", "c"),)
    assert flat.filter(BatchStat).paths == (("b", "c"),)
    assert flat.to_nested_state()["b"]["c"] is flat.leaves[1]
    with pytest.raises(ValueError):
        FlatState.from_sorted_keys_values([("a",)], [])


# Data / Static annotations, check_pytree -----------------------------------------------


def test_data_and_static_annotations_mark_attributes_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="is deprecated"):

        @dataclasses.dataclass
        class Foo(Object):
            a: Data[int]
            b: Static[int]
            c: jax.Array

    foo = Foo(a=1, b=2, c=jnp.array(3))
    assert len(jax.tree.leaves(foo)) == 2
    foo.a = 3
    assert len(jax.tree.leaves(foo)) == 2
    foo.a = static(3)
    assert len(jax.tree.leaves(foo)) == 1


def test_postponed_string_annotations_count_too():
    with pytest.warns(DeprecationWarning):

        class Bar(Object):
            __annotations__ = {"n": "nnx.Data[int]", "k": "Static[str]", "z": "list[int]"}

            def __init__(self) -> None:
                self.n = 1
                self.k = "x"

    assert jax.tree.leaves(Bar()) == [1]


def test_check_pytree_finds_data_hidden_in_a_static_attribute_later():
    class Holder(Object):
        def __init__(self) -> None:
            self.items: list = []

    holder = Holder()
    check_pytree(holder)
    holder.items.append(jnp.zeros(1))
    with pytest.raises(ValueError, match="static attribute 'items' of Pytree type 'Holder'"):
        check_pytree(holder)
    assert len(holder.items) == 1
    with pytest.raises(TypeError, match="`check_pytree` takes a Pytree"):
        check_pytree([1])
    check_pytree(List([jnp.zeros(1)]))


# Variable names ------------------------------------------------------------------------


def test_variable_names_map_both_ways():
    assert variable_type_from_name("params") is Param
    assert variable_name_from_type(BatchStat) == "batch_stats"


def test_register_variable_name_as_decorator_and_its_errors():
    @register_variable_name("test_flax_utils_stats")
    class Stats(Variable):
        pass

    assert variable_type_from_name("test_flax_utils_stats") is Stats
    assert variable_name_from_type(Stats) == "test_flax_utils_stats"
    with pytest.raises(ValueError, match="already linked with Stats; pass `overwrite=True`"):
        register_variable_name("test_flax_utils_stats", Param)
    assert variable_type_from_name("test_flax_utils_stats") is Stats
    with pytest.raises(TypeError, match="takes a Variable subclass"):
        register_variable_name("test_flax_utils_bad", int)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="not linked with a Variable class"):
        variable_type_from_name("test_flax_utils_unknown")


def test_unknown_names_and_types_register_on_request():
    made = variable_type_from_name("test_flax_utils_made", base=Param, allow_register=True)
    assert issubclass(made, Param) and made.__name__ == "test_flax_utils_made"
    assert variable_type_from_name("test_flax_utils_made") is made

    class Unnamed(Variable):
        pass

    with pytest.raises(ValueError, match="Unnamed is not linked"):
        variable_name_from_type(Unnamed)
    assert variable_name_from_type(Unnamed, allow_register=True) == "Unnamed"
    assert variable_type_from_name("Unnamed") is Unnamed


# State equality --------------------------------------------------------------------------


def test_state_equals_plain_mappings_by_leaves():
    assert State({}) == {}
    assert State({"a": {"b": 1}}) == {"a": {"b": 1}}
    assert {"a": {"b": 1}} == State({"a": {"b": 1}})
    assert State({"a": 1}) != {"a": 2}
    assert State({"a": 1}) != [1]
    assert pickle.loads(pickle.dumps(State({"a": 1}))) == {"a": 1}


def test_graph_object_is_flaxs_unchecked_non_pytree_object():
    class Holder(GraphObject):  # Flax's pytree guide: `class Foo(nnx.Object)`
        def __init__(self) -> None:
            self.arrays = [jnp.ones(2), jnp.zeros(2)]  # a plain list of arrays is accepted

    holder = Holder()
    assert jax.tree.leaves(holder) == [holder]  # not a pytree: one leaf
    graphdef, state = split(holder)
    assert set(state.flat_state()) == {("arrays", 0), ("arrays", 1)}
    assert merge(graphdef, state).arrays[1] is state["arrays"][1]
    with pytest.raises(ValueError, match=r"subclasses `nnx.Object`.*Subclass `nnx.Pytree`"):

        class Bad(GraphObject, pytree=True):
            pass
