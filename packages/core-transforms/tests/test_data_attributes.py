"""Graph-mode transforms with updates and attributes holding Variables in containers
marked `data(...)`: the caller's module keeps its own Variables there, with the values set
inside (the copy made inside the trace keeps the marks, see core-graph's
`test_data_statuses`), and marks made inside reach the caller."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import Intermediate, Object, Param, Variable, data, graphdef, merge, split
from bryo_transforms import Carry, DiffState, cond, grad, jit, remat, scan, vmap


class Sub(Object):
    def __init__(self):
        self.v = Param(jnp.zeros(2))


class Model(Object):
    def __init__(self, holder):
        self.w = Param(jnp.ones(2))
        self.c = data(holder())


HOLDERS = {
    "tuple": lambda: (Intermediate(jnp.zeros(2)),),
    "nested": lambda: ((Intermediate(jnp.zeros(2)),),),
    "list": lambda: [Intermediate(jnp.zeros(2))],
    "dict": lambda: {"a": Intermediate(jnp.zeros(2))},
    "modules": lambda: (Sub(),),
}


def _first_variable(value):
    while not isinstance(value, Variable):
        value = (
            value.v if isinstance(value, Object) else value["a" if isinstance(value, dict) else 0]
        )
    return value


def _set_cache(model, *_):
    _first_variable(model.c)[...] = model.w[...] + 1
    return model.w[...].sum()


def _scan(model):
    def body(model, x):
        _set_cache(model)
        return model, x

    scan(body, in_axes=(Carry, 0), out_axes=(Carry, 0))(model, jnp.ones(2))


TRANSFORMS = {
    "jit": lambda model: jit(_set_cache)(model),
    "grad": lambda model: grad(_set_cache, argnums=DiffState(0, Param))(model),
    "vmap": lambda model: vmap(_set_cache, in_axes=(None, 0), out_axes=0)(model, jnp.ones(2)),
    "remat": lambda model: remat(_set_cache)(model),
    "cond": lambda model: cond(True, _set_cache, _set_cache, model),
    "scan": _scan,
}


@pytest.mark.parametrize("holder", HOLDERS)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_the_callers_variables_in_data_containers_get_the_values_set_inside(transform, holder):
    model = Model(HOLDERS[holder])
    variable = _first_variable(model.c)
    TRANSFORMS[transform](model)
    assert _first_variable(model.c) is variable
    assert not isinstance(variable[...], jax.core.Tracer)
    np.testing.assert_array_equal(variable[...], np.full(2, 2.0))


def test_jit_that_leaves_a_data_tuple_alone_keeps_it():
    model = Model(HOLDERS["tuple"])
    before = model.c
    jit(lambda model: None)(model)
    assert model.c[0] is before[0]
    np.testing.assert_array_equal(model.c[0][...], np.zeros(2))


@pytest.mark.parametrize("transform", ["jit", "remat"])
def test_data_marks_made_inside_reach_the_callers_module(transform):
    model = Model(HOLDERS["tuple"])
    model.names = ["a"]  # static

    def mark(model):
        model.d = data((Intermediate(model.w[...] * 3),))
        model.names = data([Intermediate(model.w[...])])

    (jit if transform == "jit" else remat)(mark)(model)
    np.testing.assert_array_equal(model.d[0][...], np.full(2, 3.0))
    np.testing.assert_array_equal(model.names[0][...], np.ones(2))
    assert graphdef(model) == graphdef(merge(*split(model)))
    total = jit(lambda model: model.d[0][...] + model.names[0][...])(model)
    np.testing.assert_array_equal(total, np.full(2, 4.0))
