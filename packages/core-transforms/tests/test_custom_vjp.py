"""`custom_vjp` over graph nodes: State cotangents and tangents in graph mode, module
tangents and `updates_g` in simple mode, changes written back, and its errors."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from bryo_filters import PathContains
from bryo_graph import BatchStat, Object, Param, State
from bryo_transforms import DiffState, custom_vjp, grad

SIMPLE = [{"graph_updates": False}, {"graph": False}]


class Sine(Object):
    """`sin(x) * y`, counting its calls in a static attribute and a BatchStat."""

    def __init__(self) -> None:
        self.x = Param(jnp.array(1.0))
        self.y = Param(jnp.array(2.0))
        self.calls = 0
        self.seen = BatchStat(jnp.array(0.0))


def sine(m: Sine) -> jax.Array:
    m.calls += 1
    return jnp.sin(m.x.value) * m.y.value


def sine_fwd(m: Sine) -> tuple:
    return f_graph(m), (jnp.cos(m.x.value), jnp.sin(m.x.value), m.y.value)


def sine_bwd(residual: tuple, g: tuple) -> tuple:
    (m_g,), out_g = g
    cos_x, sin_x, y = residual
    assert isinstance(m_g, State) and set(m_g.flat_state()) == {("x",), ("y",), ("seen",)}
    # a made-up rule (twice the true gradient of x) shows the rule is the one used
    return (State({"x": 2.0 * cos_x * out_g * y, "y": sin_x * out_g}),)


f_graph = custom_vjp(sine)
f_graph.defvjp(sine_fwd, sine_bwd)


def test_graph_mode_uses_the_rule_and_writes_attribute_changes_back():
    m = Sine()
    grads = grad(f_graph)(m)
    assert float(grads["x"].value) == pytest.approx(2.0 * jnp.cos(1.0) * 2.0)
    assert float(grads["y"].value) == pytest.approx(jnp.sin(1.0))
    assert m.calls == 1  # the forward rule's call of `f` reached the caller's module
    assert float(f_graph(m)) == pytest.approx(jnp.sin(1.0) * 2.0) and m.calls == 2


def test_diff_state_differentiates_only_the_filtered_state():
    @custom_vjp(nondiff_argnums=(DiffState(0, PathContains("x")),))
    def f(m):
        return jnp.sin(m.x.value) * m.y.value

    def fwd(m):
        return f(m), (jnp.cos(m.x.value), m.y.value)

    def bwd(residual, g):
        (m_g,), out_g = g
        assert set(m_g.flat_state()) == {("x",), ("y",), ("seen",)}
        cos_x, y = residual
        return (State({"x": cos_x * out_g * y}),)  # y has no tangent: not differentiated

    f.defvjp(fwd, bwd)
    grads = grad(f, argnums=DiffState(0, PathContains("x")))(Sine())
    assert set(grads.flat_state()) == {("x",)}
    assert float(grads["x"].value) == pytest.approx(jnp.cos(1.0) * 2.0)


def test_int_nondiff_argnums_come_first_in_bwd_and_arrays_get_array_tangents():
    @custom_vjp(nondiff_argnums=(0,))
    def scale(k, x):
        return k * x

    def fwd(k, x):
        return scale(k, x), None

    def bwd(k, residual, g):
        (x_g,), out_g = g
        assert k == 3 and x_g is None  # an array argument has no state cotangent
        return (10.0 * out_g,)

    scale.defvjp(fwd, bwd)
    assert float(jax.grad(lambda x: scale(3, x))(1.0)) == 10.0


@pytest.mark.parametrize("modes", SIMPLE)
def test_simple_mode_gives_module_tangents_and_updates_g(modes):
    @custom_vjp(**modes)
    def f(m):
        m.seen.value = m.seen.value + 1
        return jnp.sin(m.x.value) * m.y.value

    def fwd(m):
        return f(m), (jnp.cos(m.x.value), jnp.sin(m.x.value), m)

    def bwd(residual, out_g, updates_g):
        cos_x, sin_x, m = residual
        (m_updates,) = updates_g
        assert m_updates.x is None and isinstance(m_updates.seen, BatchStat)
        m_g = jax.tree.map(lambda v: v, m)
        m_g.x.value = cos_x * out_g * m.y.value
        m_g.y.value = sin_x * out_g
        return (m_g,)

    f.defvjp(fwd, bwd)
    m = Sine()
    grads = grad(f, **modes)(m)
    assert isinstance(grads, Sine)
    assert float(grads.x.value) == pytest.approx(jnp.cos(1.0) * 2.0)
    assert int(m.seen.value) == 1  # the changed value came back


def counting(modes: dict, bwd: Callable | None = None) -> Any:
    """`f(x, counter) = 2 * x`, counting its calls in the non-differentiated Variable
    `counter`; its backward pass is `bwd`, by default `3 * g`."""

    @custom_vjp(nondiff_argnums=(1,), **modes)
    def f(x, counter):
        counter.value = counter.value + 1
        return 2.0 * x

    f.defvjp(lambda x, counter: (f(x, counter), None), bwd or (lambda counter, res, g: (3.0 * g,)))
    return f


@pytest.mark.parametrize("modes", SIMPLE)
def test_simple_mode_int_nondiff_variable_changes_come_back(modes):
    f = counting(modes)
    counter = BatchStat(jnp.array(0))
    assert float(f(jnp.array(1.0), counter)) == 2.0 and int(counter.value) == 1
    assert float(jax.grad(lambda x: f(x, counter))(1.0)) == 3.0


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="cannot contain `DiffState`"):
        custom_vjp(sine, nondiff_argnums=(DiffState(0, ...),), graph=False)
    with pytest.raises(ValueError, match="names argument 0 twice"):
        custom_vjp(sine, nondiff_argnums=(0, DiffState(0, ...)))
    with pytest.raises(TypeError, match="ints and `DiffState"):
        custom_vjp(sine, nondiff_argnums=("m",))
    with pytest.raises(TypeError, match=r"call `sine.defvjp\(fwd, bwd\)`"):
        custom_vjp(sine)(Sine())
    with pytest.raises(ValueError, match="bound methods"):
        custom_vjp(Sine().__init__)

    module_nondiff = custom_vjp(lambda m, x: x, nondiff_argnums=(0,))
    module_nondiff.defvjp(lambda m, x: (x, None), lambda m, r, g: (g[1],))
    with pytest.raises(TypeError, match=r"DiffState\(0, filter\)"):
        module_nondiff(Sine(), 1.0)

    two_tangents = custom_vjp(lambda x: x)
    two_tangents.defvjp(lambda x: (x, None), lambda r, g: (g[1], g[1]))
    with pytest.raises(TypeError, match="returned 2 tangents for 1 differentiable"):
        jax.grad(two_tangents)(1.0)

    aliased = custom_vjp(lambda a, b: a.value + b.value, nondiff_argnums=(1,), graph_updates=False)
    aliased.defvjp(lambda a, b: (a.value + b.value, None), lambda b, r, g: (g,))
    shared = Param(jnp.array(1.0))
    with pytest.raises(ValueError, match="Duplicate Param"):
        aliased(shared, shared)
    assert float(shared.value) == 1.0


def test_simple_grad_refuses_a_variable_both_differentiated_and_not():
    shared = Param(jnp.array(1.0))
    with pytest.raises(ValueError, match="Inconsistent aliasing"):
        grad(lambda a, b: a.value + b.value, graph_updates=False)(shared, shared)


@pytest.mark.parametrize("modes", SIMPLE)
def test_simple_mode_bwd_gets_copies_of_the_non_differentiated_arguments(modes):
    def bwd(counter, res, g):
        assert int(counter.value) == 1  # the value after the call
        counter.value = jnp.array(100)  # a copy: the caller's Variable keeps its value
        return (3.0 * g,)

    f = counting(modes, bwd)
    counter = BatchStat(jnp.array(0))
    assert float(jax.grad(f)(1.0, counter)) == 3.0
    assert int(counter.value) == 1
