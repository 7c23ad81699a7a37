"""`sub` inside scan, remat, cond and while regions: new parameters threaded as operands."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import ModuleCall, eval_mox, make_mox, query, sub
from bryo_mox.testing import Linear, LoRA

N_LAYERS = 3


@pytest.fixture
def layer():
    return Linear(4, 4, key=jax.random.key(0))


@pytest.fixture
def stacked():
    layers = [Linear(4, 4, key=k) for k in jax.random.split(jax.random.key(1), N_LAYERS)]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *layers)


@pytest.fixture
def x():
    return jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def lora_mox(x):
    lora = LoRA(Linear(4, 4, key=jax.random.key(5)), rank=2, key=jax.random.key(6))
    return make_mox(lambda m, v: m(v))(lora, x)


def lora_apply(lin, v, extra, key):
    return lin(v) + v @ extra[f"{key}:0"] @ extra[f"{key}:1"]


def _scan(stacked, v, apply):
    return jax.lax.scan(lambda h, lin: (apply(lin, h), None), v, stacked)[0]


def _scan_remat(stacked, v, apply):
    body = jax.checkpoint(lambda h, lin: (apply(lin, h), None))
    return jax.lax.scan(body, v, stacked)[0]


def _remat(layer, v, apply):
    return jax.checkpoint(lambda lin, h: apply(lin, h))(layer, v)


def _cond(layer, v, apply):
    return jax.lax.cond(v.sum() > 100.0, lambda h: h * 2.0, lambda h: apply(layer, h), v)


def _while(layer, v, apply):
    def body(carry):
        i, h = carry
        return i + 1, apply(layer, h)

    return jax.lax.while_loop(lambda c: c[0] < 2, body, (0, v))[1]


CASES = {
    "scan": ("stacked", _scan, "scan"),
    "scan_remat": ("stacked", _scan_remat, "scan"),
    "remat": ("layer", _remat, "remat2"),
    "cond": ("layer", _cond, "cond"),
    "while": ("layer", _while, "while"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lora_inside_region(toy, case, request, x):
    which, wrapper, primitive = CASES[case]
    model = request.getfixturevalue(which)
    mox = make_mox(lambda m, v: wrapper(m, v, lambda lin, h: jnp.tanh(lin(h))))(model, x)
    (node,) = query('//module_call[@type="Linear"]', mox)
    assert query(f"//{primitive}//module_call", mox) == [node]
    new = sub('//module_call[@type="Linear"]', lora_mox(x), mox, with_state=True)
    key = node.name or "Linear"  # a root module is labelled by its type
    assert [k for k, _ in new.extra_params] == [f"{key}:0", f"{key}:1"]
    assert [n.info.short_type for n in query("//module_call", new)] == ["LoRA", "Linear"]
    extra = {k: jnp.full(s.shape, 0.1, s.dtype) for k, s in new.extra_params}

    def reference(model, v, extra):
        return wrapper(model, v, lambda lin, h: jnp.tanh(lora_apply(lin, h, extra, key)))

    expected = reference(model, x, extra)
    np.testing.assert_allclose(eval_mox(new, model, x, extra), expected, rtol=1e-5, atol=1e-6)
    jitted = jax.jit(lambda m, v, e: eval_mox(new, m, v, e))(model, x, extra)
    np.testing.assert_allclose(jitted, expected, rtol=1e-5, atol=1e-6)
    derivative = jax.jacfwd if case == "while" else jax.grad  # while: forward mode only
    grads = derivative(lambda e: eval_mox(new, model, x, e).sum())(extra)
    want = derivative(lambda e: reference(model, x, e).sum())(extra)
    for k in extra:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-4, atol=1e-6)


def test_sub_twice_inside_scan(toy, stacked, x):
    """A second `sub` inside an already rewritten scan adds its parameters after the first."""
    mox = make_mox(lambda m, v: _scan(m, v, lambda lin, h: jnp.tanh(lin(h))))(stacked, x)
    once = sub('//module_call[@type="Linear"]', lora_mox(x), mox, with_state=True)
    scaled = make_mox(lambda s, h: jnp.tanh(h * s))(jnp.ones(()), x)
    twice = sub("//scan//tanh", scaled, once)
    assert [k for k, _ in twice.extra_params] == ["Linear:0", "Linear:1", "tanh:0"]
    extra = {k: jnp.full(s.shape, 0.1, s.dtype) for k, s in twice.extra_params}
    expected = _scan(stacked, x, lambda lin, h: jnp.tanh(lora_apply(lin, h, extra, "Linear") * 0.1))
    np.testing.assert_allclose(eval_mox(twice, stacked, x, extra), expected, rtol=1e-5)


def test_closed_over_parameters_count_as_state(toy, stacked, x):
    """A module whose body now uses new parameters takes them as state inputs, after its
    own state, so that its call arguments stay last."""

    class Wrap(Linear):
        def forward(self, v):
            return _scan(self.inner, super().forward(v), lambda lin, h: lin(h))

    outer = Wrap(4, 4, key=jax.random.key(9))
    outer.inner = stacked
    mox = make_mox(lambda m, v: m(v))(outer, x)
    new = sub('//scan//module_call[@type="Linear"]', lora_mox(x), mox, with_state=True)
    (root,) = query("/mox/module_call", new)
    assert isinstance(root, ModuleCall)
    assert root.n_state == len(jax.tree_util.tree_leaves(outer)) + 2
    assert root.invars[-1] is new.invars[len(jax.tree_util.tree_leaves(outer))]
    extra = {k: jnp.zeros(s.shape, s.dtype) for k, s in new.extra_params}
    np.testing.assert_allclose(eval_mox(new, outer, x, extra), outer(x), rtol=1e-6)
