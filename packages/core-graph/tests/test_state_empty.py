"""An empty sub-mapping of a State stays (as nested dicts keep it, and as in Flax NNX 0.12)."""

import copy
import pickle

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import Param, State, to_flat_state, to_pure_dict


def _state() -> State:
    return State({"a": Param(jnp.array(1)), "b": {"c": Param(jnp.array(2))}})


def test_deleting_the_last_leaf_of_a_sub_state_leaves_it_empty():
    state = _state()
    del state["b"]["c"]
    assert "b" in state and len(state) == 2
    assert "c" not in state["b"] and len(state["b"]) == 0
    assert state.to_nested() == {"a": state["a"], "b": {}}
    assert "'b': {}" in repr(state)


def test_deleting_a_top_key_removes_it_and_a_missing_key_raises_naming_the_keys():
    state = _state()
    del state["b"]
    assert list(state) == ["a"]
    with pytest.raises(KeyError, match=r"'b' is not in this State; its keys are \['a'\]"):
        del state["b"]


def test_an_empty_mapping_given_to_the_state_is_kept_and_filled_by_a_write():
    state = State({"a": Param(1.0), "b": {}})
    assert "b" in state and state["b"].to_nested() == {}
    state["b"]["c"] = Param(2.0)
    assert state.flat_state() == {("a",): state["a"], ("b", "c"): state["b"]["c"]}
    assert state.to_nested()["b"] == {"c": state["b"]["c"]}
    state["d"] = {}
    assert state.to_nested()["d"] == {}


def test_leaves_views_and_filters_skip_empty_sub_states():
    state = _state()
    del state.b.c
    assert [path for path, _ in to_flat_state(state)] == [("a",)]
    assert "b" not in state.filter(Param)
    assert to_pure_dict(state) == {"a": 1}


def test_an_empty_sub_state_is_part_of_equality_and_of_the_pytree_structure():
    emptied = _state()
    del emptied["b"]["c"]
    plain = State({"a": Param(jnp.array(1))})
    assert emptied != plain
    assert emptied == {"a": Param(jnp.array(1)), "b": {}}
    assert jax.tree.structure(emptied) != jax.tree.structure(plain)
    mapped = jax.tree.map(lambda x: x + 1, emptied)
    assert mapped.to_nested()["b"] == {} and int(mapped["a"][...]) == 2
    through_jit = jax.jit(lambda s: s)(emptied)
    assert "b" in through_jit and len(through_jit["b"]) == 0


def test_copies_and_pickles_keep_empty_sub_states():
    state = _state()
    del state["b"]["c"]
    for copied in (copy.copy(state), copy.deepcopy(state), pickle.loads(pickle.dumps(state))):
        assert "b" in copied and len(copied["b"]) == 0
    # the original is untouched by the copies
    copy.deepcopy(state)["a"] = Param(5)
    assert int(state["a"][...]) == 1


def test_a_state_as_a_graph_node_keeps_its_empty_sub_states():
    from bryo_graph import clone, merge, split

    state = _state()
    del state["b"]["c"]
    assert clone(state).to_nested()["b"] == {}
    graphdef, leaves = split(state)
    assert merge(graphdef, leaves).to_nested()["b"] == {}
