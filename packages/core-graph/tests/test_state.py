"""Variable, VariableState and State: values, metadata, nesting, pytree behaviour."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bryo_graph import (
    BatchStat,
    Param,
    State,
    Variable,
    VariableState,
    clone,
    graphdef,
    merge,
    split,
)


def test_variable_value_and_metadata():
    count = Variable(0, tag="dropout")
    count.value += 1
    assert count.value == 1 and count.tag == "dropout"
    count.sharding = ("embed", "mlp")  # the older name: stored as `out_sharding`, as Flax does
    assert count.metadata == {"tag": "dropout", "out_sharding": ("embed", "mlp")}
    with pytest.raises(AttributeError, match=r"no metadata or value attribute 'missing'"):
        count.missing  # noqa: B018


@pytest.mark.parametrize("make", [Variable, lambda v, **m: VariableState(Variable, v, **m)])
def test_get_metadata_reads_a_copy_or_one_entry(make):
    count = make(0, tag="dropout")
    everything = count.get_metadata()
    everything["tag"] = "changed"  # a copy: the Variable keeps its metadata
    flags = {"hijax": False, "ref": False, "eager_sharding": True}  # as Flax NNX 0.12
    assert count.get_metadata() == {"tag": "dropout", **flags}
    assert count.metadata == {"tag": "dropout"}
    assert count.get_metadata("tag") == "dropout"
    assert count.get_metadata("ref") is False and count.has_metadata("hijax")
    assert count.get_metadata("sharding", None) is None
    with pytest.raises(KeyError, match="sharding"):
        count.get_metadata("sharding")
    with pytest.raises(TypeError, match="`default` only together with a `name`"):
        count.get_metadata(default=None)


def test_variable_forwards_array_protocols():
    kernel = Param(jnp.arange(4.0).reshape(2, 2))
    x = jnp.ones((1, 2))
    np.testing.assert_allclose(x @ kernel, x @ kernel.value)
    np.testing.assert_allclose(jnp.sum(kernel[...]), 6.0)
    assert kernel.shape == (2, 2) and (kernel + 1)[0, 0] == 1.0
    kernel[0, 0] = 9.0
    assert kernel.value[0, 0] == 9.0


def test_variable_state_round_trip():
    stat = BatchStat(jnp.zeros(3), tag="bn")
    snapshot = stat.to_state()
    assert snapshot.type is BatchStat and snapshot.tag == "bn"
    again = snapshot.to_variable()
    assert type(again) is BatchStat and again.tag == "bn" and again is not stat


def test_variable_state_is_a_pytree_with_one_child():
    snapshot = VariableState(Param, jnp.ones(2), tag="x")
    leaves, _ = jax.tree.flatten(snapshot)
    assert len(leaves) == 1
    doubled = jax.tree.map(lambda v: v * 2, snapshot)
    assert doubled.type is Param and doubled.tag == "x"
    np.testing.assert_array_equal(doubled.value, 2.0)
    retagged = doubled.replace(tag="y")
    assert retagged.tag == "y" and doubled.tag == "x" and retagged.type is Param


def test_state_nesting_and_access():
    state = State({"linear": {"kernel": VariableState(Param, 1), "bias": VariableState(Param, 2)}})
    assert state.flat_state() == {
        ("linear", "kernel"): state["linear"]["kernel"],
        ("linear", "bias"): state.linear.bias,
    }
    assert list(state) == ["linear"] and len(state) == 1 and "linear" in state
    assert isinstance(state["linear"], State)
    with pytest.raises(KeyError, match=r"'conv' is not in this State; its keys are \['linear'\]"):
        state["conv"]
    state["extra"] = {"w": VariableState(Param, 3)}
    assert state.extra.w.value == 3


def test_state_repr_is_nested():
    text = repr(State({"a": VariableState(Param, 0)}))
    assert text == "State({\n  'a': Param(value=0)\n})"


def test_filter_split_merge():
    state = State.from_flat_path(
        {("a",): VariableState(Param, 1), ("b",): VariableState(BatchStat, 2)}
    )
    params = state.filter(Param)
    assert list(params.flat_state()) == [("a",)]
    params, stats = state.split(Param, BatchStat)
    assert State.merge(params, stats) == state
    assert (params | stats) == state
    with pytest.raises(ValueError, match=r"No filter matched path b.*Non-exhaustive filters"):
        state.split(Param)


def test_pure_dicts():
    state = State({"a": {"b": VariableState(Param, jnp.ones(2))}})
    pure = state.to_pure_dict()
    assert set(pure) == {"a"} and isinstance(pure["a"]["b"], jax.Array)
    replaced = state.replace_by_pure_dict({"a": {"b": jnp.zeros(2)}})
    assert replaced["a"]["b"].type is Param
    np.testing.assert_array_equal(replaced["a"]["b"].value, 0.0)
    np.testing.assert_array_equal(state["a"]["b"].value, 1.0)  # the method builds a new State
    listed = State({"layers": {0: VariableState(Param, 1.0)}})
    assert listed.replace_by_pure_dict({"layers": {"0": 2.0}})["layers"][0].value == 2.0
    with pytest.raises(ValueError, match=r"key in pure_dict not available in state: a\.c"):
        state.replace_by_pure_dict({"a": {"c": 1}})


def test_state_is_a_pytree_under_jit():
    state = State({"w": VariableState(Param, jnp.ones(2))})
    out = jax.jit(lambda s: jax.tree.map(lambda v: v + 1, s))(state)
    assert isinstance(out, State) and out.w.type is Param
    np.testing.assert_array_equal(out.w.value, 2.0)


keys = st.one_of(st.text("abc", min_size=1, max_size=2), st.integers(0, 3))
flat_states = st.dictionaries(st.tuples(keys, keys), st.integers(), max_size=8)


@given(flat_states)
def test_from_flat_path_round_trip(flat):
    state = State.from_flat_path({p: VariableState(Param, v) for p, v in flat.items()})
    again = State.from_flat_path(state.flat_state())
    assert again.flat_state() == state.flat_state()
    leaves, treedef = jax.tree.flatten(state)
    assert jax.tree.unflatten(treedef, leaves).flat_state().keys() == state.flat_state().keys()


def test_a_state_is_a_graph_node_clone_split_and_merge_take():
    shared = Param(jnp.ones(2))
    state = State({"a": {"w": shared, "n": 3}, "b": shared})
    graphdef_, leaves = split(state)
    other = Param(jnp.zeros(2))
    assert graphdef_ == graphdef(State({"a": {"w": other, "n": 4}, "b": other}))
    again = merge(graphdef_, leaves)
    assert type(again) is State and again["a"]["w"] is shared and again["a"]["n"] == 3
    copied = clone(state)
    assert copied["a"]["w"] is copied["b"] and copied["b"] is not shared  # sharing kept
    np.testing.assert_array_equal(copied["b"].value, shared.value)
