"""`jit_partial` in simple mode binds its given arguments once per structure: their
Variables' values are read per call, a change of structure or metadata inside them is
seen at the next call, and calls that cannot use the binding take `jit`'s path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import BatchStat, List, Object, Param, cached_partial
from bryo_transforms import jit, jit_partial

SIMPLE = [{"graph_updates": False}, {"graph": False}]


class Layer(Object):
    def __init__(self, scale: float) -> None:
        self.w = Param(jnp.full((2,), scale))

    def __call__(self, x):
        return x * self.w[...]


class Model(Object):
    def __init__(self) -> None:
        self.layers = List([Layer(2.0)])
        self.count = BatchStat(jnp.array(0))
        self.offset = jnp.zeros((2,))  # a raw array leaf

    def __call__(self, x):
        self.count[...] += 1
        for layer in self.layers:
            x = layer(x)
        return x + self.offset


def _traced(f):
    traces = []

    def counted(*args, **kwargs):
        traces.append(1)
        return f(*args, **kwargs)

    return counted, traces


@pytest.mark.parametrize("mode", SIMPLE)
def test_a_new_variable_or_layer_is_seen_at_the_next_call(mode):
    model = Model()
    f, traces = _traced(lambda m, x: m(x))
    g = jit_partial(f, model, **mode)
    x = jnp.ones((2,))
    np.testing.assert_array_equal(g(x), [2.0, 2.0])
    np.testing.assert_array_equal(g(x), [2.0, 2.0])
    assert len(traces) == 1 and int(model.count[...]) == 2
    model.layers[0].w = Param(jnp.full((2,), 3.0))  # a Variable replaced
    np.testing.assert_array_equal(g(x), [3.0, 3.0])
    assert len(traces) == 1  # the same structure: the same compilation
    model.layers.append(Layer(5.0))
    model.offset = jnp.ones((2,))
    np.testing.assert_array_equal(g(x), [16.0, 16.0])
    assert len(traces) == 2 and int(model.count[...]) == 4


@pytest.mark.parametrize("mode", SIMPLE)
def test_changed_values_go_to_the_variables_the_model_holds_now(mode):
    model = Model()
    g = jit_partial(lambda m: m.count.__setitem__(..., m.count[...] + 10), model, **mode)
    g()
    model.count = BatchStat(jnp.array(100))
    g()
    assert int(model.count[...]) == 110


@pytest.mark.parametrize("mode", SIMPLE)
def test_a_metadata_change_recompiles_with_the_new_metadata(mode):
    model = Model()
    seen = []

    def f(m):
        seen.append(m.count.get_metadata().get("tag"))
        return m.count[...]

    g = jit_partial(f, model, **mode)
    g()
    model.count.set_metadata("tag", "new")
    g()
    assert seen == [None, "new"]


def test_a_duplicate_made_after_binding_is_refused_at_the_next_call_in_tree_mode():
    model = Model()
    g = jit_partial(lambda m, x: m(x), model, graph=False)
    g(jnp.ones((2,)))
    model.layers.append(model.layers[0])
    with pytest.raises(ValueError, match="found at paths"):
        g(jnp.ones((2,)))
    assert len(model.layers) == 2 and int(model.count[...]) == 1  # unchanged by the refusal


@pytest.mark.parametrize("mode", SIMPLE)
def test_modules_among_the_call_arguments_are_read_with_the_call(mode):
    model, other = Model(), Model()

    def f(m, o, x):
        return o(m(x))

    g = jit_partial(f, model, **mode)
    np.testing.assert_array_equal(g(other, jnp.ones((2,))), [4.0, 4.0])
    assert int(model.count[...]) == 1 and int(other.count[...]) == 1


def test_a_variable_given_twice_in_graph_mode_is_one_variable_inside():
    shared = Param(jnp.array(1.0))
    a, b = Object(), Object()
    a.v, b.v = shared, shared

    def f(a, b, x):
        a.v[...] += x
        return a.v[...] + b.v[...]

    g = jit_partial(f, a, b, graph=True, graph_updates=False)
    assert float(g(jnp.array(1.0))) == 4.0
    assert float(g(jnp.array(1.0))) == 6.0 and float(shared[...]) == 3.0


@pytest.mark.parametrize("mode", SIMPLE)
def test_bound_calls_lower_and_compile(mode):
    model = Model()
    g = jit_partial(lambda m, x: m(x), model, **mode)
    compiled = g.lower(jnp.ones((2,))).compile()
    np.testing.assert_array_equal(compiled(jnp.ones((2,))), [2.0, 2.0])
    assert int(model.count[...]) == 1
    assert jax.tree.leaves(model)  # the model stays a pytree of arrays


@pytest.mark.parametrize("mode", SIMPLE)
def test_a_bound_call_reads_no_module_only_the_variables(mode, monkeypatch):
    """The per-call reading of `jit` (checks, the scan for Variables, JAX's flatten of the
    modules) is what binding saves; a call whose arguments are arrays skips it."""
    from bryo_transforms import _simple

    model = Model()
    g = jit_partial(lambda m, x: m(x), model, **mode)
    reads = []
    monkeypatch.setattr(_simple.Inputs, "variables", lambda *args: reads.append(args))
    g(jnp.ones((2,)))
    g(jnp.ones((2,)))
    assert reads == [] and int(model.count[...]) == 2


def test_cached_partial_of_a_graph_mode_jit_gives_it_one_copy_sharing_the_variables():
    """Flax's `nnx.cached_partial(nnx.jit(f), model)`: inside the jit the copy and the
    model passed alongside share their Variables; the copy comes back, the same object
    every call, and the count it advanced is the model's."""
    model = Model()

    @jit(graph=True, graph_updates=True)
    def step(copy, given, x):
        assert copy is not given and copy.count is given.count
        copy(x)
        return copy

    cached = cached_partial(step, model)
    first = cached(model, jnp.ones((2,)))
    second = cached(model, jnp.ones((2,)))
    assert first is second and first is not model
    assert first.count is model.count and int(model.count[...]) == 2
