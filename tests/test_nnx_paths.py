"""Flax NNX's public paths on `bryo.nnx`: the `nnx.nn.*` and `nnx.training.*` submodules
are real modules (importable by dotted path), holding the same objects as the facade."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bryo import nnx
from bryo_graph import TreeDef

SUBMODULE_NAMES = {
    "nn.activations": ["relu", "gelu", "PReLU"],
    "nn.attention": ["MultiHeadAttention", "dot_product_attention", "combine_masks"],
    "nn.dtypes": ["promote_dtype", "canonicalize_dtype"],
    "nn.initializers": ["lecun_normal", "zeros_init", "ones_init", "variance_scaling"],
    "nn.linear": ["Linear", "LinearGeneral", "Einsum", "Conv", "ConvTranspose", "Embed"],
    "nn.lora": ["LoRA", "LoRALinear", "LoRAParam"],
    "nn.normalization": ["BatchNorm", "LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm"],
    "nn.recurrent": ["LSTMCell", "GRUCell", "SimpleCell", "OptimizedLSTMCell", "RNN"],
    "nn.stochastic": ["Dropout"],
    "training.metrics": ["Average", "Accuracy", "Welford", "MultiMetric", "Metric"],
    "training.optimizer": ["Optimizer", "ModelAndOptimizer", "OptState"],
    "spmd": ["PARTITION_NAME", "with_partitioning", "get_partition_spec", "as_abstract"],
    "statelib": ["State", "to_flat_state", "to_pure_dict", "filter_state", "merge_state"],
    "variablelib": ["Variable", "Param", "VariableMetadata", "with_metadata"],
    "graphlib": ["split", "merge", "state", "GraphDef", "set_metadata", "as_pure"],
}


@pytest.mark.parametrize("submodule", SUBMODULE_NAMES)
def test_flax_paths_import_and_hold_the_facades_objects(submodule):
    module = importlib.import_module(f"bryo.nnx.{submodule}")
    for name in SUBMODULE_NAMES[submodule]:
        value = getattr(module, name)
        facade = getattr(nnx, name, None) or getattr(nnx.metrics, name, None)
        assert facade is None or facade is value, f"{submodule}.{name}"


def test_initializers_metrics_and_containers_are_one_namespace():
    from bryo.nnx.nn import initializers

    assert nnx.initializers is initializers is nnx.nn.initializers
    assert nnx.metrics is nnx.training.metrics and nnx.optimizer is nnx.training.optimizer
    assert nnx.List([1]) == [1] and nnx.Dict({"a": 1}) == {"a": 1}
    assert nnx.Initializer is not None


def test_compat_defaults_to_graph_mode_with_updates():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with nnx.set_graph_mode(False):
        graphdef, _ = nnx.compat.split(model)
        assert not isinstance(graphdef, TreeDef)  # graph mode's GraphDef

        @nnx.compat.jit
        def grow(m):
            m.extra = nnx.Param(jnp.zeros(1))  # a structural update: graph mode only

        grow(model)
    assert isinstance(model.extra, nnx.Param)
    with nnx.set_graph_mode(False):
        treedef, _ = nnx.compat.split(model, graph=False)  # explicit keywords win
    assert isinstance(treedef, TreeDef)


def test_merge_state_joins_states_later_ones_win():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    params, rest = nnx.state(model, nnx.Param, ...)
    merged = nnx.merge_state(params, rest)
    assert set(merged.flat_state()) == {("kernel",), ("bias",)}


def test_statelib_diff_keeps_the_paths_the_other_state_lacks():
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    params = nnx.state(model)
    assert nnx.statelib.diff(params, nnx.state(model)) == nnx.State({})
    kept = nnx.statelib.diff(params, nnx.State({"bias": 0}))
    assert list(kept.flat_state()) == [("kernel",)]


@pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="needs jax.set_mesh")
def test_abstract_with_sharding_warns_and_gives_as_abstracts_result():
    auto = (jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((1,), ("a",), axis_types=auto, devices=jax.devices()[:1])

    class Model(nnx.Module):
        def __init__(self):
            init = nnx.with_partitioning(lambda: jnp.ones((2, 4)), ("a", None), mesh=mesh)
            self.w = nnx.Param(init())

    abstract = nnx.eval_shape(Model)
    assert abstract.w[...].sharding is None
    with pytest.warns(DeprecationWarning, match="nnx.as_abstract"):
        annotated = nnx.abstract_with_sharding(abstract)
    assert annotated.w[...].sharding == nnx.as_abstract(abstract).w[...].sharding
    assert annotated.w[...].sharding == NamedSharding(mesh, P("a", None))
    assert nnx.spmd.abstract_with_sharding is nnx.abstract_with_sharding
