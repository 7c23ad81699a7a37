"""Checkpoint policies: aliases, validation, gradients equal to the unrolled loop, and
what each policy keeps for the backward pass."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_scan import (
    OffloadUnavailableError,
    ScanCheckpointPolicy,
    fold,
    scan,
    tree_checkpoint_name,
)

POLICIES = [
    False,
    True,
    "full",
    "nested",
    "save_all",
    ScanCheckpointPolicy(nested=2),
    ScanCheckpointPolicy(save_block_internals=["hidden"]),
    ScanCheckpointPolicy(save_carries=False, save_inputs=False),
    ScanCheckpointPolicy(prevent_cse=True),
    ScanCheckpointPolicy(nested=True, save_block_internals=["hidden"]),
]


def _block(carry, layer):
    hidden = jnp.tanh(carry @ layer["w"] + layer["b"])
    hidden = tree_checkpoint_name(hidden, "hidden")
    return carry + jnp.sin(hidden), hidden.sum()


def _layers(n, d=3, seed=0):
    kw, kb = jax.random.split(jax.random.key(seed))
    return {"w": jax.random.normal(kw, (n, d, d)) * 0.5, "b": jax.random.normal(kb, (n, d))}


INIT, LAYERS = jnp.linspace(-1, 1, 3), _layers(8)


def _losses(scan_fn, fold_fn, reverse):
    """Loss of a scan (carry and outputs) and of a fold, both through the same layers."""

    def scan_loss(init, layers):
        carry, ys = scan_fn(init, layers)
        return carry.sum() + ys.sum()

    def fold_loss(init, layers):
        return fold_fn(init, layers).sum()

    return jax.jit(jax.grad(lambda x, p: scan_loss(x, p) + 0.5 * fold_loss(x, p), argnums=(0, 1)))


def _loop_scan(init, layers, reverse=False):
    carry, outs = init, []
    order = range(layers["w"].shape[0])
    for i in reversed(order) if reverse else order:
        carry, y = _block(carry, jax.tree_util.tree_map(lambda a, i=i: a[i], layers))
        outs.append(y)
    return carry, jnp.stack(outs)


@functools.cache
def _want(reverse):
    loop_fold = lambda x, p: _loop_scan(x, p)[0]
    grads = _losses(functools.partial(_loop_scan, reverse=reverse), loop_fold, reverse)
    return grads(INIT, LAYERS)


def _assert_trees_close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("remat", "reverse"),
    [(p, False) for p in POLICIES] + [(False, True), (True, True), ("nested", True)],
    ids=str,
)
def test_gradients_equal_unrolled_loop(remat, reverse):
    scan_fn = scan(_block, 0, remat=remat, reverse=reverse)
    fold_fn = fold(lambda c, layer: _block(c, layer)[0], 0, remat=remat)
    _assert_trees_close(_losses(scan_fn, fold_fn, reverse)(INIT, LAYERS), _want(reverse))


def _scan_loss(remat):
    def loss(init, layers):
        carry, ys = scan(_block, 0, remat=remat)(init, layers)
        return carry.sum() + ys.sum()

    return loss


def test_aliases():
    assert ScanCheckpointPolicy.from_remat(True) == ScanCheckpointPolicy()
    assert ScanCheckpointPolicy.from_remat("full") == ScanCheckpointPolicy(
        save_carries=True, save_inputs=True
    )
    assert ScanCheckpointPolicy.from_remat(False) == ScanCheckpointPolicy(disable=True)
    assert ScanCheckpointPolicy.from_remat("nested") == ScanCheckpointPolicy(nested=True)
    assert ScanCheckpointPolicy.from_remat("offload") == ScanCheckpointPolicy(
        save_carries="offload", save_inputs="offload"
    )
    assert ScanCheckpointPolicy.from_remat("save_all") == ScanCheckpointPolicy(
        save_carries=True, save_inputs=True, save_block_internals=True
    )
    assert ScanCheckpointPolicy.from_bool_or_str is not None
    policy = ScanCheckpointPolicy(save_block_internals=["y"], offload_block_internals=["z"])
    assert policy.save_block_internals == ("y",) and hash(policy)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"save_carries": "yes"}, "`save_carries` must be True, False or 'offload'"),
        ({"save_inputs": 1.5}, "`save_inputs`"),
        ({"save_block_internals": "y"}, r"Write \['y'\]"),
        ({"offload_block_internals": True}, "`offload_block_internals` must be a list of names"),
        ({"nested": 0}, "`nested` must be"),
        ({"save_block_internals": ["y"], "offload_block_internals": ["y"]}, "in both"),
    ],
)
def test_policy_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScanCheckpointPolicy(**kwargs)


def test_unknown_remat_and_bad_nested():
    with pytest.raises(ValueError, match=r"not a checkpoint policy.*'nested'"):
        scan(_block, 0, remat="sometimes")
    with pytest.raises(ValueError, match="do not divide the scan length 6"):
        jax.eval_shape(
            scan(_block, 0, remat=ScanCheckpointPolicy(nested=4)), jnp.ones(3), _layers(6)
        )


def test_nested_outer_blocks_follow_the_memory_model():
    policy = ScanCheckpointPolicy(nested=True)
    mib = 2**20
    # large carries next to small per-step inputs: nest, about sqrt(N) outer blocks
    assert [policy.outer_blocks(n, mib, mib // 64) for n in (16, 64, 100, 128, 12)] == [
        4,
        8,
        10,
        16,
        4,
    ]
    # a small carry next to large per-layer weights (batch 32 through 256x256 layers):
    # no split keeps less than remat=True, so the scan is not nested
    assert policy.outer_blocks(64, 32 * 256 * 4, mib // 2) is None
    assert policy.outer_blocks(7, mib, 0) is None  # a prime length has no split
    assert policy.outer_blocks(64, 0, mib) is None  # nothing carried, nothing to save
    assert ScanCheckpointPolicy(disable=True, nested=True).outer_blocks(16, mib, 0) is None


def test_explicit_nested_keeps_its_count_whatever_the_sizes():
    policy = ScanCheckpointPolicy(nested=4)
    assert policy.outer_blocks(64, 1, 2**30) == policy.outer_blocks(64) == 4


@pytest.mark.parametrize(("batch", "nests"), [(2, False), (64, True)])
def test_nested_true_never_keeps_more_than_remat_true(batch, nests):
    width, n = 16, 16

    def temp_bytes(remat):
        def loss(layers, x):
            step = lambda c, layer: jnp.tanh(c @ layer["w"] + layer["b"][None]) + c
            return fold(step, 0, remat=remat)(x, layers).sum()

        layers = {
            "w": jax.ShapeDtypeStruct((n, width, width), jnp.float32),
            "b": jax.ShapeDtypeStruct((n, width), jnp.float32),
        }
        x = jax.ShapeDtypeStruct((batch, width), jnp.float32)
        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(layers, x).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    nested, full = temp_bytes("nested"), temp_bytes(True)
    assert nested <= full
    assert (nested < full) is nests


def _count_in_grad(remat, primitive):
    def loss(init, xs):
        def step(c, x):
            y = jnp.sin(c * x)
            y = tree_checkpoint_name(y, "y")
            return jnp.cos(y) + x

        return fold(step, 0, remat=remat)(init, xs).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss))(jnp.ones(3), jnp.ones((4, 3)))
    return str(jaxpr).count(f" {primitive} ")


def test_saving_a_named_internal_avoids_recomputing_it():
    # remat=True recomputes sin in the backward pass; saving "y" keeps it; no remat
    # never recomputes.
    # (the derivative of cos adds one sin to every count)
    saved = _count_in_grad(ScanCheckpointPolicy(save_block_internals=["y"]), "sin")
    assert _count_in_grad(True, "sin") == saved + 1
    assert _count_in_grad(False, "sin") == saved == _count_in_grad("save_all", "sin")


def test_remat_false_adds_no_checkpoint_and_true_one():
    def grad_text(remat):
        return str(jax.make_jaxpr(jax.grad(_scan_loss(remat), argnums=1))(INIT, LAYERS))

    assert "checkpoint" not in grad_text(False) and "remat" not in grad_text(False)
    assert "remat" in grad_text(True) or "checkpoint" in grad_text(True)


OFFLOADING = [
    "offload",
    ScanCheckpointPolicy(save_carries="offload"),
    ScanCheckpointPolicy(save_inputs="offload"),
    ScanCheckpointPolicy(save_block_internals=["hidden"], offload_block_internals=["other"]),
    ScanCheckpointPolicy(save_block_internals=True, save_carries="offload"),
]


@pytest.mark.parametrize("remat", OFFLOADING, ids=str)
def test_offload_works_or_says_the_device_cannot(remat):
    scan_fn = scan(_block, 0, remat=remat)
    fold_fn = fold(lambda c, layer: _block(c, layer)[0], 0, remat=remat)
    run = _losses(scan_fn, fold_fn, False)
    if jax.devices()[0].platform == "cpu":
        with pytest.raises(OffloadUnavailableError, match=r"cannot offload.*host memory"):
            jax.eval_shape(run, INIT, LAYERS)
    else:
        _assert_trees_close(run(INIT, LAYERS), _want(False))


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(
    length=st.integers(1, 9),
    width=st.integers(1, 4),
    reverse=st.booleans(),
    remat=st.sampled_from([False, True, "nested", "save_all"]),
    seed=st.integers(0, 2**16),
)
def test_scan_equals_python_loop(length, width, reverse, remat, seed):
    xs = jax.random.normal(jax.random.key(seed), (length, width))
    step = lambda c, x: (c * 0.5 + jnp.cos(x), c.sum() + x)
    carry, ys = scan(step, 0, remat=remat, reverse=reverse)(jnp.zeros(width), xs)
    want_c, want_ys = jnp.zeros(width), [None] * length
    for i in reversed(range(length)) if reverse else range(length):
        want_c, want_ys[i] = step(want_c, xs[i])
    np.testing.assert_allclose(carry, want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys, jnp.stack(want_ys), rtol=1e-5, atol=1e-6)


def test_simple_is_a_plain_checkpoint_and_recompute_an_alias():
    simple = ScanCheckpointPolicy(simple=True)
    assert simple.jax_policy() is None and simple.checkpoint(_block) is not _block
    assert ScanCheckpointPolicy(simple=True, nested=2).outer_blocks(8) == 2
    assert ScanCheckpointPolicy.from_remat("recompute") == ScanCheckpointPolicy(
        save_carries=False, save_inputs=False
    )
    _assert_trees_close(
        _losses(scan(_block, 0, remat=simple), fold(lambda c, p: _block(c, p)[0], 0), False)(
            INIT, LAYERS
        ),
        _want(False),
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"save_block_internals": ["y"]},
        {"save_block_internals": True},
        {"offload_block_internals": ["y"]},
        {"save_carries": "offload"},
        {"disable": True},
    ],
    ids=str,
)
def test_simple_refuses_what_it_would_ignore(kwargs):
    with pytest.raises(ValueError, match=r"`simple=True` keeps only each block's inputs"):
        ScanCheckpointPolicy(simple=True, **kwargs)


def _forward_residual_shapes(remat):
    """Shapes a scan's forward pass stacks for the backward pass (after the final carry)."""

    def step(carry, w):
        y = tree_checkpoint_name(jnp.sin(carry + w), "sin")
        y = tree_checkpoint_name(jnp.cos(y + carry), "cos")
        return y + carry

    loss = lambda xs: fold(step, 0, remat=remat)(jnp.ones(5), xs).sum()
    jaxpr = jax.make_jaxpr(jax.grad(loss))(jnp.ones((4, 5)))
    forward = next(e for e in jaxpr.jaxpr.eqns if e.primitive is jax.lax.scan_p)
    return [v.aval.shape for v in forward.outvars][1:]


@pytest.mark.parametrize(
    ("remat", "kept"),
    [
        (False, [(4, 5), (4, 5)]),  # the two internals the derivative needs
        (True, [(4, 5)]),  # the carries
        (ScanCheckpointPolicy(simple=True), [(4, 5)]),
        (ScanCheckpointPolicy(save_block_internals=["sin"]), [(4, 5), (4, 5)]),
        (ScanCheckpointPolicy(save_block_internals=["cos"]), [(4, 5)]),  # not needed: dropped
        (ScanCheckpointPolicy(simple=True, nested=2), [(2, 5)]),  # the outer carries only
    ],
    ids=str,
)
def test_what_each_policy_keeps_for_the_backward_pass(remat, kept):
    assert _forward_residual_shapes(remat) == kept
