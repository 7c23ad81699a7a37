"""Hijax Variables (`hijax=True`, JAX 0.10 or newer) through bryo's transforms: in simple
mode JAX itself carries what a call writes into one and one passed twice stays one object,
graph mode writes a plain copy's changes back, and `eval_shape` gives back hijax Variables
holding `jax.ShapeDtypeStruct`s."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import HijaxVariable, Object, Param, Variable, var_defaults, with_vars
from bryo_transforms import eval_shape, jit, jit_partial

pytestmark = pytest.mark.skipif(
    jax.__version_info__ < (0, 10), reason="hijax Variables need JAX 0.10 or newer"
)


@pytest.mark.parametrize("graph", [True, False])
def test_simple_jit_leaves_a_hijax_variables_writes_to_jax(graph):
    v = Variable(jnp.array(1.0), hijax=True)

    @jit(graph=graph, graph_updates=False)
    def bump(v):
        v[...] += 1.0
        return v[...] * 2

    np.testing.assert_allclose(bump(v), 4.0)
    np.testing.assert_allclose(bump(v), 6.0)
    np.testing.assert_allclose(v[...], 3.0)
    assert v.hijax


def test_simple_graph_jit_keeps_a_hijax_variable_passed_twice_one_object():
    v = Variable(jnp.array(1.0), hijax=True)
    seen = []

    @jit(graph=True, graph_updates=False)
    def bump(a, b):
        seen.append(a is b)
        a[...] += 1.0
        return b[...]

    np.testing.assert_allclose(bump(v, v), 2.0)
    np.testing.assert_allclose(v[...], 2.0)
    assert seen == [True]


class Affine(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones((1, 2)))
        self.plain = Variable(jnp.zeros(3), hijax=False)


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}, {"graph": False}])
def test_eval_shape_of_hijax_variables_gives_hijax_variables_of_shapes(modes):
    with var_defaults(hijax=True):
        abstract = eval_shape(Affine, **modes)
    assert isinstance(abstract.w, HijaxVariable) and isinstance(abstract.w, Param)
    assert abstract.w.get_value() == jax.ShapeDtypeStruct((1, 2), jnp.float32)
    assert abstract.w.shape == (1, 2)
    assert not abstract.plain.hijax
    assert abstract.plain.get_value() == jax.ShapeDtypeStruct((3,), jnp.float32)


class Counter(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones(2))
        self.count = Variable(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count[...] += 1
        return x @ self.w[...]


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}, {"graph": False}])
def test_jit_and_jit_partial_of_a_hijax_model(modes):
    # graph mode hands the function plain copies and writes their changes back (Flax
    # refuses a hijax model there); simple mode passes the hijax Variables to JAX whole
    model = with_vars(Counter(), hijax=True)
    seen = []

    def forward(model, x):
        seen.append(isinstance(model.w, Param))
        return model(x)

    np.testing.assert_allclose(jit(forward, **modes)(model, jnp.ones(2)), 2.0)
    bound = jit_partial(forward, model, **modes)
    bound(jnp.ones(2))
    np.testing.assert_allclose(bound(jnp.ones(2)), 2.0)
    assert model.count[...] == 3 and model.count.hijax and model.w.hijax
    assert all(seen)


def test_graph_jit_writes_a_hijax_dict_value_back():
    v = Variable({"a": jnp.array(0.0)}, hijax=True)

    @jit
    def step(v):
        v["a"] += 1.0
        v["b"] = jnp.array(2.0)

    step(v)
    step(v)  # (reading a hijax dict gives a new dict: no false concurrent update)
    np.testing.assert_allclose(v["a"], 2.0)
    np.testing.assert_allclose(v["b"], 2.0)
