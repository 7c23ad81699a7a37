"""`Optimizer` / `ModelAndOptimizer` / `TrainState` on a small graph model: the same numbers
as optax on plain arrays, `wrt` leaves other Variables alone, the optimizer is a graph node
(split, merge, jit), and the Flax 0.11 API errors explain the fix."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import bryo_graph as graph
import bryo_transforms as transforms
from bryo_graph import Object, Param, Variable
from bryo_training import ModelAndOptimizer, OptArray, Optimizer, OptVariable, TrainState


class Frozen(Param):
    __slots__ = ()


class Model(Object):
    def __init__(self, seed: int = 0) -> None:
        k1, k2 = jax.random.split(jax.random.key(seed))
        self.w = Param(jax.random.normal(k1, (3, 2)), sharding=("in", "out"))
        self.b = Frozen(jax.random.normal(k2, (2,)))
        self.calls = Variable(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.w[...]
        return y + jnp.broadcast_to(self.b[...], y.shape)


X = jnp.arange(6.0).reshape(2, 3) / 6


def loss(model: Model) -> jax.Array:
    return jnp.sum(model(X) ** 2)


# optax.adam's update calls `optax.tree.bias_correction`, which computes `1 - decay**count`
# (a Python float to an int32 power): strict dtype promotion (conftest.py) refuses it.
optax_adam_steps = pytest.mark.usefixtures("standard_dtype_promotion")


def plain_adam_steps(params: dict, steps: int) -> dict:
    tx = optax.adam(0.1)
    state = tx.init(params)

    def plain_loss(params):
        return jnp.sum((X @ params["w"] + params["b"][None]) ** 2)

    for _ in range(steps):
        grads = jax.grad(plain_loss)(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


@optax_adam_steps
def test_updates_equal_optax_on_plain_arrays():
    model = Model()
    expected = plain_adam_steps({"w": model.w[...], "b": model.b[...]}, 3)
    optimizer = Optimizer(model, optax.adam(0.1), wrt=Param)
    for _ in range(3):
        optimizer.update(model, transforms.grad(loss)(model))
    np.testing.assert_allclose(model.w[...], expected["w"], rtol=1e-6)
    np.testing.assert_allclose(model.b[...], expected["b"], rtol=1e-6)
    assert int(optimizer.step[...]) == 3


def test_wrt_selects_the_variables_updated():
    model = Model()
    b = model.b[...]
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=lambda path, value: path == ("w",))
    updates = optimizer.update(model, transforms.grad(loss)(model))
    np.testing.assert_array_equal(model.b[...], b)
    assert set(dict(updates.flat_state())) == {("w",)}


def test_opt_state_is_laid_out_as_optax_with_the_parameters_metadata():
    model = Model()
    optimizer = Optimizer(model, optax.adam(0.1), wrt=Param)
    flat = dict(graph.state(optimizer).flat_state())
    assert flat[("opt_state", 0, "mu", "w")].type is OptVariable
    assert flat[("opt_state", 0, "mu", "w")].out_sharding == ("in", "out")
    assert flat[("opt_state", 0, "count")].type is OptArray
    assert ("opt_state", 0, "nu", "b") in flat


def test_opt_state_keeps_optaxs_own_types_as_flax_does():
    # the optimization cookbook reads `optimizer.opt_state[0][1].layers[0]['kernel']`
    model = Model()
    optimizer = Optimizer(model, optax.adam(0.1), wrt=Param)
    adam, empty = optimizer.opt_state
    assert type(adam).__name__ == "ScaleByAdamState" and type(empty).__name__ == "EmptyState"
    assert adam[1] is adam.mu and isinstance(adam.mu, graph.State)
    assert type(adam.mu["w"]) is OptVariable and adam.mu["w"][...].shape == (3, 2)
    assert type(adam.count) is OptArray
    assert optimizer.opt_state[0][1].w is adam.mu["w"]  # a State reads keys as attributes


@optax_adam_steps
def test_the_optimizer_is_a_graph_node_that_jit_and_split_carry():
    model = Model()
    optimizer = Optimizer(model, optax.adam(0.1), wrt=Param)

    @transforms.jit
    def train_step(model, optimizer):
        optimizer.update(model, transforms.grad(loss)(model))

    for _ in range(2):
        train_step(model, optimizer)
    graphdef, state = graph.split((model, optimizer))
    model2, optimizer2 = graph.merge(graphdef, state, copy=True)  # Flax 0.12: shares otherwise
    optimizer2.update(model2, transforms.grad(loss)(model2))
    expected = plain_adam_steps({"w": Model().w[...], "b": Model().b[...]}, 3)
    np.testing.assert_allclose(model2.w[...], expected["w"], rtol=1e-5)
    assert int(optimizer2.step[...]) == 3 and int(optimizer.step[...]) == 2


@pytest.mark.slow
def test_extra_update_arguments_reach_optax():
    model = Model()
    optimizer = Optimizer(model, optax.lbfgs(), wrt=Param)
    graphdef, _, rest = graph.split(model, Param, ...)

    def value_fn(params):
        return loss(graph.merge(graphdef, params, rest))

    before = loss(model)
    for _ in range(2):
        grads = transforms.grad(loss)(model)
        optimizer.update(model, grads, grad=grads, value=loss(model), value_fn=value_fn)
    assert loss(model) < before


def test_model_and_optimizer_keeps_the_model():
    model = Model()
    optimizer = ModelAndOptimizer(model, optax.sgd(0.1))
    before = loss(model)
    optimizer.update(transforms.grad(loss)(model))
    assert loss(optimizer.model) < before and optimizer.model is model


def test_flax_011_api_errors_say_what_to_do():
    model = Model()
    with pytest.raises(TypeError, match="needs `wrt=`"):
        Optimizer(model, optax.sgd(0.1))
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=Param)
    with pytest.raises(TypeError, match=r"`optimizer.update\(model, grads\)`"):
        optimizer.update(transforms.grad(loss)(model))
    with pytest.raises(AttributeError, match="keeps no `model`"):
        _ = optimizer.model


@optax_adam_steps
def test_train_state_applies_gradients_functionally():
    model = Model()
    graphdef, params, rest = graph.split(model, Param, ...)
    ts = TrainState.create(graphdef, params=params, tx=optax.adam(0.1))

    @jax.jit
    def step(ts, rest):
        def pure_loss(params):
            out, _ = ts.apply(params, rest)(X)
            return jnp.sum(out**2)

        return ts.apply_gradients(jax.grad(pure_loss)(ts.params))

    for _ in range(3):
        ts = step(ts, rest)
    expected = plain_adam_steps({"w": model.w[...], "b": model.b[...]}, 3)
    np.testing.assert_allclose(dict(ts.params.flat_state())[("w",)].value, expected["w"], rtol=1e-5)
    assert int(ts.step) == 3


def test_train_state_subclasses_add_fields_and_name_states():
    class WithRest(TrainState[Model]):  # generic in the model, as Flax's toy example 03 writes
        rest: graph.State

    model = Model()
    graphdef, params, rest = graph.split(model, Param, ...)
    ts = WithRest.create(graphdef, params=params, tx=optax.sgd(0.1), rest=rest)
    out, (new_graphdef, _) = ts.apply("params", "rest")(X)
    np.testing.assert_allclose(out, model(X))
    assert new_graphdef == graphdef
    assert jax.tree.leaves(jax.tree.map(jnp.shape, ts))  # a pytree, subclass fields included
    with pytest.raises(TypeError, match="the field 'step' holds a"):
        ts.apply("params", "step")
