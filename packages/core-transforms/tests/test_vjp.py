"""`vjp`/`jvp` over graph nodes (simple mode): cotangents and tangents shaped like the
arguments, changed Variable values written back, graph updates refused."""

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import BatchStat, Object, Param
from bryo_transforms import jvp, vjp

MODES = [{"graph_updates": False}, {"graph": False}]


class Scale(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.array([1.0, 2.0]))
        self.count = BatchStat(jnp.array(0))


def weighted_sum(m: Scale, x: jax.Array) -> jax.Array:
    m.count.value = m.count.value + 1
    return jnp.sum(m.w.value * x)


@pytest.mark.parametrize("modes", MODES)
def test_vjp_gives_cotangents_shaped_like_the_primals(modes):
    model, x = Scale(), jnp.array([3.0, 4.0])
    out, vjp_fn = vjp(weighted_sum, model, x, **modes)
    assert float(out) == 11.0 and int(model.count.value) == 1
    model_ct, x_ct = vjp_fn(jnp.ones(()))
    assert isinstance(model_ct, Scale) and model_ct.w.value.tolist() == [3.0, 4.0]
    assert x_ct.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("modes", MODES)
def test_vjp_with_aux_and_as_a_decorator(modes):
    @vjp(has_aux=True, **modes)
    def f(w, x):
        return jnp.sum(w * x), {"x": x}

    out, vjp_fn, aux = f(jnp.ones(2), jnp.arange(2.0))
    assert float(out) == 1.0 and aux["x"].tolist() == [0.0, 1.0]
    assert vjp_fn(jnp.ones(()))[0].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("modes", MODES)
def test_jvp_pushes_tangents_and_writes_changed_values_back(modes):
    model, x = Scale(), jnp.array([3.0, 4.0])
    tangent = Scale()
    tangent.w.value = jnp.ones(2)
    tangent.count.value = jnp.zeros((), jax.dtypes.float0)
    out, out_tangent = jvp(weighted_sum, (model, x), (tangent, jnp.zeros(2)), **modes)
    assert float(out) == 11.0 and float(out_tangent) == 7.0
    assert int(model.count.value) == 1

    @jvp(has_aux=True, **modes)
    def g(x):
        return jnp.sin(x), "aux"

    assert g((0.0,), (2.0,)) == (0.0, 2.0, "aux")


def test_graph_updates_are_refused_with_the_way_out():
    with pytest.raises(ValueError, match="pass `graph_updates=False`"):
        vjp(weighted_sum, Scale(), jnp.ones(2))
    with pytest.raises(ValueError, match="`jvp` lifts Variable values only"):
        jvp(jnp.sin, (0.0,), (1.0,))
    with pytest.raises(TypeError, match="needs `tangents`"):
        jvp(jnp.sin, (0.0,), graph_updates=False)


def test_tree_mode_refuses_shared_variables():
    model = Scale()
    with pytest.raises(ValueError, match="Duplicate Param"):
        vjp(lambda a, b: jnp.sum(a.value + b.value), model.w, model.w, graph=False)
