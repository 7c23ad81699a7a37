"""Every layer against Flax NNX 0.12 itself: built with the same arguments and the same
`Rngs` seed, bryo's layer must hold the same state (paths, types, values) and give the same
outputs, bit for bit, call after call (state updated in place included)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_graph as graph
import bryo_nnx
from bryo_graph import BatchStat, Cache, Intermediate, Param
from bryo_rngs import Rngs, RngStream

flax_nnx = pytest.importorskip("flax.nnx")

BRYO = SimpleNamespace(
    **{name: getattr(bryo_nnx, name) for name in dir(bryo_nnx) if not name.startswith("_")},
    Rngs=Rngs,
    RngStream=RngStream,
    Param=Param,
    BatchStat=BatchStat,
    Cache=Cache,
    Intermediate=Intermediate,
)
FLAX = flax_nnx

X = jax.random.normal(jax.random.key(0), (2, 5, 6))
IMAGE = jax.random.normal(jax.random.key(1), (2, 7, 6, 3))
SEQUENCE = jax.random.normal(jax.random.key(2), (2, 4, 3))


def as_numbers(value: object) -> np.ndarray:
    value = jnp.asarray(value)
    if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
    return np.asarray(value)


def bryo_state(module: object) -> dict:
    """`path: (kind, numbers)`; a bare array attribute is a raw State leaf of kind 'array',
    as Flax keeps it."""
    return {
        path: (state.type.__name__, as_numbers(state.value))
        if isinstance(state, graph.VariableState)
        else ("array", as_numbers(state))
        for path, state in dict(graph.state(module).flat_state()).items()
    }


def flax_value(var: flax_nnx.Variable) -> object:
    """A Flax Variable's value: `get_value()` in flax 0.12.8, `.value` in flax 0.12.0."""
    return var.get_value() if hasattr(var, "get_value") else var.value


def flax_state(module: object) -> dict:
    return {
        path: (type(var).__name__, as_numbers(flax_value(var)))
        if isinstance(var, flax_nnx.Variable)
        else ("array", as_numbers(var))
        for path, var in flax_nnx.to_flat_state(flax_nnx.state(module))
    }


def assert_same_state(ours: object, theirs: object) -> None:
    a, b = bryo_state(ours), flax_state(theirs)
    assert sorted(a, key=str) == sorted(b, key=str)
    for path, (kind, value) in a.items():
        assert kind == b[path][0], path
        np.testing.assert_array_equal(value, b[path][1], err_msg=str(path))


def assert_same_output(ours: object, theirs: object) -> None:
    leaves_a, tree_a = jax.tree.flatten(ours)
    leaves_b, tree_b = jax.tree.flatten(theirs)
    assert tree_a == tree_b
    for a, b in zip(leaves_a, leaves_b, strict=True):
        assert jnp.asarray(a).dtype == jnp.asarray(b).dtype
        np.testing.assert_array_equal(as_numbers(a), as_numbers(b))


def cases(table: dict) -> list:
    """The table's keys as parameters: the first runs always, the rest are slow."""
    return [
        pytest.param(key, marks=() if i == 0 else pytest.mark.slow) for i, key in enumerate(table)
    ]


Build = Callable[[SimpleNamespace], object]
Call = Callable[[SimpleNamespace, object], object]


# Cases whose Flax side is not clean under the suite's strict dtype promotion (conftest.py),
# with the Flax code that promotes implicitly: Flax runs them under JAX's standard
# promotion; bryo's side stays strict.
FLAX_NOT_STRICT = {
    "linear_preferred_element_type": "flax.nnx.Linear.__call__ adds the bfloat16 bias to "
    "the float32 preferred_element_type output (`y += bias`)",
    "layer_norm_two_axes_bf16": "flax.nnx.nn.normalization._compute_stats promotes its "
    "bfloat16 dtype with float32 (`jnp.promote_types`), and its `_normalize` subtracts "
    "float32 statistics from bfloat16 inputs",
}


def check(build: Build, call: Call, calls: int = 2, *, flax_standard: bool = False) -> None:
    """`flax_standard`: run Flax's side under JAX's standard dtype promotion (a case of
    FLAX_NOT_STRICT)."""
    flax_promotion = "standard" if flax_standard else jax.config.jax_numpy_dtype_promotion
    ours = build(BRYO)
    with jax.numpy_dtype_promotion(flax_promotion):
        theirs = build(FLAX)
    assert_same_state(ours, theirs)
    for _ in range(calls):
        out = call(BRYO, ours)
        with jax.numpy_dtype_promotion(flax_promotion):
            expected = call(FLAX, theirs)
        assert_same_output(out, expected)
        assert_same_state(ours, theirs)


def on(x: jax.Array, **kwargs: object) -> Call:
    return lambda nnx, layer: layer(x, **kwargs)


# Dense layers ---------------------------------------------------------------------------

DENSE = {
    "linear": (lambda nnx: nnx.Linear(6, 4, rngs=nnx.Rngs(0)), on(X)),
    "linear_bf16_no_bias": (
        lambda nnx: nnx.Linear(
            6, 4, use_bias=False, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(1)
        ),
        on(X),
    ),
    "linear_preferred_element_type": (
        lambda nnx: nnx.Linear(
            6, 4, param_dtype=jnp.bfloat16, preferred_element_type=jnp.float32, rngs=nnx.Rngs(2)
        ),
        on(X.astype(jnp.bfloat16)),
    ),
    "linear_random_bias": (
        lambda nnx: nnx.Linear(
            6,
            3,
            bias_init=nnx.initializers.normal(),
            kernel_metadata={"note": "kernel"},
            rngs=nnx.Rngs(params=3),
        ),
        on(X),
    ),
    "linear_general": (
        lambda nnx: nnx.LinearGeneral((5, 6), (2, 3), axis=(-2, -1), rngs=nnx.Rngs(0)),
        on(X),
    ),
    "linear_general_batch_axis": (
        lambda nnx: nnx.LinearGeneral(
            6, 4, batch_axis={0: 2}, bias_init=nnx.initializers.normal(), rngs=nnx.Rngs(0)
        ),
        on(X),
    ),
    "einsum": (
        lambda nnx: nnx.Einsum("nta,hab->nthb", (3, 6, 4), (3, 4), rngs=nnx.Rngs(0)),
        on(X),
    ),
    "einsum_ellipsis_bias": (
        lambda nnx: nnx.Einsum(
            "...a,ab->...b", (6, 4), (4,), bias_init=nnx.initializers.normal(), rngs=nnx.Rngs(1)
        ),
        on(X),
    ),
    "embed": (
        lambda nnx: nnx.Embed(10, 6, rngs=nnx.Rngs(0)),
        on(jnp.array([[1, 9, 0], [3, 3, 2]])),
    ),
    "embed_attend": (
        lambda nnx: nnx.Embed(10, 6, rngs=nnx.Rngs(0)),
        lambda nnx, layer: layer.attend(X),
    ),
    "prelu": (lambda nnx: nnx.PReLU(0.2), on(X)),
    "prelu_bf16": (lambda nnx: nnx.PReLU(dtype=jnp.bfloat16), on(X)),
}


@pytest.mark.parametrize("case", cases(DENSE))
def test_dense_layers_match_flax(case):
    check(*DENSE[case], flax_standard=case in FLAX_NOT_STRICT)


# Convolutions ---------------------------------------------------------------------------

CONV = {
    "same": dict(kernel_size=(3, 3)),
    "valid_strided": dict(kernel_size=(2, 3), strides=(2, 1), padding="VALID"),
    "circular": dict(kernel_size=(3, 3), padding="CIRCULAR"),
    "reflect_dilated": dict(kernel_size=(3, 2), padding="REFLECT", kernel_dilation=(1, 2)),
    "explicit_padding": dict(kernel_size=(3, 3), padding=((1, 2), 0), input_dilation=2),
    "grouped": dict(kernel_size=(1, 1), feature_group_count=3, out_features=6),
    "masked": dict(kernel_size=(2, 2), mask=jnp.tril(jnp.ones((2, 2, 3, 4)))),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(CONV))
def test_conv_matches_flax(case):
    options = {"out_features": 4, **CONV[case]}
    check(lambda nnx: nnx.Conv(3, rngs=nnx.Rngs(0), **options), on(IMAGE))


def test_causal_conv_matches_flax_and_sees_no_future_inputs():
    build = lambda nnx: nnx.Conv(3, 2, 3, padding="CAUSAL", kernel_dilation=2, rngs=nnx.Rngs(0))
    check(build, on(SEQUENCE))
    layer = build(BRYO)
    changed = SEQUENCE.at[:, 3].add(1.0)
    np.testing.assert_array_equal(layer(SEQUENCE)[:, :3], layer(changed)[:, :3])


CONV_TRANSPOSE = {
    "same": dict(kernel_size=(3, 3)),
    "valid_strided": dict(kernel_size=(3, 2), strides=(2, 2), padding="VALID"),
    "circular": dict(kernel_size=(4, 3), strides=(2, 1), padding="CIRCULAR"),
    "circular_transposed": dict(
        kernel_size=(3, 3), strides=2, padding="CIRCULAR", transpose_kernel=True
    ),
    "masked_unbatched": dict(kernel_size=(2, 2), mask=jnp.triu(jnp.ones((2, 2, 3, 4)))),
}


@pytest.mark.parametrize("case", cases(CONV_TRANSPOSE))
def test_conv_transpose_matches_flax(case):
    x = IMAGE[0] if case.endswith("unbatched") else IMAGE
    check(lambda nnx: nnx.ConvTranspose(3, 4, rngs=nnx.Rngs(0), **CONV_TRANSPOSE[case]), on(x))


# Normalization --------------------------------------------------------------------------

MASK = jnp.arange(6) % 2 == 0

NORMS = {
    "layer_norm": (lambda nnx: nnx.LayerNorm(6, rngs=nnx.Rngs(0)), on(X)),
    "layer_norm_slow_variance_mask": (
        lambda nnx: nnx.LayerNorm(6, use_fast_variance=False, rngs=nnx.Rngs(0)),
        on(X, mask=jnp.broadcast_to(MASK, X.shape)),
    ),
    "layer_norm_two_axes_bf16": (
        lambda nnx: nnx.LayerNorm(6, reduction_axes=(-2, -1), dtype=jnp.bfloat16, rngs=nnx.Rngs(0)),
        on(X),
    ),
    "rms_norm": (lambda nnx: nnx.RMSNorm(6, rngs=nnx.Rngs(0)), on(X)),
    "batch_norm": (
        lambda nnx: nnx.BatchNorm(6, momentum=0.9, rngs=nnx.Rngs(0)),
        on(X),
    ),
    "batch_norm_eval": (
        lambda nnx: nnx.BatchNorm(6, use_running_average=True, rngs=nnx.Rngs(0)),
        on(X),
    ),
    "batch_norm_axis_1": (
        lambda nnx: nnx.BatchNorm(5, axis=1, use_fast_variance=False, rngs=nnx.Rngs(0)),
        on(X),
    ),
    "group_norm": (lambda nnx: nnx.GroupNorm(6, num_groups=3, rngs=nnx.Rngs(0)), on(X)),
    "group_norm_group_size": (
        lambda nnx: nnx.GroupNorm(6, num_groups=None, group_size=3, rngs=nnx.Rngs(0)),
        on(IMAGE.reshape(2, 7, 3, 6)),
    ),
    "instance_norm": (lambda nnx: nnx.InstanceNorm(3, rngs=nnx.Rngs(0)), on(IMAGE)),
    "instance_norm_mask": (
        lambda nnx: nnx.InstanceNorm(6, use_fast_variance=False, rngs=nnx.Rngs(0)),
        on(X, mask=jnp.broadcast_to(MASK, X.shape)),
    ),
}


@pytest.mark.parametrize("case", cases(NORMS))
def test_normalization_layers_match_flax(case):
    check(*NORMS[case], flax_standard=case in FLAX_NOT_STRICT)


@pytest.mark.skipif(
    not hasattr(flax_nnx, "WeightNorm"), reason="flax.nnx.WeightNorm is not in flax 0.12.0"
)
def test_weight_norm_matches_flax():
    def build(nnx):
        rngs = nnx.Rngs(0)
        return nnx.WeightNorm(
            nnx.Linear(6, 4, rngs=rngs), scale_init=nnx.initializers.constant(2.0), rngs=rngs
        )

    ours, theirs = build(BRYO), build(FLAX)
    for _ in range(2):
        assert_same_output(ours(X), theirs(X))
    assert_same_output(ours.layer_instance.kernel[...], theirs.layer_instance.kernel[...])
    np.testing.assert_array_equal(ours.scales[("kernel",)], theirs.scales[("kernel",)])


@pytest.mark.slow
@pytest.mark.parametrize("update_stats", [True, False])
def test_spectral_norm_matches_flax(update_stats):
    def build(nnx):
        rngs = nnx.Rngs(0)
        inner = nnx.Sequential(nnx.Linear(6, 4, rngs=rngs), nnx.relu, nnx.Conv(4, 2, 2, rngs=rngs))
        return nnx.SpectralNorm(inner, n_steps=2, update_stats=update_stats, rngs=rngs)

    check(build, on(X))


# Dropout and attention ------------------------------------------------------------------


def test_dropout_matches_flax():
    check(lambda nnx: nnx.Dropout(0.3, rngs=nnx.Rngs(dropout=5)), on(X), calls=3)
    check(
        lambda nnx: nnx.Dropout(0.5, broadcast_dims=(1,)),
        lambda nnx, layer: layer(X, rngs=nnx.Rngs(dropout=2)),
    )


ATTENTION = {
    "self": (
        lambda nnx: nnx.MultiHeadAttention(2, 6, decode=False, rngs=nnx.Rngs(0)),
        on(X),
    ),
    "cross_gqa_masked": (
        lambda nnx: nnx.MultiHeadAttention(
            4, 6, 8, 5, 2, in_kv_features=3, decode=False, rngs=nnx.Rngs(0)
        ),
        lambda nnx, layer: layer(
            X,
            SEQUENCE[:, :3],
            mask=nnx.make_attention_mask(
                jnp.ones((2, 5), jnp.int32), jnp.array([[1, 1, 0], [1, 0, 0]])
            ),
        ),
    ),
    "causal_normalized": (
        lambda nnx: nnx.MultiHeadAttention(2, 6, normalize_qk=True, decode=False, rngs=nnx.Rngs(0)),
        on(X, is_causal=True),
    ),
    "dropout_kept_rngs": (
        lambda nnx: nnx.MultiHeadAttention(
            3, 6, dropout_rate=0.4, deterministic=False, decode=False, rngs=nnx.Rngs(0, dropout=1)
        ),
        on(X),
    ),
    "dropout_call_rngs_gqa": (
        lambda nnx: nnx.MultiHeadAttention(
            4,
            6,
            num_kv_heads=2,
            qkv_features=8,
            dropout_rate=0.4,
            broadcast_dropout=False,
            keep_rngs=False,
            decode=False,
            rngs=nnx.Rngs(0),
        ),
        lambda nnx, layer: layer(X, deterministic=False, rngs=nnx.Rngs(dropout=3)),
    ),
}


@pytest.mark.parametrize("case", cases(ATTENTION))
def test_multi_head_attention_matches_flax(case):
    check(*ATTENTION[case])


@pytest.mark.slow
def test_decoding_with_the_cache_matches_flax_and_a_causal_pass():
    def build(nnx):
        layer = nnx.MultiHeadAttention(4, 6, num_kv_heads=2, qkv_features=8, rngs=nnx.Rngs(0))
        layer.init_cache(X.shape)
        return layer

    ours, theirs = build(BRYO), build(FLAX)
    steps = []
    for t in range(X.shape[1]):
        step = ours(X[:, t : t + 1], decode=True)
        assert_same_output(step, theirs(X[:, t : t + 1], decode=True))
        steps.append(step)
    assert_same_state(ours, theirs)
    full = ours(X, decode=False, is_causal=True)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)


@pytest.mark.slow
def test_attention_weights_with_dropout_match_flax():
    from flax.nnx.nn import attention

    q, k = X.reshape(2, 5, 2, 3), SEQUENCE.reshape(2, 4, 1, 3)
    options = dict(dropout_rate=0.5, dropout_rng=jax.random.key(7), is_causal=True)
    for broadcast_dropout in (True, False):
        assert_same_output(
            bryo_nnx.dot_product_attention_weights(
                q, k, broadcast_dropout=broadcast_dropout, **options
            ),
            attention.dot_product_attention_weights(
                q, k, broadcast_dropout=broadcast_dropout, **options
            ),
        )


# LoRA, Sequential -----------------------------------------------------------------------

OTHERS = {
    "lora": (lambda nnx: nnx.LoRA(6, 2, 4, rngs=nnx.Rngs(0)), on(X)),
    "lora_with_base": (
        lambda nnx: nnx.LoRA(
            6,
            2,
            4,
            base_module=nnx.Linear(6, 4, rngs=nnx.Rngs(1)),
            b_initializer=nnx.initializers.normal(),
            rngs=nnx.Rngs(0),
        ),
        on(X),
    ),
    "lora_linear": (
        lambda nnx: nnx.LoRALinear(
            6, 4, lora_rank=3, b_initializer=nnx.initializers.ones, rngs=nnx.Rngs(0)
        ),
        on(X),
    ),
    "sequential": (
        lambda nnx: nnx.Sequential(
            nnx.Linear(6, 8, rngs=nnx.Rngs(0)),
            nnx.gelu,
            nnx.Dropout(0.5),
            nnx.LayerNorm(8, rngs=nnx.Rngs(1)),
        ),
        lambda nnx, layer: layer(X, rngs=nnx.Rngs(dropout=4)),
    ),
}


@pytest.mark.parametrize("case", cases(OTHERS))
def test_lora_and_sequential_match_flax(case):
    check(*OTHERS[case])


# Recurrent ------------------------------------------------------------------------------

CELLS = ["SimpleCell", "GRUCell", "LSTMCell", "OptimizedLSTMCell"]


@pytest.mark.parametrize(
    "cell", [pytest.param(c, marks=() if c == "LSTMCell" else pytest.mark.slow) for c in CELLS]
)
def test_cells_match_flax(cell):
    def step(nnx, layer):
        carry = layer.initialize_carry(SEQUENCE[:, 0].shape, nnx.Rngs(carry=1))
        return layer(carry, SEQUENCE[:, 0])

    check(lambda nnx: getattr(nnx, cell)(3, 5, rngs=nnx.Rngs(0)), step)


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS)
def test_rnn_matches_flax(cell):
    lengths = jnp.array([4, 2])
    check(
        lambda nnx: nnx.RNN(getattr(nnx, cell)(3, 5, rngs=nnx.Rngs(0)), return_carry=True),
        on(SEQUENCE, seq_lengths=lengths),
    )
    check(
        lambda nnx: nnx.RNN(
            getattr(nnx, cell)(3, 5, rngs=nnx.Rngs(0)),
            time_major=True,
            reverse=True,
            keep_order=True,
            rngs=nnx.Rngs(carry=3),
        ),
        lambda nnx, layer: layer(
            jnp.swapaxes(SEQUENCE, 0, 1),
            initial_carry=layer.cell.initialize_carry((2, 3), nnx.Rngs(carry=1)),
        ),
    )


@pytest.mark.slow
def test_bidirectional_matches_flax():
    def build(nnx):
        rngs = nnx.Rngs(0)
        return nnx.Bidirectional(
            nnx.RNN(nnx.GRUCell(3, 4, rngs=rngs)),
            nnx.RNN(nnx.LSTMCell(3, 2, rngs=rngs)),
            return_carry=True,
            rngs=rngs,
        )

    check(build, on(SEQUENCE, seq_lengths=jnp.array([3, 4])))


@pytest.mark.slow
def test_rnn_with_broadcast_dropout_rngs_matches_flax():
    def build(nnx):
        base = nnx.RNNCellBase

        class Cell(base):
            def __init__(self, rngs):
                self.cell = nnx.SimpleCell(3, 4, rngs=rngs)
                self.dropout = nnx.Dropout(0.5, rngs=rngs)
                self.hidden_features = 4

            def __call__(self, carry, x):
                carry, y = self.cell(carry, x)
                return carry, self.dropout(y)

            def initialize_carry(self, input_shape, rngs=None, carry_init=None):
                return self.cell.initialize_carry(input_shape, rngs)

            @property
            def num_feature_axes(self):
                return 1

        return nnx.RNN(Cell(nnx.Rngs(0, dropout=1)), broadcast_rngs="dropout")

    ours, theirs = build(BRYO), build(FLAX)
    for _ in range(2):
        assert_same_output(ours(SEQUENCE), theirs(SEQUENCE))
    assert_same_state(ours, theirs)


def test_repr_counts_and_lays_out_a_model_as_flax_does():
    """`print(model)` after switching the import: the same statistics comments on the same
    nodes, in the same order, and shared and cyclic nodes as `Name(...)`. (Array values
    differ, bryo writes `f32[2,3]`; and some layers set their static attributes in
    another order than Flax's, so the lines between differ.)"""

    def build(nnx, List, Dict):  # the classes, as the namespaces spell them
        class Block(nnx.Module):
            def __init__(self, rngs):
                self.linear = nnx.Linear(2, 3, rngs=rngs)
                self.bn = nnx.BatchNorm(3, rngs=rngs)

        class Model(nnx.Module):
            def __init__(self, rngs):
                self.count = 3
                self.block = Block(rngs)
                self.dropout = nnx.Dropout(0.5, rngs=rngs)
                self.layers = List([nnx.Linear(3, 3, rngs=rngs), nnx.Linear(3, 1, rngs=rngs)])
                self.table = Dict(head=nnx.Embed(5, 2, rngs=rngs), size=5)
                self.shared = self.block
                self.big = nnx.Linear(70, 80, rngs=rngs)
                self.me = self

        return Model(nnx.Rngs(0, dropout=1))

    def outline(model):
        lines = repr(model).splitlines()
        return [line for line in lines if " # " in line or line.rstrip(",").endswith("(...)")]

    ours = outline(build(BRYO, graph.List, graph.Dict))
    theirs = outline(build(FLAX, FLAX.List, FLAX.Dict))
    assert ours[0] == (
        "Model( # Param: 5,721 (22.9 KB), BatchStat: 6 (24 B), RngState: 2 (12 B), "
        "Total: 5,729 (22.9 KB)"
    )
    assert ours == theirs
