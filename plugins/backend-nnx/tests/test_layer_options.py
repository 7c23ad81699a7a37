"""Flax 0.12's layer keywords on bryo's layers: metadata, dtype promotion, Einsum, conv
paddings and masks, the normalization family, PReLU, Sequential, LoRA, the weight
re-normalising wrappers, `Module.sow`; and the errors for arguments that do not fit."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_graph as graph
from bryo_graph import BatchStat, Intermediate, Param
from bryo_nnx import (
    BatchNorm,
    Conv,
    ConvTranspose,
    Dropout,
    Einsum,
    Embed,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    Linear,
    LinearGeneral,
    LoRA,
    LoRALinear,
    LoRAParam,
    Module,
    MultiHeadAttention,
    PReLU,
    RMSNorm,
    Sequential,
    SpectralNorm,
    WeightNorm,
    dtypes,
    initializers,
    relu,
)
from bryo_rngs import Rngs

X = jax.random.normal(jax.random.key(0), (2, 3, 4))


close = functools.partial(np.testing.assert_allclose, atol=1e-5, rtol=1e-5)


# Keywords -------------------------------------------------------------------------------

CONSTRUCTORS = {
    "Linear": lambda **kw: Linear(4, 2, rngs=Rngs(0), **kw),
    "LinearGeneral": lambda **kw: LinearGeneral(4, 2, rngs=Rngs(0), **kw),
    "Einsum": lambda **kw: Einsum("ab,bc->ac", (4, 2), rngs=Rngs(0), **kw),
    "Conv": lambda **kw: Conv(4, 2, 3, rngs=Rngs(0), **kw),
    "ConvTranspose": lambda **kw: ConvTranspose(4, 2, 3, rngs=Rngs(0), **kw),
    "Embed": lambda **kw: Embed(5, 4, rngs=Rngs(0), **kw),
    "LayerNorm": lambda **kw: LayerNorm(4, **kw),
    "GroupNorm": lambda **kw: GroupNorm(4, 2, **kw),
    "MultiHeadAttention": lambda **kw: MultiHeadAttention(2, 4, rngs=Rngs(0), **kw),
    "LoRALinear": lambda **kw: LoRALinear(4, 2, lora_rank=1, rngs=Rngs(0), **kw),
    "Dropout": lambda **kw: Dropout(0.5, **kw),
}


@pytest.mark.parametrize("layer", CONSTRUCTORS)
def test_a_misspelt_keyword_fails_at_construction_naming_it(layer):
    with pytest.raises(TypeError, match="kernal_init"):
        CONSTRUCTORS[layer](kernal_init=initializers.zeros)


def test_metadata_keywords_become_the_params_metadata():
    layer = Linear(
        4, 2, kernel_metadata={"sharding": ("in", "out")}, bias_metadata={"note": 1}, rngs=Rngs(0)
    )
    assert layer.kernel.out_sharding == ("in", "out") and layer.bias.note == 1
    conv = Conv(4, 2, 3, kernel_metadata={"sharding": (None, "in", "out")}, rngs=Rngs(0))
    assert conv.kernel.out_sharding == (None, "in", "out")
    norm = LayerNorm(4, scale_metadata={"sharding": ("f",)}, rngs=Rngs(0))
    assert norm.scale.out_sharding == ("f",)
    mha = MultiHeadAttention(2, 4, kernel_metadata={"note": "qkv"}, rngs=Rngs(0))
    assert mha.query.kernel.note == "qkv" and mha.out.kernel.note == "qkv"


def test_promote_dtype_and_preferred_element_type():
    seen = []

    def keep_input_dtype(args, /, *, dtype=None, inexact=True):
        seen.append(tuple(None if a is None else a.dtype for a in args))
        target = args[0].dtype
        return tuple(None if a is None else a.astype(target) for a in args)

    layer = Linear(4, 2, promote_dtype=keep_input_dtype, rngs=Rngs(0))
    y = layer(X.astype(jnp.bfloat16))
    assert y.dtype == jnp.bfloat16 and seen == [(jnp.bfloat16, jnp.float32, jnp.float32)]
    wide = Linear(4, 2, param_dtype=jnp.bfloat16, preferred_element_type=jnp.float32, rngs=Rngs(0))
    assert wide(X.astype(jnp.bfloat16)).dtype == jnp.float32


def test_integer_inputs_compute_in_float32():
    x, kernel = dtypes.promote_dtype((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int8)))
    assert x.dtype == kernel.dtype == jnp.float32
    assert dtypes.canonicalize_dtype(jnp.ones(2, jnp.int8), inexact=False) == jnp.int8
    with pytest.raises(ValueError, match="floating or complex"):
        dtypes.canonicalize_dtype(jnp.ones(2), dtype=jnp.int32)


# Dense ----------------------------------------------------------------------------------


def test_linear_general_batch_axis_keeps_a_kernel_per_batch_entry():
    layer = LinearGeneral(4, 5, batch_axis={0: 2}, rngs=Rngs(0))
    assert layer.kernel.shape == (2, 4, 5) and layer.bias.shape == (2, 5)
    expected = jnp.einsum("bti,bio->bto", X, layer.kernel[...]) + layer.bias[...][:, None]
    close(layer(X), expected)
    with pytest.raises(ValueError, match="leading axes 0, 1"):
        LinearGeneral(4, 5, batch_axis={1: 2}, rngs=Rngs(0))


@pytest.mark.slow
def test_einsum_adds_the_bias_along_the_kernels_output_axes():
    layer = Einsum(
        "nta,hab->nthb", (3, 4, 5), (3, 5), bias_init=initializers.normal(), rngs=Rngs(0)
    )
    expected = jnp.einsum("nta,hab->nthb", X, layer.kernel[...]) + layer.bias[...][None, None]
    close(layer(X), expected)
    assert layer(X).shape == (2, 3, 3, 5)


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(0, 2), rhs_batch=st.booleans())
def test_einsum_bias_broadcasts_with_ellipses(batch, rhs_batch):
    equation = "...a,...ab->...b" if rhs_batch else "...a,ab->...b"
    kernel_shape = (2, 4, 3) if rhs_batch else (4, 3)
    bias_shape = (2, 3) if rhs_batch else (3,)  # the kernel's axes that reach the output
    layer = Einsum(equation, kernel_shape, bias_shape, bias_init=initializers.ones, rngs=Rngs(0))
    x = jnp.ones((*(2,) * batch, 4))
    expected = jnp.einsum(equation, x, layer.kernel[...]) + 1.0
    close(layer(x), expected)


def test_einsum_equations_are_checked():
    with pytest.raises(ValueError, match="explicit, with '->'"):
        Einsum("ab,bc", (2, 2), rngs=Rngs(0))
    with pytest.raises(ValueError, match="exactly two operands"):
        Einsum("ab,bc,cd->ad", (2, 2), rngs=Rngs(0))
    layer = Einsum("ab,bc->ac", (4, 2), 2, rngs=Rngs(0))  # an int shape is one axis
    assert layer.bias.shape == (2,)
    close(layer(X[0], "ab,bc->ac"), X[0] @ layer.kernel[...])
    layer.einsum_str = None
    with pytest.raises(ValueError, match="needs `einsum_str`"):
        layer(X[0])


# Convolutions ---------------------------------------------------------------------------


@pytest.mark.slow
def test_conv_paddings_and_their_errors():
    x = jax.random.normal(jax.random.key(1), (2, 6, 4))
    circular = Conv(4, 3, 3, padding="circular", rngs=Rngs(0))
    shifted = circular(jnp.roll(x, 1, axis=1))
    close(shifted, jnp.roll(circular(x), 1, axis=1))  # wrap-around is shift-equivariant
    causal = Conv(4, 3, 2, padding="CAUSAL", rngs=Rngs(0))
    assert causal(x).shape == (2, 6, 3)
    with pytest.raises(ValueError, match="'CAUSAL' padding needs one spatial axis"):
        Conv(4, 3, (2, 2), padding="CAUSAL", rngs=Rngs(0))
    with pytest.raises(ValueError, match="one of 'SAME', 'VALID'"):
        Conv(4, 3, 2, padding="FULL", rngs=Rngs(0))
    with pytest.raises(ValueError, match="one of 'SAME', 'VALID', 'CIRCULAR'"):
        ConvTranspose(4, 3, 2, padding="REFLECT", rngs=Rngs(0))


def test_conv_mask_multiplies_the_kernel():
    x = jax.random.normal(jax.random.key(1), (2, 6, 4))
    zero = Conv(4, 3, 2, mask=jnp.zeros((2, 4, 3)), bias_init=initializers.ones, rngs=Rngs(0))
    close(zero(x), jnp.ones((2, 6, 3)))
    with pytest.raises(ValueError, match=r"`mask` must have the kernel's shape \(2, 4, 3\)"):
        Conv(4, 3, 2, mask=jnp.ones((2, 3)), rngs=Rngs(0))


@pytest.mark.slow
def test_circular_conv_transpose_output_is_input_times_stride():
    layer = ConvTranspose(4, 2, (3, 3), strides=(2, 1), padding="CIRCULAR", rngs=Rngs(0))
    assert layer(jnp.ones((1, 5, 3, 4))).shape == (1, 10, 3, 2)


# Normalization --------------------------------------------------------------------------


@pytest.mark.slow
def test_group_norm_with_one_group_is_layer_norm_over_every_non_batch_axis():
    x = jax.random.normal(jax.random.key(2), (2, 3, 4))
    close(GroupNorm(4, 1)(x), LayerNorm(4, reduction_axes=(1, 2), feature_axes=-1)(x))
    groups = GroupNorm(4, 2)(x).reshape(2, 3, 2, 2)
    close(groups.mean((1, 3)), jnp.zeros((2, 2)), atol=1e-5)


def test_group_norm_and_instance_norm_argument_errors():
    with pytest.raises(ValueError, match="exactly one of `num_groups` and `group_size`"):
        GroupNorm(4, 2, 2)
    with pytest.raises(ValueError, match="`num_groups`=3 must be a positive int dividing"):
        GroupNorm(4, 3)
    with pytest.raises(ValueError, match="`group_size`=3 must divide"):
        GroupNorm(4, None, 3)
    with pytest.raises(ValueError, match="may not include the first axis"):
        InstanceNorm(2, feature_axes=0)(X)


def test_instance_norm_normalizes_each_example_and_channel():
    y = InstanceNorm(4)(X)
    close(y.mean(1), jnp.zeros((2, 4)), atol=1e-5)
    close(y.var(1), jnp.ones((2, 4)), atol=1e-3)


@pytest.mark.slow
def test_slow_variance_and_masks_follow_the_formula():
    mask = jnp.array([True, True, False, True])
    y = LayerNorm(4, use_fast_variance=False)(X, mask=jnp.broadcast_to(mask, X.shape))
    kept = X[..., mask]
    mean = kept.mean(-1, keepdims=True)
    var = ((kept - mean) ** 2).mean(-1, keepdims=True)
    close(y, (X - mean) / jnp.sqrt(var + 1e-6))
    close(RMSNorm(4)(X), X / jnp.sqrt((X**2).mean(-1, keepdims=True) + 1e-6))


def test_batch_norm_without_a_mode_asks_for_one():
    norm = BatchNorm(4, use_running_average=None)
    with pytest.raises(ValueError, match="needs `use_running_average`"):
        norm(X)
    assert norm(X, use_running_average=True).shape == X.shape
    assert norm.mean.dtype == jnp.float32


def test_weight_norm_sets_each_kernel_column_to_its_scale():
    layer = Linear(4, 3, rngs=Rngs(0))
    wrapped = WeightNorm(layer, scale_init=initializers.constant(2.0), rngs=Rngs(1))
    assert isinstance(wrapped.scales[("kernel",)], Param)
    y = wrapped(X)
    close(jnp.linalg.norm(layer.kernel[...], axis=0), jnp.full((3,), 2.0))
    close(y, X @ layer.kernel[...] + layer.bias[...][None, None])


def test_spectral_norm_bounds_the_largest_singular_value():
    layer = Linear(4, 3, kernel_init=initializers.normal(3.0), rngs=Rngs(0))
    wrapped = SpectralNorm(layer, n_steps=20, rngs=Rngs(1))
    assert set(wrapped.batch_stats) == {("kernel", "u"), ("kernel", "sigma")}
    assert isinstance(wrapped.batch_stats[("kernel", "u")], BatchStat)
    wrapped(X)
    close(jnp.linalg.svd(layer.kernel[...], compute_uv=False)[0], 1.0, atol=1e-4)
    wrapped.eval()
    u = wrapped.batch_stats[("kernel", "u")][...]
    wrapped(X)
    close(wrapped.batch_stats[("kernel", "u")][...], u)


def test_wrappers_name_weights_added_after_them():
    layer = Linear(4, 3, rngs=Rngs(0))
    wrapped = SpectralNorm(layer, rngs=Rngs(1))
    layer.extra_kernel = Param(jnp.ones((3, 3)))
    with pytest.raises(RuntimeError, match="extra_kernel: the wrapped layer gained weights"):
        wrapped(X)


# PReLU, Sequential, LoRA ----------------------------------------------------------------


def test_prelu_learns_the_negative_slope():
    act = PReLU(0.5)
    close(act(jnp.array([-2.0, 3.0])), jnp.array([-1.0, 3.0]))
    assert act(jnp.ones(2, jnp.bfloat16)).dtype == jnp.bfloat16
    assert set(dict(graph.state(act, Param).flat_state())) == {("negative_slope",)}


@pytest.mark.slow
def test_sequential_pipes_outputs_and_passes_rngs():
    def split_pair(x):
        return x, 2 * x

    def as_kwargs(a, b):
        return {"a": a, "b": b}

    def add(*, a, b):
        return a + b

    model = Sequential(Linear(4, 2, rngs=Rngs(0)), split_pair, as_kwargs, add, Dropout(0.5))
    y = model(X, rngs=Rngs(dropout=1))
    kept = y != 0
    close(y[kept], (6 * model.layers[0](X))[kept])
    assert Sequential()(X) is X and Sequential()(1, 2) == (1, 2)
    with pytest.raises(TypeError, match=r"layers\[1\] is not callable: int"):
        Sequential(relu, 3)(X)


def test_lora_trains_apart_from_its_base():
    base = Linear(4, 3, rngs=Rngs(0))
    lora = LoRA(4, 2, 3, base_module=base, rngs=Rngs(1))
    close(lora(X), base(X))  # lora_b starts at zero
    assert set(dict(graph.state(lora, LoRAParam).flat_state())) == {("lora_a",), ("lora_b",)}
    linear = LoRALinear(4, 3, lora_rank=2, use_bias=False, rngs=Rngs(0))
    assert set(dict(graph.state(linear).flat_state())) == {
        ("kernel",),
        ("lora", "lora_a"),
        ("lora", "lora_b"),
    }
    with pytest.raises(TypeError, match="`base_module` must be callable"):
        LoRA(4, 2, 3, base_module=3, rngs=Rngs(0))


# Module.sow -----------------------------------------------------------------------------


class Probe(Module):
    def __call__(self, x):
        self.sow(Intermediate, "seen", x)
        return x


def test_sow_collects_one_value_per_call_and_pop_takes_them():
    probe = Probe()
    probe(1.0)
    probe(2.0)
    assert probe.seen.value == (1.0, 2.0)
    summed = Module()
    summed.sow(Intermediate, "total", 1, reduce_fn=lambda a, b: a + b, init_fn=lambda: 0)
    summed.sow(Intermediate, "total", 2, reduce_fn=lambda a, b: a + b, init_fn=lambda: 0)
    assert summed.total.value == 3
    popped = graph.pop(probe, Intermediate)
    assert "seen" not in vars(probe) and set(dict(popped.flat_state())) == {("seen",)}


def test_sow_errors_name_the_attribute():
    probe = Probe()
    probe.seen = Param(jnp.ones(1))
    with pytest.raises(ValueError, match="'seen' to be of type 'Intermediate', got 'Param'"):
        probe(1.0)
    probe.seen = 3
    with pytest.raises(ValueError, match="'seen' to be a Variable, got int"):
        probe(1.0)
    with pytest.raises(TypeError, match="takes a Variable type"):
        Module().sow("intermediates", "x", 1)
