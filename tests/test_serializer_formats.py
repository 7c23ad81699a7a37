"""What every MoX file format must round-trip, run for each serializer plugin."""

import jax
import jax.numpy as jnp
import pytest

import bryo_mox as yax
from bryo_mox.testing import Linear, LoRA, ToyBackend, assert_round_trip

FORMATS = ["xml", "yson"]
X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


@pytest.fixture
def toy(bryo_plugin_manager):
    bryo_plugin_manager.register(ToyBackend())
    return bryo_plugin_manager


def _stacked_scan(stacked, v):
    body = jax.checkpoint(lambda h, lin: (jnp.tanh(lin(h)), None))
    return jax.lax.scan(body, v, stacked)[0]


@pytest.mark.parametrize("format", FORMATS)
def test_lora_inside_scan_round_trip(toy, format):
    layers = [Linear(4, 4, key=k) for k in jax.random.split(jax.random.key(0), 3)]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *layers)
    mox = yax.make_mox(_stacked_scan)(stacked, X)
    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    lora_mox = yax.make_mox(lambda m, v: m(v))(lora, X)
    new = yax.sub('//module_call[@type="Linear"]', lora_mox, mox, with_state=True)
    extra = {k: jnp.full(s.shape, 0.1, s.dtype) for k, s in new.extra_params}
    back = assert_round_trip(new, format, stacked, X, extra)
    assert [k for k, _ in back.extra_params] == ["Linear:0", "Linear:1"]
    assert yax.query("//scan//remat2//module_call[@type='LoRA']/module_call", back)


@pytest.mark.parametrize("format", FORMATS)
def test_prng_keys_round_trip(bryo_plugin_manager, format):
    key = jax.random.key(3)

    def f(k, seed, v):
        data = jax.random.key_data(jax.random.key(seed))
        k2 = jax.random.fold_in(jax.random.wrap_key_data(data), 1)
        noise = jax.random.normal(key, v.shape) + jax.random.uniform(k2, v.shape)
        return v + noise + jax.random.normal(k, v.shape), jax.random.split(k, 2)

    mox = yax.make_mox(f)(key, jnp.int32(1), X)
    text = yax.dumps(mox, format=format)
    assert "key<fry>[]" in (text if isinstance(text, str) else text.decode()).replace(
        "&lt;", "<"
    ).replace("&gt;", ">")
    back = assert_round_trip(mox, format, key, jnp.int32(1), X)
    assert "key<fry>[2]" in str(back)
