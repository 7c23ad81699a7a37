"""The transforms' `graph=` / `graph_updates=` keywords (Flax NNX 0.12): simple mode is
JAX's own transform over the arguments as pytrees, with changed Variable values written
back and no structural updates; tree mode also refuses shared Variables."""

import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import BatchStat, Object, Param, State, set_graph_updates
from bryo_transforms import grad, jit, remat, scan, value_and_grad, vmap


class Counter(Object):
    def __init__(self):
        self.w = Param(jnp.ones(2))
        self.count = BatchStat(jnp.array(0.0))

    def __call__(self, x):
        self.count.value = self.count.value + 1
        return x @ self.w


@pytest.mark.parametrize("keywords", [{"graph": False}, {"graph_updates": False}])
def test_jit_writes_values_back_but_not_structure(keywords):
    model = Counter()

    def step(m, x):
        m.extra = Param(jnp.zeros(1))  # a structural change: dropped in simple mode
        return m(x)

    y = jit(step, **keywords)(model, jnp.ones(2))
    assert float(y) == 2.0 and float(model.count.value) == 1.0
    assert not hasattr(model, "extra")
    with pytest.raises(ValueError, match="does not support Variable aliasing"):
        jit(lambda m: m, **keywords)(model)  # its Variables would be two objects' at once


@pytest.mark.parametrize("keywords", [{"graph": False}, {"graph_updates": False}])
def test_simple_jit_traces_once_for_calls_with_the_same_structure(keywords):
    # Flax compiles a step once: a later call with the same modules (values written in
    # between, by the call itself) must not trace the function again (each trace is a
    # whole recompilation of a real model's step)
    traces = 0

    def swap(m):
        nonlocal traces
        traces += 1
        m.w.value, m.count.value = m.w.value[::-1], m.count.value + 1

    model = Counter()
    model.w.value = jnp.array([1.0, 2.0])
    f = jit(swap, **keywords)
    for call in range(1, 6):
        f(model)
        np.testing.assert_array_equal(model.w.value, [1.0, 2.0][:: (-1) ** call])
        assert float(model.count.value) == call
    assert traces == 1


def test_simple_jit_takes_jax_jit_options():
    model = Counter()
    f = jit(lambda m, x: m(x), graph_updates=False, donate_argnums=(), static_argnames=())
    assert float(f(model, jnp.ones(2))) == 2.0
    with pytest.raises(TypeError, match="Pass `graph_updates=False`"):
        jit(lambda m: m, abstracted_axes=())


def test_simple_grad_returns_module_shaped_gradients():
    model = Counter()
    grads = grad(lambda m, x: m(x), graph=False)(model, jnp.arange(2.0))
    assert type(grads) is Counter and type(grads.w) is Param
    np.testing.assert_array_equal(grads.w.value, [0.0, 1.0])
    assert float(model.count.value) == 1.0  # the update inside is written back
    (loss, aux), grads = value_and_grad(
        lambda m: (m(jnp.ones(2)), 7), has_aux=True, graph_updates=False
    )(model)
    assert float(loss) == 2.0 and aux == 7 and type(grads) is Counter
    graph_grads = grad(lambda m, x: m(x))(Counter(), jnp.ones(2))
    assert isinstance(graph_grads, State)  # graph mode (the default) returns a State


def test_simple_vmap_maps_variables_by_their_in_axes():
    def accumulate(m, x):
        m.count.value = m.count.value + x.sum()
        return x * 2

    with pytest.raises(ValueError, match="batched"):  # a broadcast count cannot vary by row
        vmap(accumulate, in_axes=(None, 0), graph=False)(Counter(), jnp.ones((3, 2)))
    stacked = Counter()
    stacked.w.value, stacked.count.value = jnp.ones((3, 2)), jnp.zeros(3)
    out = vmap(lambda m, x: m(x), in_axes=0, graph=False)(stacked, jnp.ones((3, 2)))
    assert out.shape == (3,)
    np.testing.assert_array_equal(stacked.count.value, [1.0, 1.0, 1.0])


def test_simple_remat():
    model = Counter()
    value = remat(lambda m, x: m(x), graph=False)(model, jnp.ones(2))
    assert float(value) == 2.0 and float(model.count.value) == 1.0


def test_tree_mode_refuses_shared_variables_naming_them():
    model = Counter()
    other = Counter()
    other.w = model.w
    with pytest.raises(
        ValueError,
        match=r"found at paths:\n\n  - \[0\]\[0\]\.w\n  - \[0\]\[1\]\.w(.|\n)*graph_updates=True",
    ):
        jit(lambda a, b: a(jnp.ones(2)), graph=False)(model, other)
    with pytest.raises(ValueError, match="Duplicate Param"):
        scan(lambda c, m: (c, m.w[...]), in_axes=(0, None), out_axes=(0, 0), graph=False)(
            jnp.zeros(1), (model, other)
        )


def test_set_graph_updates_changes_the_default():
    model = Counter()
    with set_graph_updates(False):
        grads = grad(lambda m: m(jnp.ones(2)))(model)
    assert type(grads) is Counter


class Holder(Object):
    def __init__(self, v):
        self.v = v


def _shared_pair():
    v = Param(jnp.array(1.0))
    return v, Holder(v), Holder(v)


def _add_through_first(a, b, x):
    assert a.v is b.v  # one Variable inside, as outside
    a.v[...] += x
    return a.v[...] + b.v[...]


def test_simple_graph_mode_keeps_shared_variables_shared():
    v, a, b = _shared_pair()
    f = jit(_add_through_first, graph=True, graph_updates=False)
    assert float(f(a, b, jnp.array(1.0))) == 4.0 and float(v[...]) == 2.0
    same = jit(lambda a, b: jnp.asarray(a.v is b.v), graph=True, graph_updates=False)
    assert bool(same(a, b)) and not bool(same(a, Holder(Param(jnp.array(5.0)))))  # retraced
    v, a, b = _shared_pair()
    value = remat(_add_through_first, graph=True, graph_updates=False)(a, b, jnp.array(1.0))
    assert float(value) == 4.0 and float(v[...]) == 2.0
    _, a, b = _shared_pair()
    read = vmap(
        lambda a, b, x: float(a.v is b.v) + x, in_axes=(None, None, 0), graph_updates=False
    )(a, b, jnp.zeros(2))
    np.testing.assert_array_equal(read, [1.0, 1.0])


def test_simple_graph_mode_gradient_of_a_shared_variable_is_shared():
    _, a, b = _shared_pair()

    def loss(b, a):
        assert a.v is b.v
        return 3 * a.v[...] + 2 * b.v[...]

    for argnums in ((0, 1), (1, 0)):
        first, second = grad(loss, argnums=argnums, graph_updates=False)(b, a)
        assert first.v is second.v and float(first.v[...]) == 5.0  # both uses
    with pytest.raises(ValueError, match="Inconsistent aliasing"):
        grad(loss, argnums=0, graph_updates=False)(b, a)  # differentiated and not
    with pytest.raises(ValueError, match="Duplicate Param"):
        grad(loss, graph=False)(b, a)  # tree mode still refuses sharing


@pytest.mark.parametrize("graph", [True, False])
def test_simple_grad_sees_copies_of_the_arguments_it_does_not_differentiate(graph):
    model = Counter()  # jax.grad passes argument 1 through as it is: bryo copies it

    def loss(scale, m):
        return scale * m(jnp.ones(2))

    grads = grad(loss, graph=graph, graph_updates=False)(jnp.array(3.0), model)
    assert float(grads) == 2.0
    assert float(model.count.value) == 1.0  # written back once, after the call


SIMPLE = [{"graph": False}, {"graph": True, "graph_updates": False}]


def _counting_scans(monkeypatch):
    from bryo_transforms import _simple

    scans = []
    real = _simple.Inputs._scan
    monkeypatch.setattr(_simple.Inputs, "_scan", lambda self, *a: scans.append(1) or real(self, *a))
    return scans


@pytest.mark.parametrize("mode", SIMPLE)
def test_a_call_with_the_same_modules_is_not_scanned_again(mode, monkeypatch):
    """The tree-mode check and the scan for Variables run once per structure: calls with
    the same module (and plain values besides) reuse them; another module, a change of
    structure or an argument that is not a module or a plain value scans again."""
    scans = _counting_scans(monkeypatch)
    model, other = Counter(), Counter()
    f = jit(lambda m, x, scale=1.0: m(x) * scale, **mode)
    for _ in range(3):
        f(model, jnp.ones(2), scale=2.0)
    assert len(scans) == 1 and float(model.count.value) == 3.0
    f(other, jnp.ones(2))
    f(model, jnp.ones(2))
    assert len(scans) == 3 and float(other.count.value) == 1.0
    model.count = BatchStat(jnp.array(10.0))  # a new Variable: seen, written back
    f(model, jnp.ones(2))
    assert len(scans) == 4 and float(model.count.value) == 11.0
    f(model, jnp.ones(2))
    assert len(scans) == 4
    g = jit(lambda ms, x: ms[0](x), **mode)
    g([model], jnp.ones(2))
    g([model], jnp.ones(2))  # a plain list of modules is read with each call
    assert len(scans) == 6 and float(model.count.value) == 14.0


def test_a_duplicate_made_after_a_call_is_refused_at_the_next_call_in_tree_mode():
    model = Counter()
    f = jit(lambda m, x: m(x), graph=False)
    f(model, jnp.ones(2))
    model.twin = model.count
    with pytest.raises(ValueError, match="found at paths"):
        f(model, jnp.ones(2))
    assert float(model.count.value) == 1.0  # unchanged by the refusal
    del model.twin
    f(model, jnp.ones(2))
    assert float(model.count.value) == 2.0


def test_the_kept_scan_does_not_keep_a_dropped_model_alive():
    import gc
    import weakref

    f = jit(lambda m, x: m(x), graph=False)
    model = Counter()
    f(model, jnp.ones(2))
    count = weakref.ref(model.count)
    del model
    gc.collect()
    assert count() is None
