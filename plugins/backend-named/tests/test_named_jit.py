"""`named_jit`: Haliax's jit over NamedArrays, static Python values, donation and axis
resources that shard inputs and results by axis name."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_named as hax
from bryo_named import AxisError

H, W = hax.make_axes(H=2, W=3)


def test_arrays_are_traced_and_other_values_static():
    traces = []

    @hax.named_jit
    def scaled(x, scale, axis):
        traces.append(axis)
        return hax.sum(x, axis) * scale, axis

    x = hax.arange((H, W), dtype=jnp.float32)
    total, axis = scaled(x, 2.0, "W")
    assert axis == "W" and total.shape == {"H": 2}
    np.testing.assert_allclose(total.array, x.array.sum(1) * 2.0)
    scaled(x + 1.0, 2.0, "W")  # same static values: no new trace
    assert traces == ["W"]
    assert scaled(x, 2.0, "H")[0].shape == {"W": 3}  # a new static value: a new trace
    assert traces == ["W", "H"]


def test_haliax_spellings_where_and_nonzero_with_keywords():
    x = hax.arange((H, W), dtype=jnp.float32)
    out = hax.named_jit(hax.where)(x > 2.0, x, 0.0)
    np.testing.assert_allclose(out.array, jnp.where(x.array > 2.0, x.array, 0.0))
    pick = hax.Axis("Nonzero", 6)
    i, j = hax.named_jit(hax.nonzero)(x, size=pick, fill_value=-1)
    assert i.axes == (pick,) and j.axes == (pick,)


def test_decorator_factory_and_donation():
    @hax.named_jit(donate_args=(True, False))
    def add(x, y):
        return x + y

    x, y = hax.ones(H), hax.ones(H)
    np.testing.assert_allclose(add(x, y).array, [2.0, 2.0])
    main = next(line for line in add.lower(x, y).as_text().splitlines() if "@main(" in line)
    assert main.count("tf.aliasing_output") == 1  # x's buffer is donated, y's is not
    by_name = hax.named_jit(lambda x, *, y: x + y, donate_kwargs={"y": True})
    main = next(line for line in by_name.lower(x, y=y).as_text().splitlines() if "@main(" in line)
    assert main.count("tf.aliasing_output") == 1
    with pytest.raises(TypeError, match="`donate_args` must be a bool or a tuple of bools"):
        hax.named_jit(add, donate_args="yes")(x, y)


def test_axis_resources_shard_the_result_by_axis_name():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    f = hax.named_jit(lambda x: x * 2.0, axis_resources={"H": "data"}, mesh=mesh)
    out = f(hax.ones((H, W)))
    np.testing.assert_allclose(out.array, np.full((2, 3), 2.0))
    g = hax.named_jit(lambda x: x, in_axis_resources={"W": "data"}, mesh=mesh)
    np.testing.assert_allclose(g(hax.ones((H, W))).array, np.ones((2, 3)))


def test_bad_input_says_what_to_fix():
    x = hax.ones(H)
    with pytest.raises(AxisError, match="no mesh to map them onto: pass `mesh=`"):
        hax.named_jit(lambda x: x, axis_resources={"H": "data"})(x)
    with pytest.raises(TypeError, match="unhashable bytearray"):
        hax.named_jit(lambda x, opts: x)(x, bytearray(b"ab"))


def test_a_shape_dependent_static_result_follows_each_shape():
    f = hax.named_jit(lambda x: (x, x.shape[0]))
    assert f(jnp.ones(2))[1] == 2
    assert f(jnp.ones(3))[1] == 3
    assert f(jnp.ones(2))[1] == 2  # a cached compilation: its own static result


def test_lower_gives_the_compiled_text():
    f = hax.named_jit(lambda x: hax.sum(x, "H"))
    assert "reduce" in f.lower(hax.ones((H, W))).as_text()


_SHARDED = """
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import bryo_named as hax
H, W = hax.make_axes(H=4, W=2)
mesh = Mesh(np.array(jax.devices()).reshape(4), ("data",))
def placed(x, *spec):
    return x.array.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), 2)
f = hax.named_jit(lambda x: x * 2.0, axis_resources={"H": "data"}, mesh=mesh)
out = f(hax.ones((H, W)))
assert placed(out, "data", None), out.array.sharding
np.testing.assert_allclose(out.array, np.full((4, 2), 2.0))
g = hax.named_jit(lambda x: x.rearrange(("W", "H")), out_axis_resources={"H": "data"}, mesh=mesh)
assert placed(g(hax.ones((H, W))), None, "data")
set_mesh = getattr(jax, "set_mesh", None) or getattr(jax.sharding, "use_mesh", None)
if set_mesh is not None:  # the current mesh, as Haliax uses
    with set_mesh(mesh):
        h = hax.named_jit(lambda x: x + 1.0, axis_resources={"H": "data"})
        assert placed(h(hax.ones((H, W))), "data", None)
"""


@pytest.mark.slow
def test_axis_resources_place_results_on_four_devices():
    # JAX fixes its device count at start, so this runs in a subprocess
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    run = subprocess.run(
        [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-2000:]
