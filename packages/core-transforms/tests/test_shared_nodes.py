"""Graph simple mode (`graph=True, graph_updates=False`) keeps shared graph nodes shared,
as Flax NNX 0.12's `to_tree2`/`from_tree2` do: a module (or `List`, `Dict`, Variable)
passed at several places is one object inside, and one returned at several places is one
object outside. Tree mode (`graph=False`) still refuses sharing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import Dict, List, Object, Param
from bryo_transforms import (
    eval_shape,
    grad,
    jit,
    jvp,
    make_jaxpr,
    remat,
    value_and_grad,
    vjp,
    vmap,
)

SIMPLE = {"graph": True, "graph_updates": False}


class Scale(Object):
    def __init__(self, n: int = 2) -> None:
        self.w = Param(jnp.arange(1.0, n + 1.0))

    def __call__(self, x):
        return x * self.w[...]


class NoState(Object):
    """A module without Variables: only its identity tells two places apart."""

    def __init__(self) -> None:
        self.factor = 2.0


def _same(a, b):
    assert a is b and a.w is b.w
    return a(jnp.ones(2)) + b(jnp.ones(2))


@pytest.mark.parametrize("transform", [jit, remat])
def test_a_module_passed_twice_is_one_module_inside(transform):
    model = Scale()
    np.testing.assert_array_equal(transform(_same, **SIMPLE)(model, model), [2.0, 4.0])


def test_shared_list_dict_and_variable_free_modules_stay_shared():
    items, table, bare = List([Scale()]), Dict(a=Scale()), NoState()

    def check(l1, d1, n1, l2, d2, n2):
        assert l1 is l2 and d1 is d2 and n1 is n2
        return l1[0].w[...] + d1["a"].w[...]

    out = jit(check, **SIMPLE)(items, table, bare, items, table, bare)
    np.testing.assert_array_equal(out, [2.0, 4.0])


def test_a_node_inside_two_arguments_is_shared_and_written_back_once():
    inner = Scale()
    first, second = Dict(m=inner), Dict(m=inner)

    def bump(a, b):
        assert a["m"] is b["m"]
        a["m"].w[...] += 1.0
        return b["m"].w[...]

    np.testing.assert_array_equal(jit(bump, **SIMPLE)(first, second), [2.0, 3.0])
    np.testing.assert_array_equal(inner.w[...], [2.0, 3.0])


def test_vmap_maps_a_module_passed_twice_once():
    model = Scale()
    model.w.value = jnp.ones((3, 2))

    def f(a, b, x):
        assert a is b
        a.w[...] += x
        return b.w[...].sum()

    out = vmap(f, in_axes=(0, 0, None), **SIMPLE)(model, model, jnp.array(1.0))
    np.testing.assert_array_equal(out, [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(model.w[...], jnp.full((3, 2), 2.0))


def test_shared_modules_need_one_axis():
    model = Scale()
    with pytest.raises(ValueError, match=r"Inconsistent aliasing[\s\S]*0\.w: 0\n  1\.w: None"):
        vmap(lambda a, b: a.w[...], in_axes=(0, None), **SIMPLE)(model, model)


def test_aliasing_is_part_of_the_jit_cache_key():
    traces = []

    @jit(**SIMPLE)
    def same(a, b):
        traces.append(a is b)
        return a(jnp.ones(2))

    model, other = Scale(), Scale()
    same(model, model)
    same(model, model)
    same(model, other)
    same(other, other)
    assert traces == [True, False]  # one trace per aliasing pattern


def test_a_module_returned_several_times_is_one_object():
    def make():
        model = Scale()
        return model, model, {"again": model, "w": model.w}

    for transform in (jit, remat, eval_shape):
        call = transform(make, **SIMPLE) if transform is not eval_shape else None
        a, b, rest = call() if call else eval_shape(make, **SIMPLE)
        assert a is b is rest["again"] and rest["w"] is a.w
    a, b, _ = vmap(lambda x: make(), **SIMPLE)(jnp.ones(3))
    assert a is b and a.w.shape == (3, 2)


def test_returned_modules_need_one_out_axis():
    def make(x):
        model = Scale()
        return model, model

    with pytest.raises(
        ValueError, match=r"Inconsistent aliasing[\s\S]*out\[0\]\.w: 0\n  out\[1\]\.w: 1"
    ):
        vmap(make, out_axes=(0, 1), **SIMPLE)(jnp.ones(3))


def test_the_arguments_variables_may_still_not_be_returned():
    model = Scale()
    with pytest.raises(ValueError, match=r"Duplicate Param[\s\S]*args\[0\]\.w\n  - out\[0\]\.w"):
        jit(lambda m: (m, m), **SIMPLE)(model)


def test_grad_of_a_module_passed_twice_is_one_gradient():
    model = Scale()
    loss = lambda a, b: jnp.sum(a(jnp.ones(2)) * b(jnp.ones(2)))
    g1, g2 = grad(loss, argnums=(0, 1), **SIMPLE)(model, model)
    assert g1 is g2
    np.testing.assert_array_equal(g1.w[...], [2.0, 4.0])  # d sum(w * w) / dw: both uses

    def with_aux(a, b):
        made = Scale()
        return loss(a, b), (made, made)

    (value, aux), (h1, h2) = value_and_grad(with_aux, argnums=(0, 1), has_aux=True, **SIMPLE)(
        Scale(), Scale()
    )
    assert float(value) == 5.0 and h1 is not h2 and aux[0] is aux[1]  # aux: one new module


def test_vjp_jvp_and_make_jaxpr_see_one_module():
    model = Scale()

    def f(a, b):
        assert a is b
        return jnp.sum(a(jnp.ones(2)) * b(jnp.ones(2)))

    out, vjp_fn = vjp(f, model, model, **SIMPLE)
    g1, g2 = vjp_fn(jnp.ones(()))
    assert float(out) == 5.0 and g1 is g2
    tangent = jax.tree.map(jnp.ones_like, model)
    _, tangent_out = jvp(f, (model, model), (tangent, tangent), **SIMPLE)
    assert float(tangent_out) == 6.0  # d/dw sum(w*w) . 1 = 2*(1+2)
    assert make_jaxpr(f, **SIMPLE)(model, model) is not None


def test_tree_mode_still_refuses_a_module_passed_twice():
    model = Scale()
    with pytest.raises(ValueError, match=r"Duplicate Param[\s\S]*\[0\]\[1\]\.w"):
        jit(_same, graph=False)(model, model)
    with pytest.raises(ValueError, match="Duplicate Param"):
        jit(lambda: (lambda m: (m, m))(Scale()), graph=False)()
