"""Seed 001 (YAX's README) as written, on Flax Linen: only `import yax` changed.

Each cell is the README's code; the names a cell uses without defining them (`jax`, `jnp`,
`inputs`, the `lora` module) are defined here, and two typos of the README are fixed
where noted (`jnp.empty(1, 10)` cannot run; `apply` reads an undefined `input_batch`). The
checks are the README's claims: `print(mox)` shows module calls, `eval_mox` composes with
`jax.jit`, the query finds the `Dense` with 10 features, ReLU becomes GELU, every `Dense`
becomes a LoRA adapter, and MoX is written to XML and YSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo import mox as yax  # was: import yax


class ResBlock(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs + nn.Dense(10)(xs)


class Seed(NamedTuple):
    mod: nn.Module
    batch: jax.Array
    params: dict
    mox: yax.Mox


@pytest.fixture(scope="module")
def seed() -> Seed:
    mod = ResBlock()
    batch = jnp.empty((1, 10))  # README: jnp.empty(1, 10)
    params = jax.jit(mod.init)(jax.random.PRNGKey(42), batch)
    mox = yax.make_mox(mod.apply)(params, batch)
    return Seed(mod, batch, params, mox)


def test_tracing(seed, capsys):
    print(seed.mox)
    text = capsys.readouterr().out
    assert text.startswith("{ lambda ; a:f32[10] b:f32[10,10] c:f32[1,10]. let")
    assert "module_call[type=ResBlock name=]" in text
    assert "module_call[type=Dense name=Dense_0" in text and "features=10" in text
    assert "dot_general[" in text


def test_evaluation(seed):
    mod, batch, params, mox = seed.mod, seed.batch, seed.params, seed.mox

    def apply(params, batch):
        return yax.eval_mox(mox, params, batch)  # README: input_batch

    _ = apply(params, batch)  # Greedy evaluation.
    _ = jax.jit(apply)(params, batch)  # JIT-compiled execution.
    ones = jnp.ones((1, 10))
    np.testing.assert_allclose(jax.jit(apply)(params, ones), mod.apply(params, ones), rtol=1e-6)


def test_querying(seed):
    modules: Sequence[yax.Mox] = yax.query("//module_call[@features=10]", seed.mox)
    assert [(m.info.short_type, m.name) for m in modules] == [("Dense", "Dense_0")]


class ReluBlock(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs + nn.relu(nn.Dense(10)(xs))


class LoRA(nn.Module):
    """A LoRA adapter around a Dense. Its parameters sort before the wrapped Dense's
    (`A`, `B` < `base`), so the adapter's last inputs are the Dense's bias, kernel and
    input: `sub(..., with_state=True)` hands it the replaced Dense's own weights."""

    features: int
    rank: int = 2

    @nn.compact
    def __call__(self, xs):
        a = self.param("A", nn.initializers.normal(), (xs.shape[-1], self.rank))
        b = self.param("B", nn.initializers.zeros, (self.rank, self.features))
        return nn.Dense(self.features, name="base")(xs) + xs @ a @ b


def test_modification():
    mod = ReluBlock()
    inputs = jnp.linspace(-1.0, 1.0, 10).reshape(1, 10)
    params = jax.jit(mod.init)(jax.random.PRNGKey(42), inputs)
    mox = yax.make_mox(mod.apply)(params, inputs)
    dense = params["params"]["Dense_0"]
    hidden = inputs @ dense["kernel"] + dense["bias"][None]

    # Replace ReLU with GELU
    gelu_mox = yax.make_mox(nn.gelu)(inputs)
    modified_mox = yax.sub('//pjit[@name="relu"]', gelu_mox, mox)
    expected = inputs + nn.gelu(hidden)
    np.testing.assert_allclose(yax.eval_mox(modified_mox, params, inputs), expected, rtol=1e-5)

    # Apply LoRA-adapters to all fully-connected layers.
    lora = LoRA(10)
    lora_params = lora.init(jax.random.PRNGKey(0), inputs)
    lora_mox = yax.make_mox(lora.apply)(lora_params, inputs)
    modified_mox = yax.sub('//module_call[@type="Dense"]', lora_mox, mox, with_state=True)
    assert [key for key, _ in modified_mox.extra_params] == ["Dense_0:0", "Dense_0:1"]
    a, b = jnp.full((10, 2), 0.1), jnp.full((2, 10), 0.2)
    actual = yax.eval_mox(modified_mox, params, inputs, {"Dense_0:0": a, "Dense_0:1": b})
    np.testing.assert_allclose(actual, inputs + nn.relu(hidden + inputs @ a @ b), rtol=1e-5)
    adapters = yax.query('//module_call[@type="LoRA"]', modified_mox)
    assert [(m.name, m.attrs["features"], m.attrs["rank"]) for m in adapters] == [
        ("Dense_0", 10, 2)
    ]


@pytest.mark.parametrize("fmt", ["xml", "yson"])
def test_serialization(seed, fmt):
    mod, params = seed.mod, seed.params
    text = yax.dumps(seed.mox, format=fmt)
    if fmt == "xml":
        assert '<module_call type="Dense" qualtype="flax.linen.linear.Dense" name="Dense_0"' in text
        assert 'features="10"' in text
    again = yax.loads(text, format=fmt)
    assert [m.name for m in yax.query("//module_call[@features=10]", again)] == ["Dense_0"]
    ones = jnp.ones((1, 10))
    np.testing.assert_allclose(
        yax.eval_mox(again, params, ones), mod.apply(params, ones), rtol=1e-6
    )
