"""WithAxis: state selected by a named axis, read where sharding reads logical axes (a
Variable's sharding metadata, else the names its value carries through a backend)."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bryo_filters import Not, to_predicate
from bryo_graph import (
    Object,
    Param,
    ShardingError,
    State,
    VariableState,
    WithAxis,
    logical_axes,
    split,
    split_state,
    with_partitioning,
)
from bryo_plugins import hookimpl


@dataclasses.dataclass(frozen=True)
class Axis:  # the shape of bryo.hax.Axis and haliax.Axis: a name and a size
    name: str
    size: int


class Labelled:
    """A value naming its own axes, as a named-axis backend's arrays do."""

    def __init__(self, array, names):
        self.array, self.names = array, names


jax.tree_util.register_pytree_node(
    Labelled, lambda x: ((x.array,), x.names), lambda names, c: Labelled(c[0], names)
)


def state():
    return State(
        {
            "layers": VariableState(
                Param, jnp.ones((3, 4, 5)), out_sharding=("layers", "embed", None)
            ),
            "bias": VariableState(Param, jnp.ones(5), sharding_names=("mlp",)),
            "fused": VariableState(
                Param, jnp.ones((4, 6)), out_sharding=(("embed", "heads"), None)
            ),
            "plain": VariableState(Param, jnp.ones(4)),
        }
    )


def selected(filter):
    predicate = to_predicate(filter)
    return sorted(path[0] for path, value in state().flat_state().items() if predicate(path, value))


def test_names_come_from_every_sharding_metadata_key():
    assert selected(WithAxis("layers")) == ["layers"]
    assert selected(WithAxis("mlp")) == ["bias"]
    assert selected(WithAxis("heads")) == ["fused"]  # a dimension with several names
    assert selected(WithAxis("embed")) == ["fused", "layers"]
    assert selected(WithAxis("nowhere")) == []
    assert selected(Not(WithAxis("embed"))) == ["bias", "plain"]


def test_an_axis_with_a_size_matches_that_size_only():
    assert selected(WithAxis(Axis("layers", 3))) == ["layers"]
    assert selected(WithAxis(Axis("layers", 4))) == []
    assert selected(WithAxis(Axis("embed", 4))) == ["fused", "layers"]
    assert WithAxis(Axis("layers", 3)) == WithAxis(Axis("layers", 3)) != WithAxis("layers")
    assert repr(WithAxis(Axis("layers", 3))) == "WithAxis('layers', size=3)"
    assert repr(WithAxis("layers")) == "WithAxis('layers')"
    assert len({WithAxis("a"), WithAxis("a"), WithAxis(Axis("a", 1))}) == 2  # hashable


def test_split_state_and_split_take_it():
    stacked, rest = split_state(state(), WithAxis("layers"), ...)
    assert list(stacked) == ["layers"] and sorted(rest) == ["bias", "fused", "plain"]

    class Model(Object):
        def __init__(self):
            self.w = Param(jnp.ones((2, 3)), out_sharding=("layers", "embed"))
            self.b = Param(jnp.ones(3))
            self.u = Param(init())  # Flax's nnx.with_partitioning metadata

    init = with_partitioning(lambda: jnp.ones((2, 3)), ("layers", None))
    model = Model()
    _, layered, rest = split(model, WithAxis("layers"), ...)
    assert sorted(layered) == ["u", "w"] and list(rest) == ["b"]


def test_values_naming_their_own_axes_through_a_backend(bryo_plugin_manager):
    class Names:
        @hookimpl
        def bryo_graph_logical_axes(self):
            return {Labelled: lambda value: value.names}

    bryo_plugin_manager.register(Names())
    tree = State(
        {
            "named": VariableState(Param, Labelled(jnp.ones((3, 2)), ("layers", "embed"))),
            "meta_wins": VariableState(
                Param, Labelled(jnp.ones((3, 2)), ("layers", "embed")), out_sharding=(None, "embed")
            ),
        }
    )
    stacked, rest = split_state(tree, WithAxis(Axis("layers", 3)), ...)
    assert list(stacked) == ["named"] and list(rest) == ["meta_wins"]
    assert WithAxis("layers")((), Labelled(jnp.ones(3), ("layers",)))  # a bare value too
    assert logical_axes(Labelled(jnp.ones(3), ("layers",))) == ("layers",)


def test_logical_axes():
    assert logical_axes(Param(jnp.ones((2, 3)), out_sharding=("embed", None))) == ("embed", None)
    assert logical_axes(Param(jnp.ones(2))) is None
    assert logical_axes(jnp.ones(2)) is None


def test_malformed_metadata_is_named_with_its_path():
    bad = State({"w": VariableState(Param, jnp.ones(2), out_sharding=3)})
    with pytest.raises(ShardingError, match=r"`sharding` metadata of Param at w"):
        split_state(bad, WithAxis("layers"), ...)


@pytest.mark.parametrize("axis", [3, None, ("layers",), Axis(3, 3)])
def test_anything_but_a_name_or_an_axis_is_refused(axis):
    with pytest.raises(TypeError, match=r"`WithAxis` takes an axis name .* got"):
        WithAxis(axis)


@given(
    names=st.lists(
        st.one_of(st.none(), st.sampled_from("abc"), st.tuples(st.sampled_from("abc"))),
        min_size=1,
        max_size=3,
    ),
    wanted=st.sampled_from("abcd"),
)
def test_matches_exactly_the_values_naming_the_axis(names, wanted):
    shape = tuple(range(2, 2 + len(names)))
    value = VariableState(Param, jnp.zeros(shape), out_sharding=tuple(names))
    flat = [
        n
        for entry in names
        if entry is not None
        for n in ((entry,) if isinstance(entry, str) else entry)
    ]
    assert WithAxis(wanted)((), value) == (wanted in flat)
    sized = [
        shape[i]
        for i, entry in enumerate(names)
        if entry == wanted or (isinstance(entry, tuple) and wanted in entry)
    ]
    for size in (2, 3, 4):
        assert WithAxis(Axis(wanted, size))((), value) == (size in sized)
