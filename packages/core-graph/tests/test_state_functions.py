"""Flax NNX 0.12's module-level State functions: flat states, pure dicts, filtering,
`as_pure` and `set_metadata`."""

import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_graph import (
    BatchStat,
    List,
    Object,
    Param,
    Variable,
    as_pure,
    filter_state,
    from_flat_state,
    replace_by_pure_dict,
    restore_int_paths,
    set_metadata,
    split_state,
    state,
    to_flat_state,
    to_pure_dict,
)


class Model(Object):
    def __init__(self):
        self.w = Param(jnp.ones(2))
        self.stat = BatchStat(jnp.zeros(2))
        self.layers = List([Param(1.0), Param(2.0)])


def test_flat_state_round_trips_in_order():
    s = state(Model())
    flat = to_flat_state(s)
    assert [path for path, _ in flat] == list(s.flat_state())
    assert from_flat_state(flat) == s
    assert from_flat_state(dict(flat)) == s


def test_filter_and_split_state():
    s = state(Model())
    params = filter_state(s, Param)
    assert set(params.flat_state()) == {("w",), ("layers", 0), ("layers", 1)}
    params, stats = split_state(s, Param, BatchStat)
    assert list(stats.flat_state()) == [("stat",)]
    with pytest.raises(ValueError, match="No filter matched path stat"):
        split_state(s, Param)


def test_pure_dict_round_trip_in_place_with_string_indices():
    model = Model()
    s = state(model)
    pure = to_pure_dict(s)
    assert pure["layers"] == {0: 1.0, 1: 2.0}
    replace_by_pure_dict(s, {"layers": {"1": 5.0}, "w": jnp.zeros(2)})
    assert s["layers"][1].value == 5.0 and isinstance(s["layers"][1], Param)
    assert model.layers[1].value == 2.0  # the State's Variables are replaced, not the model's
    assert to_pure_dict(s, lambda leaf: type(leaf).__name__)["stat"] == "BatchStat"
    replace_by_pure_dict(s, {"stat": 1}, lambda leaf, value: leaf.replace(value + 1))
    assert s["stat"].value == 2


def test_replace_by_pure_dict_names_unknown_paths_and_keeps_the_state():
    s = state(Model())
    before = to_pure_dict(s)
    with pytest.raises(ValueError, match=r"key in pure_dict not available in state: layers\.7"):
        replace_by_pure_dict(s, {"w": jnp.zeros(2), "layers": {"7": 0.0}})
    assert (to_pure_dict(s)["w"] == before["w"]).all()
    with pytest.raises(TypeError, match="`to_flat_state` takes a State"):
        to_flat_state({"w": 1})  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.integers(-3, 30), st.integers(), max_size=5))
def test_restore_int_paths_undoes_string_keys(mapping):
    as_strings = {str(k): {str(k): v} for k, v in mapping.items()}
    assert restore_int_paths(as_strings) == {k: {k: v} for k, v in mapping.items()}


def test_as_pure_and_set_metadata():
    model = Model()
    pure = as_pure(state(model))
    assert not any(isinstance(leaf, Variable) for leaf in pure.flat_state().values())
    set_metadata(model, only=Param, tag="frozen")
    assert model.w.tag == "frozen" and model.layers[0].tag == "frozen"
    assert not model.stat.has_metadata("tag")
    with pytest.raises(TypeError, match="needs at least one metadata keyword"):
        set_metadata(model)
