"""`eval_shape`: abstract evaluation over graph nodes in every mode; the arguments are
never changed, and simple mode refuses aliased Variables as Flax does."""

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param, Variable
from bryo_transforms import eval_shape

MODES = [{}, {"graph_updates": False}, {"graph": False}]


class Affine(Object):
    def __init__(self, n: int) -> None:
        self.w = Param(jnp.ones((n, 3)))
        self.calls = Variable(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.value = self.calls.value + 1
        return x @ self.w.value


@pytest.mark.parametrize("modes", MODES)
def test_builds_abstract_modules_and_leaves_arguments_unchanged(modes):
    abstract = eval_shape(lambda: Affine(2), **modes)
    assert isinstance(abstract, Affine)
    assert abstract.w.value == jax.ShapeDtypeStruct((2, 3), jnp.float32)
    model = Affine(2)
    out = eval_shape(lambda m, x: m(x), model, jnp.ones((4, 2)), **modes)
    assert out == jax.ShapeDtypeStruct((4, 3), jnp.float32)
    assert int(model.calls.value) == 0


@pytest.mark.parametrize("modes", MODES[1:])
def test_simple_mode_refuses_aliased_variables(modes):
    v = Param(jnp.array(1.0))
    with pytest.raises(
        ValueError, match=r"Duplicate Param\nfound at paths:\n\n  - args\[0\]\n  - args\[1\]"
    ):
        eval_shape(lambda a, b: None, v, v, **modes)
    with pytest.raises(ValueError, match=r"- args\[0\]\n  - out"):
        eval_shape(lambda a: a, v, **modes)
    assert float(v.value) == 1.0


def test_graph_mode_allows_aliases_and_returned_variables():
    v = Param(jnp.array(1.0))
    out = eval_shape(lambda a, b: a, v, v)
    assert isinstance(out, Param) and out.value.shape == () and out.value.dtype == jnp.float32


def test_bound_methods_are_refused():
    with pytest.raises(ValueError, match="bound methods"):
        eval_shape(Affine(2).__call__, jnp.ones((1, 2)))
