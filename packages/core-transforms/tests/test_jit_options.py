"""`jit`'s JAX options over graph nodes: donation, `in_shardings` (with `StateSharding`),
`out_shardings`, `.lower().compile()`, `jit_partial` and `prefix`, in graph and simple
mode."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from bryo_filters import PathContains
from bryo_graph import BatchStat, Dict, Object, Param, Variable
from bryo_transforms import Jitted, StateSharding, jit, jit_partial, prefix

MODES = [{}, {"graph_updates": False}, {"graph": False}]


class Model(Object):
    def __init__(self):
        self.w = Param(jnp.ones((2, 3)))
        self.count = BatchStat(jnp.array(0))

    def __call__(self, x):
        self.count[...] += 1
        return x @ self.w[...]


def _mesh_sharding(*spec):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("a",))
    return NamedSharding(mesh, PartitionSpec(*spec))


@pytest.mark.parametrize("mode", MODES)
def test_donated_models_stay_readable_and_get_their_updates(mode):
    model = Model()
    f = jit(lambda m, x: m(x), donate_argnums=0, **mode)
    for step in (1, 2):
        y = f(model, x=jnp.ones((1, 2)))
        np.testing.assert_array_equal(y, [[2.0, 2.0, 2.0]])
        assert int(model.count[...]) == step
        np.testing.assert_array_equal(model.w[...], np.ones((2, 3)))  # unchanged, readable
    g = jit(lambda x, m: m(x), donate_argnames="m", **mode)
    assert g(jnp.ones((1, 2)), model).shape == (1, 3) and int(model.count[...]) == 3


def test_in_shardings_place_the_callers_variables():
    model = Model()
    kernel = _mesh_sharding("a", None)
    sharding = StateSharding({PathContains("w"): kernel, ...: None})

    @jit(in_shardings=(sharding, None))
    def step(m, x):
        m.w[...] = m.w[...] * 2
        return m(x)

    y = step(model, jnp.ones((1, 2)))
    np.testing.assert_array_equal(y, [[4.0, 4.0, 4.0]])
    assert model.w[...].sharding == kernel and int(model.count[...]) == 1
    whole = jit(lambda m: m.w[...].sum(), in_shardings=_mesh_sharding())
    assert float(whole(model)) == 12.0 and model.count[...].sharding == _mesh_sharding()
    out = jit(lambda m: m.w[...], out_shardings=kernel)(model)
    assert out.sharding == kernel


_REPLACED_SHARDED_VARIABLE = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from bryo_filters import PathContains
from bryo_graph import Object, Param
from bryo_transforms import StateSharding, jit

mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
class Model(Object):
    def __init__(self):
        self.w = Param(jnp.ones((4, 4)))

@jit(in_shardings=(StateSharding({PathContains("w"): NamedSharding(mesh, P("a", "b"))}), None))
def transpose_layout(m, x):
    moved = jax.lax.with_sharding_constraint(m.w[...] * x, NamedSharding(mesh, P("b", "a")))
    m.w = Param(moved)  # a new Variable at the sharded path, laid out otherwise inside

model = Model()
transpose_layout(model, 2.0)
assert model.w[...].sharding.spec == P("a", "b"), model.w[...].sharding
np.testing.assert_array_equal(model.w[...], np.full((4, 4), 2.0))
"""


def test_a_variable_the_function_puts_in_place_of_a_sharded_one_gets_its_sharding():
    # 4 host devices: JAX fixes its device count at start, so this runs in a subprocess
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    run = subprocess.run(
        [sys.executable, "-c", _REPLACED_SHARDED_VARIABLE],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_sharding_prefixes_are_checked():
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        jit(lambda x: x, in_shardings=Dict(a=Param(1)))
    sharding = StateSharding({PathContains("w"): None})
    with pytest.raises(ValueError, match="cannot contain `StateSharding` objects"):
        jit(lambda x: x, in_shardings=sharding, graph=False)
    with pytest.raises(ValueError, match="2 entries for 1 positional arguments"):
        jit(lambda m: m.w[...], in_shardings=(None, None))(Model())
    with pytest.raises(ValueError, match="arrays only"):
        jit(lambda m: m, out_shardings=_mesh_sharding())(Model())


@pytest.mark.parametrize("mode", MODES)
def test_lower_compile_and_call_writes_state_back(mode):
    model = Model()
    f = jit(lambda m, x: m(x), **mode)
    assert isinstance(f, Jitted)
    compiled = f.lower(model, jnp.ones((1, 2))).compile()
    assert "dot" in compiled.as_text() and compiled.cost_analysis() is not None
    np.testing.assert_array_equal(compiled(model, jnp.ones((1, 2))), [[2.0, 2.0, 2.0]])
    compiled(model, jnp.ones((1, 2)))
    assert int(model.count[...]) == 2


@pytest.mark.parametrize("mode", MODES)
def test_jit_partial_binds_models_and_sees_their_new_values(mode):
    model = Model()
    traces = []

    def f(m, x):
        traces.append(1)
        return m(x)

    g = jit_partial(f, model, **mode)
    np.testing.assert_array_equal(g(jnp.ones((1, 2))), [[2.0, 2.0, 2.0]])
    model.w[...] = jnp.zeros((2, 3))
    np.testing.assert_array_equal(g(jnp.ones((1, 2))), [[0.0, 0.0, 0.0]])
    assert len(traces) == 1 and int(model.count[...]) == 2
    compiled = g.lower(jnp.ones((1, 2))).compile()
    compiled(jnp.ones((1, 2)))
    assert int(model.count[...]) == 3
    assert float(jit_partial(lambda x: x * 2, **mode)(3.0)) == 6.0


def test_prefix_gives_a_pytree_prefix_per_variable():
    model = Model()
    sharding = _mesh_sharding()
    shardings = prefix(model, {PathContains("w"): sharding, ...: None})
    assert type(shardings) is Model and shardings.w is sharding and shardings.count is None
    axes = prefix({"a": Param(1), "b": BatchStat(2)}, lambda path, v: 0 if "b" in path else None)
    assert axes == {"a": None, "b": 0}

    @jit(out_shardings=shardings, graph_updates=False)
    def make():
        return Model()

    assert make().w[...].sharding == sharding


def test_grad_diff_state_picks_the_state_per_argument():
    from bryo_transforms import DiffState, grad

    model, other = Model(), Model()

    def loss(m, o):
        return (m(jnp.ones((1, 2))) + o.w[...].sum()).sum()

    g_model = grad(loss, argnums=DiffState(0, BatchStat), allow_int=True)(model, other)
    assert set(dict(g_model.flat_state())) == {("count",)}
    g_model, g_other = grad(loss, argnums=(DiffState(0, Param), 1))(model, other)
    assert set(dict(g_model.flat_state())) == {("w",)}
    np.testing.assert_array_equal(g_other["w"].get_value(), np.full((2, 3), 3.0))
    with pytest.raises(ValueError, match="cannot contain `DiffState` objects"):
        grad(loss, argnums=DiffState(0, Param), graph_updates=False)
    with pytest.raises(TypeError, match="takes ints and `DiffState"):
        grad(loss, argnums=("m",))(model, other)


def test_variables_holding_pytrees_of_arrays_come_back_from_jit():
    model = Model()
    model.seen = Variable(())

    @jit
    def step(m, x):
        m.seen.set_value((*m.seen.get_value(), x * 2))
        return m(x)

    step(model, jnp.ones((1, 2)))
    step(model, jnp.ones((1, 2)))
    seen = model.seen.get_value()
    assert len(seen) == 2 and float(seen[1].sum()) == 4.0


def test_jit_of_a_module_takes_it_as_an_argument_not_a_constant() -> None:
    # As `eqx.filter_jit(model)`: Flax NNX's `nnx.jit(model)` bakes the weights in, so a
    # later update goes unseen and a layer writing its state raises.
    from bryo_transforms import jit

    class Scaled(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones(2))
            self.calls = BatchStat(jnp.array(0))

        def __call__(self, x: jax.Array, double: bool = False) -> jax.Array:
            self.calls.value = self.calls.value + 1
            y = x * self.w.value
            return y + y if double else y

    model = Scaled()
    forward = jit(model, static_argnames="double")
    np.testing.assert_array_equal(forward(jnp.ones(2)), np.ones(2))
    model.w.value = jnp.full(2, 3.0)
    np.testing.assert_array_equal(forward(jnp.ones(2)), np.full(2, 3.0))  # not the old w
    np.testing.assert_array_equal(forward(jnp.ones(2), double=True), np.full(2, 6.0))
    assert int(model.calls.value) == 3  # written back
    by_position = jit(model, static_argnums=1)  # the call's own argument 1, `double`
    np.testing.assert_array_equal(by_position(jnp.ones(2), True), np.full(2, 6.0))
    assert "3.0" not in forward.lower(jnp.ones(2)).as_text()  # no weight constant
