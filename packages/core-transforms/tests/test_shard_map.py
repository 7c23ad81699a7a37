"""`shard_map` over graph nodes: `StateSharding` specs per State leaf, state written back
sharded, outputs by `out_specs`; simple mode over pytrees. Runs on the local devices."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from bryo_filters import PathContains
from bryo_graph import BatchStat, Object, Param
from bryo_transforms import StateSharding, shard_map

MESH = jax.sharding.Mesh(jax.devices(), ("a",))
N = len(jax.devices())


class Affine(Object):
    def __init__(self) -> None:
        self.kernel = Param(jnp.ones((4, 8 * N)))
        self.bias = Param(jnp.zeros((8 * N,)))
        self.calls = BatchStat(jnp.array(0))


def test_state_sharding_gives_each_device_its_shard_and_writes_state_back():
    model = Affine()
    specs = StateSharding({PathContains("kernel"): P(None, "a"), ...: P()})
    seen = []

    @shard_map(mesh=MESH, in_specs=(specs, P("a")), out_specs=P("a", None))
    def forward(m, x):
        seen.append((m.kernel.value.shape, m.bias.value.shape))
        m.calls.value = m.calls.value + 1
        return x @ m.kernel.value[:, :4]

    out = forward(model, jnp.ones((2 * N, 4)))
    assert seen == [((4, 8), (8 * N,))] and out.shape == (2 * N, 4)
    assert int(model.calls.value) == 1
    assert model.kernel.value.sharding.spec == P(None, "a")  # every leaf came back sharded


@pytest.mark.parametrize("modes", [{"graph_updates": False}, {"graph": False}])
def test_simple_mode_is_jax_shard_map_over_pytrees(modes):
    w, count = Param(jnp.ones((2, 4 * N))), BatchStat(jnp.array(0))

    @shard_map(mesh=MESH, in_specs=(P(None, "a"), P()), out_specs=P(None, "a"), **modes)
    def double(w, count):
        count.value = count.value + 1
        return w.value * 2

    assert double(w, count).shape == (2, 4 * N) and int(count.value) == 1


def test_new_state_inside_is_an_error_naming_it():
    model = Affine()

    @shard_map(mesh=MESH, in_specs=P(), out_specs=P())
    def grow(m):
        m.extra = Param(jnp.zeros(1))

    with pytest.raises(ValueError, match="added a Param at extra"):
        grow(model)
    assert not hasattr(model, "extra")


def test_state_sharding_from_a_state_of_specs_shards_by_path():
    from bryo_graph import State

    model = Affine()
    spec = State({"kernel": P(None, "a"), "bias": P(), "calls": P()})  # not split's order
    sharding = StateSharding(spec)
    assert sharding.for_leaf(("kernel",), model.kernel) == P(None, "a")
    assert sharding.for_leaf(("bias",), model.bias) == P()

    @shard_map(mesh=MESH, in_specs=(sharding,), out_specs=P())
    def count(m):
        m.calls.value = m.calls.value + 1

    count(model)
    assert int(model.calls.value) == 1
    assert model.kernel.value.sharding.spec == P(None, "a")


def test_simple_mode_takes_a_state_of_specs_in_any_key_order():
    from bryo_graph import State, split

    _, params, _ = split(Affine(), Param, ...)
    spec = State({"kernel": P(None, "a"), "bias": P()})  # split's State is ordered otherwise

    @shard_map(mesh=MESH, in_specs=(spec,), out_specs=P(), graph=False)
    def width(s):
        return jnp.array(s["kernel"].value.shape[1])

    assert int(width(params)) == 8
