"""Sharding across packages: Stacked metadata in this process, and 8-device runs (data
parallel, 2x4 model parallel, Stacked and eval_mox on sharded arrays) in a subprocess.

JAX fixes its device count when it starts, and this process keeps one device, so the
8-device checks run `sharding_worker.py single` with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`; the worker asserts and exits nonzero
on failure. `subprocess.run` kills it if it outlives its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from bryo_graph import Param, VariableState, get_partition_spec
from bryo_pytree import pytree_dataclass
from bryo_scan import AxisInfo, Stacked

WORKER = Path(__file__).with_name("sharding_worker.py")
TIMEOUT_S = 240  # generous: a loaded 2-core machine starts JAX slowly


def worker_env(device_count: int) -> dict[str, str]:
    """This process's environment with `device_count` host CPU devices for JAX."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={device_count}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


@pytree_dataclass
class Block:
    w: VariableState

    @classmethod
    def make(cls, key):
        return cls(VariableState(Param, jax.random.normal(key, (4, 8)), sharding=("embed", "mlp")))

    def __call__(self, x):
        return x


def test_stacking_adds_a_leading_layer_axis_to_sharding():
    layers = AxisInfo(name=None, size=3, position=0)
    stacked = Stacked.init(layers, Block.make)(jax.random.split(jax.random.key(0), 3))
    assert stacked.stacked.w.value.shape == (3, 4, 8)
    assert stacked.stacked.w.out_sharding == (None, "embed", "mlp")
    assert get_partition_spec(stacked).stacked.w.value == P(None, "embed", "mlp")
    layer = stacked.get_layer(0)
    assert layer.w.value.shape == (4, 8)


def test_unstacked_blocks_keep_plain_arrays():
    layers = AxisInfo(name=None, size=2, position=0)

    @pytree_dataclass
    class Plain:
        w: jax.Array

    stacked = Stacked.init(layers, lambda: Plain(jnp.ones(3)))()
    assert stacked.stacked.w.shape == (2, 3)


@pytest.mark.slow
def test_eight_device_runs_match_one_device():
    result = subprocess.run(
        [sys.executable, str(WORKER), "single"],
        env=worker_env(8),
        cwd=WORKER.parent,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, f"worker failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["data"] == pytest.approx(summary["reference"], rel=1e-5)
    assert summary["model"] == pytest.approx(summary["reference"], rel=1e-5)


# The named-axis backend: axis names are logical axes, a Haliax-style mapping the rules ---------


def test_named_arrays_shard_by_axis_names():
    from jax.sharding import AbstractMesh

    from bryo_graph import ShardingError, get_named_sharding
    from bryo_named import NamedArray, infer_resource_partitions, pspec_for_axis

    mesh = AbstractMesh((2, 4), ("data", "model"))
    x = NamedArray(jnp.ones((4, 8)), {"Batch": 4, "Mlp": 8})
    assert pspec_for_axis(x, {"Batch": "data"}) == P("data", None)
    assert pspec_for_axis(("Batch", "Mlp"), {"Mlp": "model"}) == P(None, "model")
    tree = {"x": x, "p": VariableState(Param, NamedArray(jnp.ones(8), {"Mlp": 8}))}
    shardings = infer_resource_partitions(tree, {"Batch": "data", "Mlp": "model"}, mesh)
    assert shardings["x"].spec == P("data", "model")
    assert shardings["p"].value.spec == P("model")
    assert infer_resource_partitions(tree, {}, mesh)["x"].spec == P(None, None)  # Haliax default
    with pytest.raises(ShardingError, match=r"logical axis 'Batch' of the value at x has no mesh"):
        get_named_sharding(tree, mesh, {"Mlp": "model"})  # bryo_graph's rules are strict
    odd = {"y": NamedArray(jnp.ones(6), {"Mlp": 6})}
    with pytest.raises(
        ShardingError, match=r"dimension 0 of the value at y \(logical axis 'Mlp', size 6\)"
    ):
        infer_resource_partitions(odd, {"Mlp": "model"}, mesh)


def test_equinox_module_sharded_init_and_placement():
    import equinox as eqx

    from bryo_graph import get_named_sharding, make_mesh, sharded_init

    mesh = make_mesh({"data": 1})
    linear = sharded_init(lambda: eqx.nn.Linear(4, 8, key=jax.random.key(0)), mesh)
    assert isinstance(linear, eqx.nn.Linear)
    eager = eqx.nn.Linear(4, 8, key=jax.random.key(0))
    assert jnp.allclose(linear.weight, eager.weight)
    shardings = get_named_sharding(eager, mesh)  # shaped like the module: fits device_put
    placed = jax.device_put(eager, shardings)
    assert placed.weight.sharding == shardings.weight


# MoX: Variables' sharding metadata travels as module attributes, through XML and YSON -----------


@pytest.mark.parametrize("fmt", ["xml", "yson"])
def test_mox_documents_keep_sharding_metadata(fmt):
    import bryo_mox as mox
    from bryo_nnx import Module

    class Dense(Module):
        def __init__(self):
            self.kernel = Param(jnp.ones((4, 8)), sharding=("embed", None))
            self.bias = Param(jnp.zeros(8), sharding=(("batch", "mlp"),))

        def __call__(self, x):
            y = x @ self.kernel
            return y + jnp.broadcast_to(self.bias, y.shape)

    model = Dense()
    traced = mox.make_mox(lambda x: model(x))(jnp.ones((2, 4)))
    back = mox.loads(mox.dumps(traced, fmt), fmt)
    (call,) = [n for n in back.block.nodes if isinstance(n, mox.ModuleCall)]
    assert call.attrs["kernel_sharding"] == ("embed", None)
    assert call.attrs["bias_sharding"] == ("batch+mlp",)
    assert jnp.allclose(mox.eval_mox(back, jnp.ones((2, 4))), model(jnp.ones((2, 4))))
