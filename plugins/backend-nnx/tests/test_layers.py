"""NNX-style layers: shapes, numbers against hand-written jax, rng streams, modes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_graph as graph
from bryo_graph import BatchStat, Param
from bryo_nnx import (
    BatchNorm,
    Conv,
    ConvTranspose,
    Dropout,
    Embed,
    LayerNorm,
    Linear,
    LinearGeneral,
    Module,
    MultiHeadAttention,
    RMSNorm,
    initializers,
)
from bryo_rngs import RngCount, RngKey, Rngs, RngState

KEY = jax.random.key(42)


close = functools.partial(np.testing.assert_allclose, atol=1e-5, rtol=1e-5)


def params_keys(seed: int, n: int) -> list[jax.Array]:
    return [jax.random.fold_in(jax.random.key(seed), i) for i in range(n)]


# Linear -------------------------------------------------------------------------------


def test_linear_initialises_from_the_params_stream_and_computes_x_kernel_plus_bias():
    layer = Linear(3, 4, rngs=Rngs(0, params=1), bias_init=initializers.normal(1.0))
    k_kernel, k_bias = params_keys(1, 2)
    close(layer.kernel.value, initializers.lecun_normal()(k_kernel, (3, 4), jnp.float32))
    close(layer.bias.value, initializers.normal(1.0)(k_bias, (4,), jnp.float32))
    x = jax.random.normal(KEY, (2, 5, 3))
    close(layer(x), x @ layer.kernel.value + layer.bias.value[None, None])
    assert layer(x).shape == (2, 5, 4)


def test_linear_sizes_are_static_and_parameters_are_state():
    layer = Linear(3, 4, use_bias=False, rngs=Rngs(0))
    graphdef, state = graph.split(layer)
    assert set(state.flat_state()) == {("kernel",)}
    assert "in_features=3" in repr(graphdef) and "out_features=4" in repr(graphdef)
    assert layer.in_features == 3 and layer.bias is None


def test_linear_dtype_and_shape_errors():
    layer = Linear(3, 2, dtype=jnp.bfloat16, rngs=Rngs(0))
    assert layer(jnp.ones((1, 3))).dtype == jnp.bfloat16
    assert layer.kernel.value.dtype == jnp.float32
    with pytest.raises(ValueError, match="`in_features`=3"):
        layer(jnp.ones((1, 4)))
    with pytest.raises(TypeError, match="`rngs` of Linear"):
        Linear(3, 2, rngs=0)


def test_linear_takes_inputs_matching_its_kernel_shard():
    """Inside `shard_map` a kernel sharded along its input axis holds one slice: the layer
    contracts what its kernel holds (tensor parallelism), and says so when inputs differ."""
    layer = Linear(8, 2, use_bias=False, rngs=Rngs(0))
    full = layer.kernel.value
    layer.kernel.value = full[:4]  # what one of two devices holds
    np.testing.assert_allclose(layer(jnp.ones((1, 4))), jnp.ones((1, 4)) @ full[:4])
    with pytest.raises(
        ValueError, match=r"`in_features`=8 \(4 in this shard\); got shape \(1, 8\)"
    ):
        layer(jnp.ones((1, 8)))
    assert layer.kernel.value.shape == (4, 2)  # the failed call changed nothing


def test_linear_general_contracts_several_axes():
    layer = LinearGeneral((2, 3), (4, 5), axis=(-2, -1), rngs=Rngs(0))
    x = jax.random.normal(KEY, (6, 2, 3))
    expected = jnp.einsum("bij,ijkl->bkl", x, layer.kernel.value) + layer.bias.value[None]
    close(layer(x), expected)
    assert layer.kernel.value.shape == (2, 3, 4, 5)
    with pytest.raises(ValueError, match="one input axis per entry"):
        LinearGeneral((2, 3), 4, axis=-1, rngs=Rngs(0))


# Conv ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_conv_1d_valid_matches_a_hand_written_convolution():
    conv = Conv(2, 3, kernel_size=3, padding="VALID", rngs=Rngs(0), bias_init=initializers.normal())
    x = jax.random.normal(KEY, (4, 7, 2))
    w, b = conv.kernel.value, conv.bias.value
    expected = (
        jnp.stack([jnp.einsum("bki,kio->bo", x[:, t : t + 3], w) for t in range(5)], axis=1)
        + b[None, None]
    )
    close(conv(x), expected)


@pytest.mark.slow
def test_conv_2d_shapes_strides_groups_and_unbatched_inputs():
    conv = Conv(4, 6, (3, 3), rngs=Rngs(0))
    assert conv(jnp.ones((2, 8, 8, 4))).shape == (2, 8, 8, 6)
    assert conv(jnp.ones((8, 8, 4))).shape == (8, 8, 6)
    assert conv(jnp.ones((3, 2, 8, 8, 4))).shape == (3, 2, 8, 8, 6)
    strided = Conv(4, 6, (3, 3), strides=2, padding="VALID", rngs=Rngs(0))
    assert strided(jnp.ones((1, 9, 9, 4))).shape == (1, 4, 4, 6)
    grouped = Conv(4, 6, (1, 1), feature_group_count=2, rngs=Rngs(0))
    assert grouped.kernel.value.shape == (1, 1, 2, 6)
    assert grouped(jnp.ones((1, 5, 5, 4))).shape == (1, 5, 5, 6)
    with pytest.raises(ValueError, match="divisible"):
        Conv(3, 6, 1, feature_group_count=2, rngs=Rngs(0))
    with pytest.raises(ValueError, match="`padding`"):
        Conv(3, 6, 1, padding="FULL", rngs=Rngs(0))


def test_conv_transpose_1d_valid_matches_a_hand_written_scatter():
    layer = ConvTranspose(
        2, 3, 3, strides=2, padding="VALID", rngs=Rngs(0), bias_init=initializers.normal()
    )
    x = jax.random.normal(KEY, (4, 5, 2))
    w, b = np.asarray(layer.kernel.value), np.asarray(layer.bias.value)
    expected = np.zeros((4, 11, 3), np.float32)
    for t in range(5):
        for k in range(3):
            expected[:, 2 * t + (2 - k)] += np.asarray(x[:, t]) @ w[k]
    close(layer(x), expected + b)
    assert ConvTranspose(3, 4, (3, 3), strides=2, rngs=Rngs(0))(jnp.ones((4, 4, 3))).shape == (
        8,
        8,
        4,
    )


# Embed --------------------------------------------------------------------------------


def test_embed_looks_up_rows_and_attends():
    embed = Embed(10, 4, rngs=Rngs(params=3))
    table = embed.embedding.value
    ids = jnp.array([[1, 9], [0, 1]])
    close(embed(ids), table[ids])
    query = jax.random.normal(KEY, (2, 4))
    close(embed.attend(query), query @ table.T)
    with pytest.raises(ValueError, match="integer indices"):
        embed(jnp.ones(2))


@pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="needs jax.set_mesh")
def test_embed_out_sharding_places_lookups_and_attention():
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("X",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:1])
    embed = Embed(10, 4, rngs=Rngs(params=3))
    ids = jnp.array([1, 9])
    with jax.set_mesh(mesh):
        rows = embed(ids, out_sharding=P("X"))
        scores = embed.attend(rows, out_sharding=P("X", None))
    assert rows.sharding.spec[0] == "X" and scores.sharding.spec == P("X", None)
    close(rows, embed(ids))
    close(scores, embed.attend(embed(ids)))


# Normalization ------------------------------------------------------------------------


def test_layer_norm_matches_the_formula():
    norm = LayerNorm(
        4, scale_init=initializers.normal(), bias_init=initializers.normal(), rngs=Rngs(0)
    )
    x = jax.random.normal(KEY, (3, 4))
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    expected = (x - mean) / jnp.sqrt(var + 1e-6) * norm.scale.value[None] + norm.bias.value[None]
    close(norm(x), expected)
    with pytest.raises(ValueError, match="`num_features`=5"):
        LayerNorm(5)(x)
    with pytest.raises(ValueError, match="no `rngs`"):
        LayerNorm(4, scale_init=initializers.normal())


def test_rms_norm_matches_the_formula():
    norm = RMSNorm(4)
    x = jax.random.normal(KEY, (3, 4))
    close(norm(x), x / jnp.sqrt((x**2).mean(-1, keepdims=True) + 1e-6))


@pytest.mark.slow
def test_batch_norm_updates_running_stats_in_place_and_uses_them_in_eval():
    norm = BatchNorm(3, momentum=0.9)
    x = jax.random.normal(KEY, (16, 3)) * 2.0 + 1.0
    y = norm(x)
    mean, var = x.mean(0), x.var(0)
    close(y, (x - mean[None]) / jnp.sqrt(var[None] + 1e-5), atol=1e-4)
    close(norm.mean.value, 0.1 * mean)
    close(norm.var.value, 0.9 + 0.1 * var, atol=1e-5)
    stats = dict(graph.state(norm, BatchStat).flat_state())
    assert set(stats) == {("mean",), ("var",)}

    running_mean, running_var = norm.mean.value, norm.var.value
    norm.eval()
    assert norm.use_running_average is True
    close(norm(x), (x - running_mean[None]) / jnp.sqrt(running_var[None] + 1e-5), atol=1e-5)
    close(norm.mean.value, running_mean)  # unchanged in eval
    norm.train()
    norm(x, use_running_average=True)
    close(norm.mean.value, running_mean)
    norm(x)
    assert not np.allclose(norm.mean.value, running_mean)


def test_batch_norm_stats_flow_back_through_jit():
    norm = BatchNorm(2)
    graphdef, state = graph.split(norm)

    @jax.jit
    def step(state, x):
        model = graph.merge(graphdef, state)
        y = model(x)
        return y, graph.state(model)

    x = jnp.arange(8.0).reshape(4, 2)
    _, new_state = step(state, x)
    graph.update(norm, new_state)
    close(norm.mean.value, 0.01 * x.mean(0))


# Dropout ------------------------------------------------------------------------------


def expected_dropout(x, rate, key, shape=None):
    keep = jax.random.bernoulli(key, 1 - rate, shape or x.shape)
    return jnp.where(jnp.broadcast_to(keep, x.shape), x / (1 - rate), 0.0)


def test_dropout_explicit_rngs_use_the_dropout_stream():
    x = jnp.ones((4, 8))
    rngs = Rngs(params=0, dropout=1)
    y = Dropout(0.5)(x, rngs=rngs)
    close(y, expected_dropout(x, 0.5, jax.random.fold_in(jax.random.key(1), 0)))
    assert int(rngs.dropout.count.value) == 1 and int(rngs.params.count.value) == 0
    stream_y = Dropout(0.5)(x, rngs=Rngs(dropout=1).dropout)
    close(stream_y, y)
    key_y = Dropout(0.5)(x, rngs=jax.random.fold_in(jax.random.key(1), 0))
    close(key_y, y)


def test_dropout_implicit_rngs_keep_a_forked_stream():
    x = jnp.ones((4, 8))
    rngs = Rngs(params=0, dropout=1)
    drop = Dropout(0.5, rngs=rngs)
    assert int(rngs.dropout.count.value) == 1  # the fork drew one key
    own = jax.random.fold_in(jax.random.key(1), 0)
    first, second = drop(x), drop(x)
    close(first, expected_dropout(x, 0.5, jax.random.fold_in(own, 0)))
    close(second, expected_dropout(x, 0.5, jax.random.fold_in(own, 1)))
    assert drop.rngs.tag == "dropout"
    # explicit rngs at the call win over the stored stream
    close(drop(x, rngs=Rngs(dropout=1)), Dropout(0.5)(x, rngs=Rngs(dropout=1)))


@pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="needs jax.set_mesh")
@pytest.mark.parametrize("broadcast_dims", [(), (1,)])
def test_dropout_keeps_the_sharding_of_explicitly_sharded_inputs(broadcast_dims):
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("X",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:1])
    layer = Dropout(0.5, broadcast_dims=broadcast_dims, deterministic=False, rngs=Rngs(0))
    with jax.set_mesh(mesh):
        x = jax.sharding.reshard(jnp.ones((2, 4)), P("X", None))
        y = layer(x)
    assert y.sharding.spec == P("X", None)
    assert set(np.unique(np.asarray(y)).tolist()) <= {0.0, 2.0}


def test_dropout_modes_broadcast_and_collections():
    x = jnp.ones((4, 8))
    assert Dropout(0.5, deterministic=True)(x) is x
    assert Dropout(0.5)(x, deterministic=True) is x
    assert Dropout(0.0)(x) is x
    close(Dropout(1.0)(x, rngs=Rngs(0)), jnp.zeros_like(x))
    shared = Dropout(0.5, broadcast_dims=(0,))(x, rngs=Rngs(0))
    assert all(np.array_equal(shared[0], row) for row in shared)
    custom = Dropout(
        0.5, rng_collection="recurrent_dropout", rngs=Rngs(params=0, recurrent_dropout=1)
    )
    assert custom.rngs.tag == "recurrent_dropout"
    # With only a default stream, the layer's own stream is still tagged 'dropout'.
    assert Dropout(0.5, rngs=Rngs(0)).rngs.tag == "dropout"
    with pytest.raises(ValueError, match="no `rngs` argument was provided to Dropout"):
        Dropout(0.5)(x)
    with pytest.raises(ValueError, match="`rate`"):
        Dropout(1.5)
    drop = Dropout(0.5, rngs=Rngs(0))
    drop.eval()
    assert drop(x) is x and drop.deterministic is True
    drop.train()
    assert drop.deterministic is False


# MultiHeadAttention -------------------------------------------------------------------


def reference_attention(mha: MultiHeadAttention, x: jax.Array, mask=None) -> jax.Array:
    def project(layer, inputs):
        y = jnp.einsum("...d,dhk->...hk", inputs, layer.kernel.value)
        return y + jnp.broadcast_to(layer.bias.value, y.shape)

    q, k, v = project(mha.query, x), project(mha.key, x), project(mha.value, x)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1])
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
    y = jnp.einsum("bqhd,hdo->bqo", out, mha.out.kernel.value)
    return y + jnp.broadcast_to(mha.out.bias.value, y.shape)


@pytest.mark.slow
def test_multi_head_attention_matches_a_hand_written_computation():
    mha = MultiHeadAttention(2, 8, qkv_features=4, out_features=6, rngs=Rngs(0))
    x = jax.random.normal(KEY, (3, 5, 8))
    y = mha(x)
    assert y.shape == (3, 5, 6)
    close(y, reference_attention(mha, x), atol=1e-5)
    causal = jnp.tril(jnp.ones((5, 5), bool))[None, None]
    close(mha(x, mask=causal), reference_attention(mha, x, causal), atol=1e-5)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(3, 8, rngs=Rngs(0))


@pytest.mark.slow
def test_multi_head_attention_dropout_draws_from_the_dropout_stream():
    x = jax.random.normal(KEY, (2, 4, 8))
    mha = MultiHeadAttention(2, 8, dropout_rate=0.5, rngs=Rngs(params=0, dropout=1))
    assert mha.rngs.tag == "dropout"
    with pytest.raises(ValueError, match="needs `deterministic`"):
        mha(x)
    plain = mha(x, deterministic=True)
    a = mha(x, deterministic=False)
    b = mha(x, deterministic=False)
    assert not np.allclose(a, b) and not np.allclose(a, plain)
    assert int(mha.rngs.count.value) == 2
    explicit = mha(x, deterministic=False, rngs=Rngs(dropout=5))
    assert int(mha.rngs.count.value) == 2
    close(explicit, mha(x, deterministic=False, rngs=Rngs(dropout=5)))
    mha.eval()
    close(mha(x), plain)


# Models: split/merge, filters, modes --------------------------------------------------


class Model(Module):
    def __init__(self, rngs: Rngs) -> None:
        self.linear = Linear(4, 3, rngs=rngs)
        self.norm = BatchNorm(3, rngs=rngs)
        self.drop = Dropout(0.5, rngs=rngs)
        self.rngs = rngs

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.drop(self.norm(self.linear(x)))


def test_model_with_layers_and_rngs_round_trips_through_split_and_merge():
    model = Model(Rngs(params=0, dropout=1))
    graphdef, params, stats, rng_state = graph.split(model, Param, BatchStat, RngState)
    assert set(params.flat_state()) == {
        ("linear", "kernel"),
        ("linear", "bias"),
        ("norm", "scale"),
        ("norm", "bias"),
    }
    assert ("drop", "rngs", "key") in rng_state.flat_state()
    clone = graph.merge(graphdef, params, stats, rng_state, copy=True)
    x = jax.random.normal(KEY, (5, 4))
    close(clone(x), model(x))
    assert isinstance(clone.rngs, Rngs) and clone.drop.rngs is not model.drop.rngs


def test_model_call_under_jit_advances_counts_and_stats():
    model = Model(Rngs(params=0, dropout=1))
    graphdef, state = graph.split(model)

    @jax.jit
    def forward(state, x):
        inner = graph.merge(graphdef, state)
        return inner(x), graph.state(inner)

    x = jax.random.normal(KEY, (5, 4))
    y1, state = forward(state, x)
    y2, state = forward(state, x)
    graph.update(model, state)
    assert not np.allclose(y1, y2)
    assert int(model.drop.rngs.count.value) == 2
    assert not np.allclose(model.norm.mean.value, 0.0)
    keys = graph.state(model, RngKey)
    counts = graph.state(model, RngCount)
    dropout = graph.state(model, "dropout")
    assert ("drop", "rngs", "key") in keys.flat_state()
    assert ("drop", "rngs", "count") in counts.flat_state()
    assert set(dropout.flat_state()) >= {("drop", "rngs", "key"), ("drop", "rngs", "count")}


def test_train_and_eval_flip_every_layer():
    model = Model(Rngs(0))
    model.eval()
    assert model.drop.deterministic and model.norm.use_running_average
    x = jnp.ones((2, 4))
    close(model(x), model(x))
    model.train()
    assert not model.drop.deterministic and not model.norm.use_running_average


def test_batch_norm_running_statistics_carry_no_gradient():
    # as Flax: the running statistics are written through `stop_gradient`, so a hijax
    # BatchNorm reached through a closure under `jax.grad` can update them
    bn = BatchNorm(2, use_running_average=False, rngs=Rngs(0))
    graphdef, state = graph.split(bn)
    x = jnp.arange(6.0).reshape(3, 2)

    def new_running_mean(x):
        copy = graph.merge(graphdef, state, copy=True)
        copy(x)
        return copy.mean[...].sum()

    np.testing.assert_array_equal(jax.grad(new_running_mean)(x), np.zeros((3, 2)))
    assert new_running_mean(x) != 0  # the statistics are still updated
