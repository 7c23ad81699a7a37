"""Flax NNX's public paths on `bryo.nnx`: the `nnx.nn.*` and `nnx.training.*` submodules
are real modules (importable by dotted path), holding the same objects as the facade."""

from __future__ import annotations

import importlib
import inspect

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
    "nn.lora": ["LoRA", "LoRALinear", "LoRAParam", "default_a_initializer"],
    "nn.normalization": ["BatchNorm", "LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm"],
    "nn.recurrent": ["LSTMCell", "GRUCell", "SimpleCell", "OptimizedLSTMCell", "RNN"],
    "nn.stochastic": ["Dropout"],
    "training.metrics": ["Average", "Accuracy", "Welford", "MultiMetric", "Metric"],
    "training.optimizer": ["Optimizer", "ModelAndOptimizer", "OptState", "to_opt_state"],
    "training.ema": ["EMA"],
    "rnglib": ["Rngs", "RngStream", "RngKey", "RngCount", "fork_rngs", "split_rngs"],
    "module": ["Module", "iter_modules", "view", "with_attributes", "capture"],
    "helpers": ["Dict", "List", "Sequential", "TrainState"],
    "pytreelib": ["Pytree", "Object", "data", "static", "register_data_type"],
    "summary": ["tabulate"],
    "filterlib": ["Filter", "to_predicate", "OfType", "PathContains", "Everything"],
    "transforms.autodiff": ["grad", "value_and_grad", "vjp", "remat", "custom_vjp"],
    "transforms.compilation": ["jit", "jit_partial", "shard_map"],
    "transforms.iteration": ["vmap", "scan", "pmap", "fori_loop", "StateAxes", "Carry"],
    "transforms.transforms": ["cond", "switch", "eval_shape", "checkify"],
    "traversals": ["flatten_mapping", "unflatten_mapping", "flatten_to_sequence"],
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


def test_the_layers_defaults_are_the_objects_the_layers_use():
    # Flax's GSPMD guide: `nnx.with_partitioning(nnx.nn.linear.default_kernel_init, ...)`
    linear = nnx.nn.linear

    def default(layer, name):
        return inspect.signature(layer).parameters[name].default

    assert default(nnx.Linear, "kernel_init") is linear.default_kernel_init
    assert default(nnx.Linear, "bias_init") is linear.default_bias_init
    assert default(nnx.Embed, "embedding_init") is linear.default_embed_init
    assert nnx.nn.attention.default_kernel_init is linear.default_kernel_init
    assert nnx.nn.lora.default_b_initializer is nnx.initializers.zeros
    layer = nnx.Linear(
        2,
        3,
        kernel_init=nnx.with_partitioning(linear.default_kernel_init, (None, "model")),
        rngs=nnx.Rngs(0),
    )
    assert layer.kernel.out_sharding == (None, "model")
    assert (layer.kernel[...] == nnx.Linear(2, 3, rngs=nnx.Rngs(0)).kernel[...]).all()


def test_traversals_flatten_and_unflatten_nested_mappings():
    # Flax's surgery guide flattens `nnx.state(model).to_pure_dict()` this way
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    pure = nnx.state(model).to_pure_dict()
    flat = nnx.traversals.flatten_mapping(pure)
    assert set(flat) == {("kernel",), ("bias",)}
    assert nnx.traversals.unflatten_mapping(flat).keys() == pure.keys()
    nested = {"a": {"b": 1, "c": {}}, "d": 2}
    assert nnx.traversals.flatten_mapping(nested, sep="/") == {"a/b": 1, "d": 2}
    kept = nnx.traversals.flatten_mapping(nested, keep_empty_nodes=True)
    assert kept[("a", "c")] is nnx.traversals.empty_node
    assert nnx.traversals.unflatten_mapping(kept) == nested
    assert nnx.traversals.flatten_to_sequence(nested) == [(("a", "b"), 1), (("d",), 2)]
    whole = nnx.traversals.flatten_mapping(nested, is_leaf=lambda path, m: path == ("a",))
    assert whole == {("a",): {"b": 1, "c": {}}, ("d",): 2}
    with pytest.raises(ValueError, match=r"runs through \('a',\), which holds a leaf"):
        nnx.traversals.unflatten_mapping({("a",): 1, ("a", "b"): 2})
    with pytest.raises(TypeError, match="pass `sep=` for string paths"):
        nnx.traversals.unflatten_mapping({"a/b": 1})


def test_flax_nnx_object_is_the_non_pytree_base():
    class Foo(nnx.Object):  # Flax's pytree guide: a plain list of arrays is fine here
        def __init__(self):
            self.arrays = [jnp.ones(2), jnp.zeros(2)]

    foo = Foo()
    assert jax.tree.leaves(foo) == [foo] and not isinstance(
        nnx.Linear(1, 1, rngs=nnx.Rngs(0)), nnx.Object
    )
    assert len(nnx.state(foo)["arrays"]) == 2
    assert nnx.pytreelib.Pytree is nnx.Pytree and issubclass(nnx.Module, nnx.Pytree)


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
