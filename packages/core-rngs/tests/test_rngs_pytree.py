"""Rngs and streams as pytrees and Python objects: `split`/`broadcast` with Flax 0.12's
meaning, plain `jax.jit`, copies and pickles, and the error for a stream used from the
closure of a trace it does not belong to."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_rngs import Rngs, RngStream, RngTraceError
from bryo_rngs._variables import PickledKey


def _same_key(a: jax.Array, b: jax.Array) -> bool:
    return bool(np.array_equal(jax.random.key_data(a), jax.random.key_data(b)))


def test_split_by_filter_mapping():
    rngs = Rngs(params=1, dropout=2, noise=3)
    split = rngs.split({"params": 5, "dropout": None, ...: (2, 5)})
    assert split.params.key.shape == (5,) and split.params.count.shape == (5,)
    assert split.dropout.key.shape == () and split.noise.key.shape == (2, 5)
    assert int(rngs.params.count.value) == 1 and int(rngs.dropout.count.value) == 0
    assert _same_key(split.dropout.key.value, rngs.dropout.key.value)
    assert split.dropout is not rngs.dropout
    assert Rngs(0).split(3).default.key.shape == (3,)


def test_broadcast_repeats_one_key():
    rngs = Rngs(0, other=1).broadcast({"default": 4, ...: None})
    keys = rngs.default.key.value
    assert keys.shape == (4,) and _same_key(keys[0], keys[3])
    assert rngs.other.key.shape == ()
    stream = RngStream(0, tag="s")
    assert stream.broadcast((2, 3)).key.shape == (2, 3) and int(stream.count.value) == 1
    assert stream.split(2).key.shape == (2,) and int(stream.count.value) == 2


@pytest.mark.parametrize("bad", [0, -1, (2, 0), None, 1.5])
def test_bad_split_shapes_name_the_stream(bad):
    with pytest.raises(ValueError, match="rng stream 'params'"):
        RngStream(0, tag="params").split(bad)


def test_rngs_are_pytrees_under_plain_jit():
    rngs = Rngs(0, dropout=1)
    assert len(jax.tree.leaves(rngs)) == 4  # a key and a count per stream
    key, after = jax.jit(lambda r: (r.dropout(), r))(rngs)
    assert _same_key(key, Rngs(0, dropout=1).dropout())
    assert int(after.dropout.count.value) == 1 and int(rngs.dropout.count.value) == 0


def test_a_stream_from_an_outer_trace_raises_at_the_call_and_stays_intact():
    rngs = Rngs(0)

    @jax.jit
    def noisy(x):
        return x + jax.random.normal(rngs(), x.shape)

    with pytest.raises(RngTraceError, match="belongs to another JAX trace"):
        noisy(jnp.zeros(2))
    assert int(rngs.default.count.value) == 0 and not isinstance(
        rngs.default.count.value, jax.core.Tracer
    )
    rngs()  # still usable eagerly
    assert int(rngs.default.count.value) == 1
    with pytest.raises(RngTraceError):
        jax.vmap(lambda x: x + jax.random.normal(rngs.fork()(), ()))(jnp.zeros(2))


def test_a_stream_made_inside_a_returned_jit_refuses_draws_after_it():
    """An `Rngs` made inside `jax.jit` and kept past the call holds that trace's tracers:
    drawing from it afterwards raises bryo's error (Flax's), not JAX's leaked tracer."""
    kept = []

    @jax.jit
    def make() -> None:
        kept.append(Rngs(1))

    make()
    with pytest.raises(RngTraceError, match="Cannot mutate RngCount from a different trace"):
        kept[0].params()
    with pytest.raises(RngTraceError):
        kept[0].params.split(2)


def test_a_key_pickles_as_its_data_and_impl():
    rngs = Rngs(jax.random.key(5, impl="rbg"))
    state = rngs.default.key.__getstate__()
    assert isinstance(state["raw_value"], PickledKey) and state["raw_value"].impl == "rbg"
    twin = pickle.loads(pickle.dumps(rngs))
    assert _same_key(twin.default.key.value, rngs.default.key.value)
    assert jax.random.key_impl(twin.default.key.value) == jax.random.key_impl(
        rngs.default.key.value
    )
    with jax.transfer_guard_host_to_device("disallow"):  # a deep copy stays on the device
        copied = copy.deepcopy(rngs.default.key)
    assert copied.value is not rngs.default.key.value
    assert _same_key(copied.value, rngs.default.key.value)
    assert copied.metadata == rngs.default.key.metadata


def test_copies_and_pickles_continue_the_stream():
    reference = Rngs(params=3)
    reference.params()
    second = reference.params()
    rngs = Rngs(0, params=3)
    rngs.params()
    for twin in (copy.deepcopy(rngs), pickle.loads(pickle.dumps(rngs)), copy.copy(rngs)):
        assert twin is not rngs and _same_key(twin.params(), second)
    assert int(rngs.params.count.value) == 2  # the shallow copy shares the streams


@pytest.mark.parametrize("keywords", [{"graph_updates": False}, {"graph": False}])
def test_split_and_fork_rngs_on_copies(keywords):
    from bryo_rngs import fork_rngs, split_rngs

    rngs = Rngs(params=0, dropout=1)
    split = split_rngs(rngs, splits=5, only="params", **keywords)
    assert split.params.key.shape == (5,) and split.dropout.key.shape == ()
    assert rngs.params.key.shape == () and split is not rngs
    forked = fork_rngs(rngs, **keywords)
    assert forked.params.key.shape == () and not _same_key(
        forked.params.key.value, rngs.params.key.value
    )

    @split_rngs(splits=3, **keywords)
    def shapes(r):
        return r.params.key.shape

    assert shapes(rngs) == (3,) and rngs.params.key.shape == ()


def test_split_rngs_squeeze_needs_one_split():
    from bryo_rngs import split_rngs

    rngs = Rngs(0)
    squeezed = split_rngs(rngs, splits=1, squeeze=True, graph_updates=False)
    assert squeezed.default.key.shape == ()
    with pytest.raises(ValueError, match="`squeeze=True` needs `splits=1`"):
        split_rngs(rngs, splits=2, squeeze=True)
