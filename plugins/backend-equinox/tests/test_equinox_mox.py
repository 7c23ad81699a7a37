"""MoX tracing of Equinox models: module calls with type, path and attributes."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

bryo_mox = pytest.importorskip("bryo_mox")


class Block(eqx.Module):
    linear: eqx.nn.Linear
    label: str = eqx.field(static=True)

    def __call__(self, x):
        return x + jnp.tanh(self.linear(x))


class Net(eqx.Module):
    layers: list
    depth: int = eqx.field(static=True)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


KEYS = jax.random.split(jax.random.key(0), 2)
NET = Net([Block(eqx.nn.Linear(3, 3, key=k), label=f"b{i}") for i, k in enumerate(KEYS)], 2)
X = jnp.linspace(-1.0, 1.0, 3)
MOX = bryo_mox.make_mox(lambda model, x: model(x))(NET, X)


def module_calls(node):
    for child in getattr(node, "nodes", ()):
        if isinstance(child, bryo_mox.ModuleCall):
            yield child
            yield from module_calls(child)


def test_module_calls_carry_type_path_and_attributes():
    calls = {call.name: call for call in module_calls(MOX)}
    assert set(calls) == {"", "layers/0", "layers/1", "layers/0/linear", "layers/1/linear"}
    assert calls[""].type.endswith("Net") and calls[""].attrs == {"depth": 2}
    assert calls["layers/1"].attrs == {"label": "b1"}
    linear = calls["layers/0/linear"]
    assert linear.info.short_type == "Linear"
    assert dict(linear.attrs) == {"in_features": 3, "out_features": 3, "use_bias": True}
    assert linear.n_state == 2  # weight and bias, then the argument


def test_the_mox_computes_what_the_model_does():
    np.testing.assert_allclose(bryo_mox.eval_mox(MOX, NET, X), NET(X), rtol=1e-6)
    found = bryo_mox.query('//module_call[@type="Linear"]', MOX)
    assert len(found) == 2


def test_models_are_positional_and_non_array_fields_static():
    mlp = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(1))  # `activation`: a function leaf
    mox = bryo_mox.make_mox(lambda m, x: m(x))(mlp, X)
    arrays = [leaf for leaf in jax.tree.leaves(mlp) if eqx.is_array(leaf)]
    assert len(mox.invars) == len(arrays) + 1 and mox.static_leaves
    np.testing.assert_allclose(bryo_mox.eval_mox(mox, mlp, X), mlp(X), rtol=1e-6)
    other = eqx.tree_at(lambda m: m.activation, mlp, jax.nn.tanh)
    with pytest.raises(bryo_mox.MoxError, match=r"`args\[0\]\.activation` is"):
        bryo_mox.eval_mox(mox, other, X)


def test_calls_are_plain_again_after_tracing():
    assert not hasattr(eqx.nn.Linear.__dict__["__call__"], "__bryo_equinox_original__")
    assert not hasattr(Block.__dict__["__call__"], "__bryo_equinox_original__")
    np.testing.assert_allclose(NET(X), bryo_mox.eval_mox(MOX, NET, X), rtol=1e-6)


class Normed(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.BatchNorm

    def __init__(self, key):
        self.linear = eqx.nn.Linear(3, 4, key=key)
        self.norm = eqx.nn.BatchNorm(4, axis_name="batch", mode="ema")

    def __call__(self, x, state):
        return self.norm(self.linear(x), state)


def _batched(model, xs, state):
    return jax.vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")(xs, state)


def test_a_stateful_batch_norm_evaluates_to_what_equinox_returns():
    # The State's first-time flag leaves the traced call as a constant (`False`), which
    # eval_mox gives back as the bool array Equinox's call returns, not a Python bool.
    model, state = eqx.nn.make_with_state(Normed)(jax.random.key(1))
    xs = jnp.stack([X, 2 * X])
    mox = bryo_mox.make_mox(_batched)(model, xs, state)
    expected_y, expected_state = _batched(model, xs, state)
    jitted = eqx.filter_jit(lambda model, xs, state: bryo_mox.eval_mox(mox, model, xs, state))
    for run in (lambda *args: bryo_mox.eval_mox(mox, *args), jitted):
        y, new_state = run(model, xs, state)
        np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-6)
        got = jax.tree_util.tree_leaves(new_state)
        want = jax.tree_util.tree_leaves(expected_state)
        assert [type(leaf) for leaf in got] == [type(leaf) for leaf in want]
        assert [(leaf.dtype, leaf.shape) for leaf in got] == [(w.dtype, w.shape) for w in want]
        for leaf, w in zip(got, want, strict=True):
            np.testing.assert_allclose(leaf, w, rtol=1e-5, atol=1e-6)


def test_constant_outputs_are_arrays_of_their_traced_type():
    mox = bryo_mox.make_mox(lambda x: (x, jnp.asarray(3, jnp.int8), 2.0))(X)
    _, small, weak = bryo_mox.eval_mox(mox, X)
    assert isinstance(small, jax.Array) and small.dtype == jnp.int8 and int(small) == 3
    assert isinstance(weak, jax.Array) and weak.weak_type and float(weak) == 2.0
