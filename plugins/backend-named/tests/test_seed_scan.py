"""Seed 003's scan/fold/map examples, run on bryo_named + bryo_scan (the `bryo.hax` facade
is assembled from these packages; here a namespace stands in for it)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.random import PRNGKey

import bryo_named
import bryo_scan
from bryo_named import Axis, AxisError
from bryo_scan import OffloadUnavailableError, ScanAxisError, ScanCheckpointPolicy

hax = types.SimpleNamespace(
    **{name: getattr(bryo_named, name) for name in dir(bryo_named) if not name.startswith("_")},
    scan=bryo_scan.scan,
    fold=bryo_scan.fold,
    map=bryo_scan.map,
    ScanCheckpointPolicy=ScanCheckpointPolicy,
)

data = hax.random.normal(PRNGKey(0), {"Time": 100, "Features": 16})


def running_stats_scan(state, x):
    count, mean, min_val, max_val = state
    count += 1
    delta = x - mean
    mean = mean + delta / count
    min_val = hax.minimum(min_val, x)
    max_val = hax.maximum(max_val, x)
    return (count, mean, min_val, max_val), mean


def running_stats(state, x):
    return running_stats_scan(state, x)[0]


def init_state():
    return (
        0.0,
        hax.zeros({"Features": 16}),
        hax.full({"Features": 16}, float("inf")),
        hax.full({"Features": 16}, float("-inf")),
    )


def _check_stats(final_state, xs):
    count, mean, min_val, max_val = final_state
    assert float(count) == 100.0
    np.testing.assert_allclose(mean.array, xs.mean("Time").array, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(min_val.array, xs.min("Time").array)
    np.testing.assert_allclose(max_val.array, xs.max("Time").array)
    assert mean.axes == (Axis("Features", 16),)


def test_scan_running_stats():
    final_state, running_means = hax.scan(running_stats_scan, "Time")(init_state(), data)
    _check_stats(final_state, data)
    assert running_means.shape == {"Time": 100, "Features": 16}
    np.testing.assert_allclose(running_means["Time", 0].array, data["Time", 0].array, rtol=1e-6)
    np.testing.assert_allclose(running_means["Time", 99].array, final_state[1].array)


def test_fold_running_stats():
    _check_stats(hax.fold(running_stats, "Time")(init_state(), data), data)


def simulate_brownian_motion(state, _):
    return state + hax.random.normal(PRNGKey(0), {"Features": 16}), state


def test_brownian_motion_with_no_inputs():
    init = hax.zeros({"Features": 16})
    final_state, path = hax.scan(simulate_brownian_motion, Axis("Time", 100))(init, None)
    assert path.shape == {"Time": 100, "Features": 16}
    step = hax.random.normal(PRNGKey(0), {"Features": 16})
    np.testing.assert_allclose(final_state.array, 100 * step.array, rtol=1e-4)
    np.testing.assert_allclose(path["Time", 3].array, 3 * step.array, rtol=1e-5)


def test_brownian_motion_with_a_bare_name():
    init = hax.zeros({"Features": 16})
    with pytest.raises(ScanAxisError, match=r"how many steps.*Axis\('Time', 100\).*axis_sizes"):
        hax.scan(simulate_brownian_motion, "Time")(init, None)
    with hax.axis_sizes(Time=100):  # the seed's exact call, once "Time" has a size
        _, path = hax.scan(simulate_brownian_motion, "Time")(init, None)
    assert path.shape == {"Time": 100, "Features": 16}


def test_map():
    xs = hax.random.normal(PRNGKey(0), {"Time": 100})

    def my_fn(x):
        return x + 1

    result = hax.map(my_fn, "Time")(xs)
    assert result.axes == xs.axes
    np.testing.assert_allclose(result.array, xs.array + 1)


def _loop_stats_loss(xs):
    state = init_state()
    for t in range(xs.axis_size("Time")):
        state = running_stats(state, xs["Time", t])
    return _stats_loss(state)


def _stats_loss(state):
    count, mean, min_val, max_val = state
    return (hax.sin(mean) * max_val - min_val).sum().array / count


REMATS = [
    False,
    True,
    "full",
    "nested",
    "save_all",
    ScanCheckpointPolicy(nested=4),
    ScanCheckpointPolicy(save_carries=True, save_inputs=True, save_block_internals=False),
]


@pytest.fixture(scope="module")
def loop_grad():
    small = data["Time", 0:20]
    return small, jax.jit(jax.grad(_loop_stats_loss))(small)


@pytest.mark.parametrize("remat", REMATS, ids=str)
def test_every_remat_form_matches_the_loop(remat, loop_grad):
    small, want = loop_grad
    loss = lambda xs: _stats_loss(hax.fold(running_stats, "Time", remat=remat)(init_state(), xs))
    value, grad = jax.jit(jax.value_and_grad(loss))(small)
    np.testing.assert_allclose(value, _loop_stats_loss(small), rtol=1e-5)
    assert grad.axes == small.axes
    np.testing.assert_allclose(grad.array, want.array, rtol=1e-4, atol=1e-6)


def test_offload_on_this_device():
    run = hax.fold(running_stats, "Time", remat="offload")
    if jax.devices()[0].platform == "cpu":
        with pytest.raises(OffloadUnavailableError, match="cannot offload"):
            jax.eval_shape(jax.grad(lambda xs: _stats_loss(run(init_state(), xs))), data)
    else:
        _check_stats(run(init_state(), data), data)


def my_complex_fn(state, x):
    y = x + state
    y = hax.sin(y) + x
    y = hax.tree_checkpoint_name(y, "y")
    y = hax.cos(y) + x
    y = hax.tree_checkpoint_name(y, "z")
    return y


def test_save_block_internals_policy():
    Time = Axis("Time", 100)
    policy = ScanCheckpointPolicy(save_carries=True, save_block_internals=["y"])
    init = hax.zeros({"Features": 16})
    final_state = hax.fold(my_complex_fn, Time, remat=policy)(init, data)
    want = init
    for t in range(100):
        want = my_complex_fn(want, data["Time", t])
    np.testing.assert_allclose(final_state.array, want.array, rtol=1e-4, atol=1e-5)

    def grad_jaxpr(remat):
        loss = lambda xs: hax.fold(my_complex_fn, Time, remat=remat)(init, xs).sum().array
        return str(jax.make_jaxpr(jax.grad(loss))(data))

    # saving "y" spares the backward pass one `sin` per block compared with remat=True
    assert grad_jaxpr(policy).count(" sin ") == grad_jaxpr(True).count(" sin ") - 1
    grads = [
        jax.grad(lambda xs, r=r: hax.fold(my_complex_fn, Time, remat=r)(init, xs).sum().array)(data)
        for r in (policy, False)
    ]
    np.testing.assert_allclose(grads[0].array, grads[1].array, rtol=1e-4, atol=1e-5)
    offload = ScanCheckpointPolicy(
        save_carries=True, save_block_internals=["y"], offload_block_internals=["z"]
    )
    assert offload.offload_block_internals == ("z",)


def test_named_scan_errors():
    with pytest.raises(
        ScanAxisError,
        match=r"axis 'Batch' is missing from every input of `scan` \(x is a NamedArray with axes "
        r"\{'Time': 100, 'Features': 16\}\)",
    ):
        hax.fold(running_stats, "Batch")(init_state(), data)
    with pytest.raises(
        ScanAxisError,
        match=r"x has axis 'Time' of size 100 \(NamedArray with axes \{'Time': 100, "
        r"'Features': 16\}\)\. The size of axis 'Time' \(size 50\) comes from the axis spec",
    ):
        hax.fold(running_stats, Axis("Time", 50))(init_state(), data)
    other = hax.zeros({"Time": 10, "Features": 16})
    with pytest.raises(
        ScanAxisError, match=r"b has axis 'Time' of size 10 .* first scanned input: a"
    ):
        hax.fold(lambda c, a, b: c, "Time")(0.0, data, other)
    with pytest.raises(AxisError, match="needs a name"):
        hax.scan(lambda c, x: (c, x), 0)(0.0, data)
    with pytest.raises(AxisError, match="'Time' appears twice"):
        hax.scan(lambda c, x: (c, data), "Time")(0.0, data)


def test_plain_arrays_scan_over_their_first_axis_next_to_named_ones():
    total = hax.fold(lambda c, x, t: c + x * t, "Time")(
        hax.zeros({"Features": 16}), data, jnp.arange(100.0)
    )
    np.testing.assert_allclose(
        total.array, (data.array * jnp.arange(100.0)[:, None]).sum(0), rtol=1e-4, atol=1e-4
    )
