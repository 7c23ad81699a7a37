"""The seed's README examples (YAX), with the toy backend's ResBlock for `nn.Dense`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import ModuleInfo, MoxError, eval_mox, make_mox, query, sub
from bryo_mox.testing import MLP, Linear, LoRA, ResBlock


def test_readme_flow(toy):
    mod = ResBlock(10, key=jax.random.key(42))
    batch = jnp.ones((1, 10))
    mox = make_mox(lambda m, xs: m(xs))(mod, batch)
    text = str(mox)
    assert "module_call[type=ResBlock" in text and "module_call[type=Linear" in text

    def apply(params, batch):
        return eval_mox(mox, params, batch)

    np.testing.assert_allclose(apply(mod, batch), mod(batch), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(apply)(mod, batch), mod(batch), rtol=1e-6)
    (dense,) = query("//module_call[@features=10]", mox)
    assert dense.info.short_type == "Linear"


def test_readme_modifications(toy):
    model = MLP((4, 4, 4), key=jax.random.key(0))
    inputs = jnp.ones((2, 4))
    mox = make_mox(lambda m, xs: m(xs))(model, inputs)
    gelu_mox = make_mox(jax.nn.gelu)(inputs)
    modified = sub('//pjit[@name="relu"]', gelu_mox, mox)
    expected = model.layers[1](jax.nn.gelu(model.layers[0](inputs)))
    np.testing.assert_allclose(eval_mox(modified, model, inputs), expected, rtol=1e-6)

    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    lora_mox = make_mox(lambda m, xs: m(xs))(lora, inputs)
    modified = sub('//module_call[@type="Linear"]', lora_mox, mox, with_state=True)
    zeros = {k: jnp.zeros(s.shape, s.dtype) for k, s in modified.extra_params}
    np.testing.assert_allclose(eval_mox(modified, model, inputs, zeros), model(inputs), rtol=1e-6)


def test_module_calls_inside_scan_are_found_and_rewritten(toy):
    layer = Linear(3, 3, key=jax.random.key(0))

    def f(v):
        return jax.lax.scan(lambda c, _: (layer(c), None), v, None, length=3)[0]

    v = jnp.ones((1, 3))
    mox = make_mox(f)(v)
    (inner,) = query('//scan//module_call[@type="Linear"]', mox)
    assert inner.attrs["features"] == 3
    double = make_mox(lambda x: x * 2.0)(v)
    new = sub(inner, double, mox)
    np.testing.assert_allclose(eval_mox(new, v), v * 8.0)
    np.testing.assert_allclose(eval_mox(mox, v), f(v), rtol=1e-6)


def test_reserved_module_attrs():
    with pytest.raises(MoxError, match="reserved"):
        ModuleInfo("pkg.M", "m", {"name": "x"})
