"""Filters by named axis on real Haliax models: a Haliax model's State carries each
array's axis names, so `WithAxis` selects by a name, a `haliax.Axis` or a `bryo.hax.Axis`
in split, state and grad."""

import equinox as eqx
import haliax
import haliax.nn as hnn
import jax
import numpy as np

import bryo_graph
import bryo_named
import bryo_scan
import bryo_transforms
from bryo_filters import Not
from bryo_graph import WithAxis
from bryo_transforms import DiffState

Embed = haliax.Axis("Embed", 3)
Mlp = haliax.Axis("Mlp", 5)
Out = haliax.Axis("Out", 2)
Layers = haliax.Axis("Layers", 3)


class Block(eqx.Module):
    up: hnn.Linear
    down: hnn.Linear

    @classmethod
    def init(cls, embed, mlp, *, key):
        k1, k2 = jax.random.split(key)
        return cls(hnn.Linear.init(embed, mlp, key=k1), hnn.Linear.init(mlp, embed, key=k2))

    def __call__(self, x):
        return x + self.down(haliax.tanh(self.up(x)))


class Model(eqx.Module):
    blocks: bryo_scan.Stacked
    head: hnn.Linear

    def __call__(self, x):
        return self.head(self.blocks.fold(x))


def model():
    keys = jax.random.split(jax.random.key(0), Layers.size)
    blocks = bryo_scan.Stacked.init(Layers, Block)(Embed, Mlp, key=keys)
    return Model(blocks, hnn.Linear.init(Embed, Out, key=jax.random.key(1)))


X = haliax.random.normal(jax.random.key(2), (Embed,))
LAYER_PATHS = {
    ("blocks", "stacked", layer, part, 0) for layer in ("up", "down") for part in ("weight", "bias")
}
HEAD_PATHS = {("head", "weight", 0), ("head", "bias", 0)}


def test_a_haliax_models_state_names_each_arrays_axes():
    state = bryo_graph.state(model())
    flat = state.flat_state()
    assert flat[("blocks", "stacked", "up", "weight", 0)].out_sharding == ("Layers", "Mlp", "Embed")
    assert flat[("head", "bias", 0)].out_sharding == ("Out",)
    specs = bryo_graph.get_partition_spec(state).flat_state()
    assert tuple(specs[("head", "weight", 0)].value) == ("Out", "Embed")


def test_with_axis_selects_the_layer_arrays_by_any_spelling():
    m = model()
    for axis in ("Layers", Layers, bryo_named.Axis("Layers", 3)):
        graphdef, layered, rest = bryo_graph.split(m, WithAxis(axis), ...)
        assert set(layered.flat_state()) == LAYER_PATHS
        assert set(rest.flat_state()) == HEAD_PATHS
        merged = bryo_graph.merge(graphdef, layered, rest)
        assert merged.blocks.stacked.up.weight.axes == m.blocks.stacked.up.weight.axes
        assert merged.head.weight.axes == m.head.weight.axes
    assert bryo_graph.state(m, WithAxis(haliax.Axis("Layers", 4))).flat_state() == {}
    assert set(bryo_graph.state(m, WithAxis(Out)).flat_state()) == HEAD_PATHS


def test_grad_freezes_every_array_with_a_layers_axis():
    def loss(m, x):
        return haliax.sum(m(x) ** 2).scalar()

    m = model()
    grads = bryo_transforms.grad(loss, argnums=DiffState(0, Not(WithAxis(Layers))))(m, X)
    flat = grads.flat_state()
    assert set(flat) == HEAD_PATHS
    want = eqx.filter_grad(loss)(m, X)
    np.testing.assert_allclose(
        flat[("head", "weight", 0)].value, want.head.weight.array, rtol=1e-5, atol=1e-6
    )


def test_grads_carry_the_states_axis_names_so_an_update_lines_up():
    def loss(m, x):
        return haliax.sum(m(x) ** 2).scalar()

    m = model()
    params, grads = bryo_graph.state(m), bryo_transforms.grad(loss)(m, X)
    path = ("head", "weight", 0)
    assert grads.flat_state()[path].out_sharding == ("Out", "Embed")
    new = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)  # same structure
    assert new.flat_state()[path].out_sharding == ("Out", "Embed")
