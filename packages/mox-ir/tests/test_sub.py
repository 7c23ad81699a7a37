import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import MoxError, MoxTypeError, eval_mox, make_mox, query, sub
from bryo_mox.testing import MLP, Linear, LoRA


@pytest.fixture
def model():
    return MLP((4, 4, 4), key=jax.random.key(0))


@pytest.fixture
def v():
    return jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


@pytest.fixture
def mox(toy, model, v):
    return make_mox(lambda m, x: m(x))(model, v)


def reference(model, v, act):
    return model.layers[1](act(model.layers[0](v)))


def test_relu_to_gelu(mox, model, v):
    before = str(mox)
    gelu = make_mox(jax.nn.gelu)(jnp.ones((2, 4)))
    new = sub('//pjit[@name="relu"]', gelu, mox)
    assert str(mox) == before  # input untouched
    assert query('//custom_jvp_call[@name="relu"]', new) == []
    np.testing.assert_allclose(eval_mox(new, model, v), reference(model, v, jax.nn.gelu), rtol=1e-6)
    assert [n.name for n in query("//module_call", new)] == ["", "layers/0", "layers/1"]


def test_gelu_grad_after_sub_and_relu_rule_elsewhere(toy):
    mox = make_mox(lambda x: jax.nn.relu(x) + jnp.sin(x))(0.0)
    assert jax.grad(lambda x: eval_mox(mox, x))(0.0) == 1.0  # relu'(0) = 0, cos(0) = 1
    new = sub("//custom_jvp_call", make_mox(jax.nn.gelu)(0.0), mox)
    np.testing.assert_allclose(jax.grad(lambda x: eval_mox(new, x))(0.0), 1.5, rtol=1e-6)


def test_module_with_module(mox, model, v):
    other = Linear(4, 4, key=jax.random.key(7))
    new = sub('//module_call[@name="layers/1"]', make_mox(other)(v), mox)
    (swapped,) = query('//module_call[@name=""]/module_call[2]', new)
    assert swapped.name == "layers/1" and swapped.attrs == {"in_features": 4, "features": 4}
    expected = other(jax.nn.relu(model.layers[0](v)))
    np.testing.assert_allclose(eval_mox(new, model, v), expected, rtol=1e-6)


def test_every_linear_to_lora_new_params_at_root(mox, model, v):
    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    lora_mox = make_mox(lambda m, x: m(x))(lora, v)
    new = sub('//module_call[@type="Linear"]', lora_mox, mox, with_state=True)
    assert [k for k, _ in new.extra_params] == [
        "layers/0:0",
        "layers/0:1",
        "layers/1:0",
        "layers/1:1",
    ]
    assert names_types(new) == ["LoRA", "Linear", "LoRA", "Linear"]
    assert [n.name for n in query("//module_call[@type='LoRA']/module_call", new)] == [
        "layers/0/base",
        "layers/1/base",
    ]
    extra = {k: jnp.full(s.shape, 0.1, s.dtype) for k, s in new.extra_params}

    def manual(x):
        for i, layer in enumerate(model.layers):
            a, b = extra[f"layers/{i}:0"], extra[f"layers/{i}:1"]
            x = layer(x) + x @ a @ b
            x = jax.nn.relu(x) if i == 0 else x
        return x

    np.testing.assert_allclose(eval_mox(new, model, v, extra), manual(v), rtol=1e-5)
    grads = jax.grad(lambda e: eval_mox(new, model, v, e).sum())(extra)
    assert set(grads) == set(extra)
    with pytest.raises(MoxError, match="extra parameters"):
        eval_mox(new, model, v)


def names_types(mox):
    return [n.info.short_type for n in query("//module_call[@name!='']", mox)]


def test_type_mismatch_names_node_and_types(mox):
    before = str(mox)
    wrong = make_mox(jax.nn.gelu)(jnp.ones((3, 4)))
    with pytest.raises(MoxTypeError, match=r"f32\[3,4\].*custom_jvp_call 'relu'.*f32\[2,4\]"):
        sub('//custom_jvp_call[@name="relu"]', wrong, mox)
    bad_out = make_mox(lambda x: x.sum())(jnp.ones((2, 4)))
    with pytest.raises(MoxTypeError, match=r"returns \(f32\[\]\).*\(f32\[2,4\]\)"):
        sub("//custom_jvp_call", bad_out, mox)
    assert str(mox) == before


def test_foreign_node_rejected(mox, toy, v):
    other = make_mox(jax.nn.relu)(v)
    with pytest.raises(MoxError, match="not a module_call or equation of this"):
        sub(other.nodes[0], other, mox)


def test_no_match_returns_input(mox):
    assert sub('//module_call[@type="Nope"]', mox, mox) is mox


def test_sub_inside_plain_jit_region(toy, v):
    f = jax.jit(lambda x: jnp.tanh(x) * 2.0)
    mox = make_mox(lambda x: f(x) + 1.0)(v)
    new = sub("//tanh", make_mox(jnp.sin)(v), mox)
    np.testing.assert_allclose(eval_mox(new, v), jnp.sin(v) * 2.0 + 1.0, rtol=1e-6)
    assert query("//jit//sin", new)


def test_sub_keeps_traced_and_static_keyword_arguments(v):
    def noisy(x, *, key, scale):
        return jax.nn.relu(x + scale * jax.random.normal(key, x.shape))

    mox = make_mox(noisy)(v, key=jax.random.key(0), scale=0.5)
    gelu = sub('//pjit[@name="relu"]', make_mox(jax.nn.gelu)(v), mox)
    assert gelu.traced_kwargs == ("key",) and gelu.static_kwargs == (("scale", 0.5),)
    key = jax.random.key(3)
    expected = jax.nn.gelu(v + 0.5 * jax.random.normal(key, v.shape))
    np.testing.assert_allclose(eval_mox(gelu, v, key=key, scale=0.5), expected, rtol=1e-6)


def test_arguments_in_the_wrong_order_are_named(mox):
    gelu = make_mox(jax.nn.gelu)(jnp.ones((2, 4)))
    before = str(mox)
    with pytest.raises(MoxError, match=r"target first.*sub\(target, replacement, mox\)"):
        sub(mox, '//pjit[@name="relu"]', gelu)  # type: ignore[arg-type]  # the mistake under test
    assert str(mox) == before
