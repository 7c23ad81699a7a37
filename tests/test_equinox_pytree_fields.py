"""bryo's lifted transforms on Equinox models whose fields are any JAX pytree.

An Equinox module's lists, dicts, tuples and other pytrees (a registered class, a
`jax.tree_util.Partial`, a registered dataclass: every Haliax NamedArray is one) are
flattened through views made afresh at each flattening; the transforms must find their
arrays again by place, not by the view's identity.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_transforms as bt
from bryo_graph import Object, Param, split
from bryo_transforms import TransformError

X = jnp.linspace(-1.0, 1.0, 3)


@jax.tree_util.register_pytree_node_class
class Box:
    """A registered pytree class that is no Equinox module (the issue's repro)."""

    def __init__(self, array):
        self.array = array

    def tree_flatten(self):
        return (self.array,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Named:
    """A registered dataclass with a static field, shaped like a Haliax NamedArray."""

    array: jax.Array
    axes: tuple = dataclasses.field(metadata={"static": True}, default=("x",))


def _scale(scale, x):
    return scale * x


class Fields(eqx.Module):
    """One array behind each kind of pytree field."""

    box: Box
    listed: list
    paired: tuple
    table: dict
    partial: jax.tree_util.Partial
    named: Named
    layers: list

    def __init__(self, key):
        self.box = Box(jnp.full(3, 2.0))
        self.listed = [jnp.full(3, 3.0)]
        self.paired = (jnp.full(3, 0.5), 7)
        self.table = {"b": jnp.full(3, 1.5), "a": jnp.ones(3)}
        self.partial = jax.tree_util.Partial(_scale, jnp.full(3, 0.25))
        self.named = Named(jnp.full(3, -1.0))
        self.layers = [eqx.nn.Linear(3, 3, key=key)]

    def __call__(self, x):
        y = self.box.array * x + self.listed[0] * self.paired[0] * x
        y = y + self.table["a"] * self.table["b"] + self.partial(x) + self.named.array
        return self.layers[0](jnp.tanh(y))


MODEL = Fields(jax.random.key(0))


def loss(model, x):
    return jnp.sum(model(x) ** 2)


def assert_grads_match(grads, expected):
    """bryo's gradient State holds, path by path, what `eqx.filter_grad` returns."""
    got = grads.flat_state()
    want = split(expected)[1].flat_state()
    assert set(got) == set(want)
    for path, leaf in got.items():
        np.testing.assert_allclose(leaf.value, want[path].value, rtol=1e-6, err_msg=str(path))


def test_grad_of_the_issue_repro():
    class M(eqx.Module):
        w: Box

        def __call__(self, x):
            return self.w.array * x

    grads = bt.grad(lambda m, x: jnp.sum(m(x)))(M(Box(jnp.ones(3))), X)
    np.testing.assert_allclose(grads["w"][0].value, X)


def test_grad_and_value_and_grad_over_every_pytree_field_kind():
    expected = eqx.filter_grad(loss)(MODEL, X)
    assert_grads_match(bt.grad(loss)(MODEL, X), expected)
    value, grads = bt.value_and_grad(loss)(MODEL, X)
    np.testing.assert_allclose(value, loss(MODEL, X), rtol=1e-6)
    assert_grads_match(grads, expected)


def test_grad_of_a_model_passed_twice_and_of_a_shared_submodule():
    twice = bt.grad(lambda a, b, x: loss(a, x) + loss(b, x), argnums=(0, 1))(MODEL, MODEL, X)
    doubled = eqx.filter_grad(lambda m, x: 2 * loss(m, x))(MODEL, X)
    assert_grads_match(twice[0], doubled)  # a shared leaf's gradient sits at its first place
    assert twice[1].flat_state() == {}
    pair = {"first": [MODEL], "second": (MODEL,)}
    grads = bt.grad(lambda p, x: loss(p["first"][0], x) + loss(p["second"][0], x))(pair, X)
    assert_grads_match(grads["first"][0], doubled)


def test_other_lifted_transforms_run_on_the_model():
    expected = loss(MODEL, X)
    np.testing.assert_allclose(bt.jit(loss)(MODEL, X), expected, rtol=1e-6)
    np.testing.assert_allclose(bt.remat(loss)(MODEL, X), expected, rtol=1e-6)
    batched = bt.vmap(loss, in_axes=(None, 0))(MODEL, jnp.stack([X, X]))
    np.testing.assert_allclose(batched, jnp.stack([expected, expected]), rtol=1e-6)
    assert bt.eval_shape(loss, MODEL, X).shape == ()
    _, value = bt.checkify(loss)(MODEL, X)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(
        bt.cond(True, loss, lambda m, x: 0.0 * loss(m, x), MODEL, X), expected
    )
    np.testing.assert_allclose(
        bt.switch(1, [lambda m, x: 0.0 * loss(m, x), loss], MODEL, X), expected
    )


@pytest.mark.parametrize("loop", ["fori_loop", "while_loop"])
def test_loops_carry_the_model_unchanged_or_rebuilt(loop):
    def step(carry):
        model, count = carry
        return eqx.tree_at(lambda m: m.box.array, model, model.box.array + 1.0), count + 1

    if loop == "fori_loop":
        run = lambda f, init: bt.fori_loop(0, 3, lambda i, c: f(c), init)
        ref = lambda f, init: jax.lax.fori_loop(0, 3, lambda i, c: f(c), init)
    else:
        run = lambda f, init: bt.while_loop(lambda c: c[1] < 3, f, init)
        ref = lambda f, init: jax.lax.while_loop(lambda c: c[1] < 3, f, init)
    kept, count = run(lambda c: (c[0], c[1] + 1), (MODEL, 0))
    assert kept is MODEL and int(count) == 3
    changed, _ = run(step, (MODEL, 0))
    expected, _ = ref(step, (MODEL, 0))
    np.testing.assert_allclose(changed.box.array, expected.box.array)
    np.testing.assert_allclose(changed(X), expected(X), rtol=1e-6)
    np.testing.assert_allclose(MODEL.box.array, jnp.full(3, 2.0))  # the caller's is unchanged


def test_a_loop_changing_an_equinox_model_beside_variables_is_refused():
    class Holder(Object):
        def __init__(self):
            self.kernel = Param(jnp.ones(2))

    nnx_layer = Holder()
    eqx_layer = eqx.nn.Linear(2, 2, key=jax.random.key(1))
    before = np.asarray(nnx_layer.kernel.value)

    def step(i, carry):
        layer, model = carry
        layer.kernel.value = layer.kernel.value + 1.0
        return layer, eqx.tree_at(lambda m: m.bias, model, model.bias + 1.0)

    with pytest.raises(TransformError, match=r"immutable Linear.*also holds Variables"):
        bt.fori_loop(0, 2, step, (nnx_layer, eqx_layer))
    np.testing.assert_array_equal(nnx_layer.kernel.value, before)
