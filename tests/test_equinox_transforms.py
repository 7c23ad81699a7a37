"""bryo's transforms (`jit`, `vmap`, `grad`, the graph-level `scan`) on Equinox models."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import bryo_graph
from bryo_transforms import Carry, cond, grad, jit, scan, switch, vmap

KEY = jax.random.key(0)
MLP = eqx.nn.MLP(3, 2, 4, 1, key=KEY)
X = jnp.linspace(-1.0, 1.0, 3)
XS = jnp.stack([X, 2 * X])


def close(a, b):
    return all(
        np.allclose(x, y, rtol=1e-5, atol=1e-6)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    )


def test_jit_calls_an_equinox_model():
    forward = jit(lambda model, x: model(x))
    np.testing.assert_allclose(forward(MLP, X), MLP(X), rtol=1e-6)
    np.testing.assert_allclose(forward(MLP, 2 * X), MLP(2 * X), rtol=1e-6)


def test_jit_returns_new_equinox_models():
    def twice(model):
        arrays, rest = eqx.partition(model, eqx.is_array)
        return eqx.combine(jax.tree_util.tree_map(lambda v: 2 * v, arrays), rest)

    double = jit(twice)
    doubled = double(MLP)
    assert isinstance(doubled, eqx.nn.MLP)
    np.testing.assert_allclose(doubled.layers[0].weight, 2 * MLP.layers[0].weight)
    assert jit(lambda model: model)(MLP) is MLP


def test_grad_of_an_equinox_model_equals_filter_grad():
    loss = lambda model, x: jnp.sum(model(x) ** 2)
    ours = grad(loss)(MLP, X)
    theirs = eqx.filter_grad(loss)(MLP, X)
    assert [p for p in ours.flat_state()] == [p for p in bryo_graph.state(MLP).flat_state()]
    assert close([v.value for v in ours.flat_state().values()], theirs)


def test_vmap_over_inputs_and_over_an_ensemble():
    batched = vmap(lambda model, x: model(x), in_axes=(None, 0))(MLP, XS)
    np.testing.assert_allclose(batched, jax.vmap(MLP)(XS), rtol=1e-6)
    ensemble = eqx.filter_vmap(lambda k: eqx.nn.MLP(3, 2, 4, 1, key=k))(jax.random.split(KEY, 2))
    ours = vmap(lambda model, x: model(x), in_axes=(0, None))(ensemble, X)
    theirs = eqx.filter_vmap(lambda model, x: model(x), in_axes=(eqx.if_array(0), None))(
        ensemble, X
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_graph_scan_over_stacked_equinox_layers():
    layers = eqx.filter_vmap(lambda k: eqx.nn.Linear(3, 3, key=k))(jax.random.split(KEY, 3))

    @scan(in_axes=(Carry, 0), out_axes=(Carry, 0))
    def step(x, layer):
        y = jnp.tanh(layer(x))
        return y, jnp.sum(y)

    out, sums = step(X, layers)
    x = X
    for i in range(3):
        x = jnp.tanh(jax.tree_util.tree_map(lambda v, i=i: v[i], layers)(x))
    np.testing.assert_allclose(out, x, rtol=1e-5)
    assert sums.shape == (3,)


def test_jit_carries_an_equinox_state():
    norm, state = eqx.nn.make_with_state(eqx.nn.BatchNorm)(3, axis_name="batch", mode="batch")

    def run(norm, xs, state):
        return jax.vmap(norm, in_axes=(0, None), out_axes=(0, None), axis_name="batch")(xs, state)

    ours_y, ours_state = jit(run)(norm, XS, state)
    _, fresh = eqx.nn.make_with_state(eqx.nn.BatchNorm)(3, axis_name="batch", mode="batch")
    theirs_y, theirs_state = eqx.filter_jit(run)(norm, XS, fresh)
    np.testing.assert_allclose(ours_y, theirs_y, rtol=1e-6)
    assert close(ours_state, theirs_state)


class _Counter(eqx.Module):
    """A stateful layer used directly: its call consumes the State it is given (Equinox
    empties it) and returns a new one."""

    index: eqx.nn.StateIndex
    linear: eqx.nn.Linear

    def __init__(self, key):
        self.index = eqx.nn.StateIndex(jnp.zeros(()))
        self.linear = eqx.nn.Linear(3, 3, key=key)

    def __call__(self, x, state):
        count = state.get(self.index)
        return self.linear(x) * (count + 1), state.set(self.index, count + 1)


def test_transforms_take_a_state_that_the_function_consumes():
    # The State each transform hands the function is emptied by Equinox when the layer
    # uses it; reading the inputs back after the call must not take that for a reused
    # State (it raised "this `eqx.nn.State` was already used"), and the caller's State
    # stays as it was, as with eqx.filter_jit.
    model, state = eqx.nn.make_with_state(_Counter)(KEY)
    ref_y, ref_state = model(X, eqx.nn.make_with_state(_Counter)(KEY)[1])

    def loss(model, x, state):
        y, state = model(x, state)
        return jnp.sum(y), state

    y, new_state = jit(lambda m, x, s: m(x, s))(model, X, state)
    np.testing.assert_allclose(y, ref_y, rtol=1e-6)
    assert close(new_state, ref_state)
    grads, new_state = grad(loss, has_aux=True)(model, X, state)
    fresh = eqx.nn.make_with_state(_Counter)(KEY)[1]  # Equinox's grad consumes its State
    eqx_grads, _ = eqx.filter_grad(loss, has_aux=True)(model, X, fresh)
    assert close([v.value for v in grads.flat_state().values()], eqx_grads)
    assert close(new_state, ref_state)
    ys, new_state = vmap(lambda m, x, s: m(x, s), in_axes=(None, 0, None), out_axes=(0, None))(
        model, XS, state
    )
    np.testing.assert_allclose(ys[0], ref_y, rtol=1e-6)
    assert close(new_state, ref_state)
    assert state.get(model.index) == 0  # the caller's State: still valid, unchanged


def test_grad_of_a_model_with_integer_arrays_takes_an_equinox_filter():
    class Counted(eqx.Module):
        weight: jax.Array
        steps: jax.Array  # an integer array: a Param too, but not differentiable

    model = Counted(jnp.ones(2), jnp.zeros((), jnp.int32))
    loss = lambda model, x: jnp.sum(model.weight * x)
    grads = grad(loss, wrt=eqx.is_inexact_array)(model, 2.0)
    assert list(grads.flat_state()) == [("weight",)]
    np.testing.assert_allclose(grads["weight"].value, eqx.filter_grad(loss)(model, 2.0).weight)


def test_cond_and_switch_return_new_equinox_models_as_jax_lax_cond_does():
    # A branch returning a new model (eqx.tree_at) was refused as "not one of its
    # arguments' graph nodes"; an Equinox model holds no Variables to write back, so it
    # leaves as jax.lax.cond gives it: arrays traced, the rest (the activation) static.
    def bump(model):
        return eqx.tree_at(lambda m: m.layers[0].bias, model, model.layers[0].bias + 1.0)

    keep = lambda model: model
    for pred, expected in ((True, bump(MLP)), (False, MLP)):
        out = cond(pred, bump, keep, MLP)
        assert isinstance(out, eqx.nn.MLP) and out.activation is MLP.activation
        assert close(eqx.filter(out, eqx.is_array), eqx.filter(expected, eqx.is_array))
    out = jit(lambda m, i: switch(i, [keep, bump], m))(MLP, 1)
    assert close(eqx.filter(out, eqx.is_array), eqx.filter(bump(MLP), eqx.is_array))
