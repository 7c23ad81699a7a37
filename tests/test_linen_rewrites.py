"""Rewriting Flax Linen MoX (YAX's sub tests, on bryo): ReLU -> GELU in an `nn.Sequential`,
an `Identity` placeholder -> `nn.Dense`, every `Dense` -> a LoRA Linen module; the results
survive a round trip through XML and YSON."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo import mox as yax

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def test_relu_to_gelu_in_a_sequential():
    model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
    variables = jax.jit(model.init)(jax.random.key(42), X)
    mox = yax.make_mox(model.apply)(variables, X)
    gelu = yax.sub('//pjit[@name="relu"]', yax.make_mox(jax.nn.gelu)(X), mox)
    expected = nn.Sequential([nn.Dense(4), nn.gelu, nn.Dense(2)]).apply(variables, X)
    np.testing.assert_allclose(yax.eval_mox(gelu, variables, X), expected, rtol=1e-5)


class Identity(nn.Module):
    features: int = 4

    def __call__(self, xs):
        return jnp.array(xs)


class ResModule(nn.Module):
    inner: type = Identity

    @nn.compact
    def __call__(self, xs):
        return xs + self.inner(4)(xs)


def test_identity_to_dense():
    placeholder = ResModule()
    mox = yax.make_mox(placeholder.apply)(placeholder.init(jax.random.key(0), X), X)
    (identity,) = yax.query('//module_call[@name="Identity_0"]', mox)
    dense = nn.Dense(4)
    dense_variables = dense.init(jax.random.key(1), X)
    new = yax.sub(identity, yax.make_mox(dense.apply)(dense_variables, X), mox)
    keys = ["Identity_0:0", "Identity_0:1"]  # the Dense's bias and kernel
    assert [key for key, _ in new.extra_params] == keys
    extra = dict(zip(keys, jax.tree.leaves(dense_variables), strict=True))
    variables = {"params": {"Dense_0": dense_variables["params"]}}
    expected = ResModule(inner=nn.Dense).apply(variables, X)
    np.testing.assert_allclose(yax.eval_mox(new, {}, X, extra), expected, rtol=1e-6)
    assert [n.info.short_type for n in yax.query("//module_call", new)] == ["ResModule", "Dense"]


class Block(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs + nn.relu(nn.Dense(4)(xs))


class Net(nn.Module):
    @nn.compact
    def __call__(self, xs):
        for _ in range(2):
            xs = Block()(xs)
        return nn.Dense(2, name="head")(xs)


class LoRA(nn.Module):
    """`A` and `B` sort before `base`: the adapter's last inputs are the Dense's weights."""

    features: int
    rank: int = 1

    @nn.compact
    def __call__(self, xs):
        a = self.param("A", nn.initializers.normal(), (xs.shape[-1], self.rank))
        b = self.param("B", nn.initializers.zeros, (self.rank, self.features))
        return nn.Dense(self.features, name="base")(xs) + xs @ a @ b


def reference(variables, xs, extra):
    """The LoRA-adapted Net, written out by hand."""

    def dense(params, key, x):
        out = x @ params["kernel"]
        out = out + jnp.broadcast_to(params["bias"], out.shape)
        return out + x @ extra[f"{key}:0"] @ extra[f"{key}:1"]

    params = variables["params"]
    for name in ("Block_0", "Block_1"):
        xs = xs + nn.relu(dense(params[name]["Dense_0"], f"{name}/Dense_0", xs))
    return dense(params["head"], "head", xs)


@pytest.mark.parametrize("fmt", ["xml", "yson"])
def test_every_dense_to_lora_and_back_from_a_file(fmt):
    model = Net()
    variables = model.init(jax.random.key(0), X)
    mox = yax.make_mox(model.apply)(variables, X)
    adapters = {}
    for features in (4, 2):
        lora = LoRA(features)
        lora_variables = lora.init(jax.random.key(features), X)
        adapters[features] = yax.make_mox(lora.apply)(lora_variables, X)
    new = mox
    for features, adapter in adapters.items():
        xpath = f'//module_call[@type="Dense"][@features={features}]'
        new = yax.sub(xpath, adapter, new, with_state=True)
    keys = [key for key, _ in new.extra_params]
    assert keys == [
        "Block_0/Dense_0:0",
        "Block_0/Dense_0:1",
        "Block_1/Dense_0:0",
        "Block_1/Dense_0:1",
        "head:0",
        "head:1",
    ]
    extra = {
        key: jnp.full(s.shape, 0.1 * (i + 1), s.dtype)
        for i, (key, s) in enumerate(new.extra_params)
    }
    expected = reference(variables, X, extra)
    np.testing.assert_allclose(yax.eval_mox(new, variables, X, extra), expected, rtol=1e-5)
    again = yax.loads(yax.dumps(new, format=fmt), format=fmt)
    np.testing.assert_allclose(yax.eval_mox(again, variables, X, extra), expected, rtol=1e-5)
    assert [n.name for n in yax.query('//module_call[@type="LoRA"]', again)] == [
        "Block_0/Dense_0",
        "Block_1/Dense_0",
        "head",
    ]
