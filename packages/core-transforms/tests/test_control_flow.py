"""`cond`, `switch`, `while_loop`, `fori_loop` and `checkify` over graph nodes: values
changed inside reach the caller's Variables, structure changes are errors naming the
transform, results hold the caller's own objects."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify as checkify_lib

from bryo_graph import BatchStat, List, Object, Param, Variable
from bryo_transforms import (
    TransformError,
    checkify,
    cond,
    fori_loop,
    jit,
    switch,
    vmap,
    while_loop,
)


class Scale(Object):
    def __init__(self, factor=2.0):
        self.w = Param(jnp.full((3,), factor))
        self.calls = BatchStat(jnp.array(0))

    def __call__(self, x):
        self.calls[...] += 1
        return x * self.w


def test_cond_runs_the_chosen_branch_and_writes_its_changes():
    x = Variable(jnp.array(8))

    def collatz(x):
        cond(x % 2 == 0, lambda v: v.set_value(v // 2), lambda v: v.set_value(3 * v + 1), x)

    seen = []
    for _ in range(4):
        collatz(x)
        seen.append(int(x[...]))
    assert seen == [4, 2, 1, 4]


def test_cond_branches_may_change_different_variables_and_return_arrays():
    a, b = Variable(jnp.array(0)), Variable(jnp.array(0))

    def add_a(a, b):
        a[...] += 1
        return a[...] * 10

    def add_b(a, b):
        b[...] += 10
        return b[...] * 10

    assert int(cond(True, add_a, add_b, a, b)) == 10
    assert int(cond(False, add_a, add_b, a, b)) == 100
    assert (int(a[...]), int(b[...])) == (1, 10)


def test_cond_keeps_shared_variables_shared_and_returns_the_callers_modules():
    model = Object()
    model.v = Variable(jnp.array(0))
    model.same = model.v
    out = cond(True, lambda m: (m.v.set_value(m.v + 1), m)[1], lambda m: m, model)
    assert out is model and int(model.same[...]) == 1
    with pytest.raises(ValueError, match="cond"):
        cond(True, lambda m: None, lambda m: None, model, graph=False)


def test_cond_inside_jit_and_vmap():
    model = Scale()

    @jit
    def step(m, flag):
        return cond(flag, lambda m: m(jnp.ones(3)), lambda m: jnp.zeros(3), m)

    np.testing.assert_array_equal(step(model, True), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(step(model, False), [0.0, 0.0, 0.0])
    assert int(model.calls[...]) == 1

    steps = Variable(jnp.zeros(4, jnp.int32))

    @vmap(in_axes=(0, 0))
    def bump_even(s, i):
        cond(i % 2 == 0, lambda s: s.set_value(s + 1), lambda s: None, s)

    bump_even(steps, jnp.arange(4))
    np.testing.assert_array_equal(steps[...], [1, 0, 1, 0])


def test_cond_refuses_new_attributes_and_new_variables():
    model = Scale()

    def add_attribute(m):
        m.extra = Param(jnp.zeros(1))

    with pytest.raises(TransformError, match="keep the structure"):
        cond(True, add_attribute, lambda m: None, model)
    assert not hasattr(model, "extra")

    def replace(m):
        m.w = Param(jnp.zeros(3))

    with pytest.raises(TransformError, match="new Variable"):
        cond(True, replace, lambda m: None, model)
    with pytest.raises(TransformError, match="not one of its arguments"):
        cond(True, lambda m: Scale(), lambda m: Scale(), model)


def test_switch_chooses_by_index():
    x = Variable(jnp.array(0))
    branches = [lambda v, d=d: v.set_value(v + d) for d in (1, 10, 100)]
    for index in range(3):
        switch(index, branches, x)
    assert int(x[...]) == 111
    with pytest.raises(ValueError, match="at least one branch"):
        switch(0, [], x)


def test_while_loop_carries_modules_and_returns_the_callers_objects():
    model = Scale()

    def body(carry):
        m, y, c = carry
        return m, m(y), c - 1.0

    out_model, y, c = while_loop(lambda c: c[2] > 0, body, (model, jnp.ones(3), 3.0))
    assert out_model is model and float(c) == 0.0
    np.testing.assert_array_equal(y, [8.0, 8.0, 8.0])
    assert int(model.calls[...]) == 3


def test_fori_loop_writes_final_values_and_keeps_sharing():
    shared = Param(jnp.zeros(2))
    holder = Object()
    holder.items = List([shared, shared])

    def body(i, h):
        h.items[0][...] += i
        return h

    out = fori_loop(0, 4, body, holder)
    assert out is holder and holder.items[1] is shared
    np.testing.assert_array_equal(shared[...], [6.0, 6.0])
    accum = fori_loop(0, 3, lambda i, v: (v.set_value(v + 1), v)[1], Variable(jnp.zeros(2)))
    np.testing.assert_array_equal(accum[...], [3.0, 3.0])


@pytest.mark.parametrize("loop", ["while", "fori"])
def test_loops_refuse_a_changed_carry(loop):
    model = Scale()

    def swap(carry):
        m, x = carry
        m.w = Param(jnp.zeros(3))
        return m, x

    def new_layout(carry):
        return carry[0], carry[1], 1

    for body, match in [(swap, "new Variable"), (new_layout, "layout")]:
        with pytest.raises(TransformError, match=match):
            if loop == "while":
                while_loop(lambda c: c[1][0] < 2, body, (model, jnp.zeros(1)))
            else:
                fori_loop(0, 2, lambda i, c, body=body: body(c), (model, jnp.zeros(1)))
    np.testing.assert_array_equal(model.w[...], [2.0, 2.0, 2.0])  # unchanged


def test_checkify_reports_errors_and_writes_updates():
    model = Scale()

    def f(m, x):
        checkify_lib.check(jnp.all(x > 0), "x must be positive, got {x}", x=x)
        return m(x)

    checked = checkify(f)
    err, y = checked(model, jnp.ones(3))
    assert err.get() is None and int(model.calls[...]) == 1
    np.testing.assert_array_equal(y, [2.0, 2.0, 2.0])
    err, _ = checked(model, -jnp.ones(3))
    with pytest.raises(checkify_lib.JaxRuntimeError, match="x must be positive"):
        err.throw()
    err, _ = checkify(lambda m: jnp.log(m.w - 2.0), errors=checkify_lib.nan_checks)(model)
    assert err.get() is None  # log(0) is -inf, not nan
    err, _ = jax.jit(checkify(lambda x: jnp.sin(x), errors=checkify_lib.float_checks))(jnp.inf)
    assert "nan generated" in err.get()


@pytest.mark.parametrize("mode", [{}, {"graph_updates": False}])
def test_pmap_maps_over_devices_and_writes_state_back(mode):
    from bryo_transforms import pmap

    n = jax.local_device_count()
    model = Scale()
    counts = Variable(jnp.zeros(n))

    def step(c, x):
        c[...] += 1
        return jax.lax.psum(x.sum(), "d")

    f = pmap(step, axis_name="d", in_axes=(0, 0), **mode)
    out = f(counts, jnp.ones((n, 3)))
    np.testing.assert_array_equal(out, np.full(n, 3.0 * n))
    np.testing.assert_array_equal(counts[...], np.ones(n))
    if not mode:
        y = pmap(lambda m, x: m(x), in_axes=(None, 0))(model, jnp.ones((n, 3)))
        assert y.shape == (n, 3) and int(model.calls[...]) == 1


def test_transforms_refuse_methods_bound_to_graph_nodes():
    from bryo_transforms import grad, pmap, remat, scan, value_and_grad

    model = Scale()
    for transform in (jit, vmap, grad, value_and_grad, remat, pmap, checkify, scan):
        with pytest.raises(ValueError, match="does not take bound methods of graph nodes"):
            transform(model.__call__)
    assert jit(Scale.__call__)(model, jnp.ones(3)).shape == (3,)  # the unbound method is fine
