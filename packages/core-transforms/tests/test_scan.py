"""The graph-level `scan`, and `split_rngs`/`fork_rngs` around the transforms.

Modules are plain `bryo_graph.Object`s; rng streams come from `bryo_rngs`. Three traps of
the anchor each have a test: one key reused across a vmapped batch, split keys restored
on exit breaking a later scan, and streams left out of a split replaying their keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_graph import Intermediate, Object, Param, Variable
from bryo_rngs import Rngs, fork_rngs, split_rngs
from bryo_scan import ScanCheckpointPolicy
from bryo_transforms import Carry, StateAxes, TransformError, grad, jit, scan, vmap


class Count(Variable):
    pass


class Layer(Object):
    def __init__(self, seed: jax.Array | int) -> None:
        self.w = Param(jax.random.normal(jax.random.key(seed), (2, 2)) * 0.5)
        self.calls = Count(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.value += 1
        return jnp.tanh(x @ self.w)


@vmap(in_axes=0, out_axes=0)
def make_stack(seed: jax.Array) -> Layer:
    return Layer(seed)


@scan(in_axes=(Carry, 0), out_axes=Carry)
def run_stack(x: jax.Array, layer: Layer) -> jax.Array:
    return layer(x)


def unrolled(x: jax.Array, weights: jax.Array) -> jax.Array:
    for w in weights:
        x = jnp.tanh(x @ w)
    return x


X = jnp.ones((3, 2))


def test_scan_over_a_stack_of_layers_matches_the_loop() -> None:
    stack = make_stack(jnp.arange(4))
    weights = stack.w.value
    np.testing.assert_allclose(run_stack(X, stack), unrolled(X, weights), rtol=1e-6)
    np.testing.assert_array_equal(stack.calls.value, [1, 1, 1, 1])  # scanned state, restacked
    run_stack(X, stack)
    np.testing.assert_array_equal(stack.calls.value, [2, 2, 2, 2])


def test_scan_state_axes_mix_scanned_and_carried_parts() -> None:
    layer = Layer(0)
    layer.w = Param(jnp.stack([jnp.eye(2) * (i + 1) for i in range(3)]))

    @scan(in_axes=(StateAxes({Param: 0, ...: Carry}), Carry), out_axes=(Carry, 0))
    def apply(layer: Layer, x: jax.Array) -> tuple:
        layer.calls.value += 1
        y = x @ layer.w.value
        return y, y.sum()

    y, sums = apply(layer, jnp.ones(2))
    np.testing.assert_allclose(y, [6.0, 6.0])
    np.testing.assert_allclose(sums, [2.0, 4.0, 12.0])
    assert int(layer.calls.value) == 3  # carried, not stacked


def test_scan_builds_a_stack_of_new_modules() -> None:
    @scan(in_axes=(0,), out_axes=0)
    def make(seed: jax.Array) -> Layer:
        return Layer(seed.astype(jnp.uint32))

    made = make(jnp.arange(4))
    assert isinstance(made, Layer)
    assert made.w.value.shape == (4, 2, 2) and made.calls.value.shape == (4,)
    np.testing.assert_allclose(made.w.value, make_stack(jnp.arange(4)).w.value, rtol=1e-6)


@settings(max_examples=4, deadline=None)
@given(layers=st.integers(1, 5), batch=st.integers(1, 3))
def test_scan_equals_the_python_loop_for_any_depth(layers: int, batch: int) -> None:
    stack = make_stack(jnp.arange(layers))
    x = jnp.linspace(-1, 1, batch * 2).reshape(batch, 2)
    np.testing.assert_allclose(run_stack(x, stack), unrolled(x, stack.w.value), rtol=1e-5)
    np.testing.assert_array_equal(stack.calls.value, np.ones(layers))


class Cell(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.eye(2) * 0.5)
        self.steps = Count(jnp.array(0))
        self.last = Variable(jnp.zeros(2), tag="broadcast")

    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(h @ self.w + x)
        self.steps.value += 1
        self.last.value = h
        return h, h * 2


CELL_AXES = StateAxes({"broadcast": None, ...: Carry})


@scan(in_axes=(CELL_AXES, Carry, 1), out_axes=(Carry, 1))
def rnn(cell: Cell, h: jax.Array, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    return cell(h, xs)


def reference_rnn(h: jax.Array, xs: jax.Array, reverse: bool = False) -> tuple:
    ys = []
    steps = range(xs.shape[1])
    for t in reversed(steps) if reverse else steps:
        h = jnp.tanh(h @ (jnp.eye(2) * 0.5) + xs[:, t])
        ys.append(h * 2)
    if reverse:
        ys.reverse()
    return h, jnp.stack(ys, axis=1)


def test_scan_carry_state_axes_and_out_axes() -> None:
    cell, h0, xs = Cell(), jnp.zeros((3, 2)), jnp.linspace(0, 1, 3 * 5 * 2).reshape(3, 5, 2)
    h, ys = rnn(cell, h0, xs)
    h_ref, ys_ref = reference_rnn(h0, xs)
    np.testing.assert_allclose(h, h_ref, rtol=1e-6)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-6)
    assert ys.shape == (3, 5, 2)
    assert int(cell.steps.value) == 5  # carried through the steps
    np.testing.assert_allclose(cell.last.value, h_ref, rtol=1e-6)  # broadcast: the last step's


def test_scan_reverse_and_inside_jit() -> None:
    cell, h0, xs = Cell(), jnp.zeros((3, 2)), jnp.linspace(0, 1, 3 * 4 * 2).reshape(3, 4, 2)
    reverse_rnn = scan(
        rnn.__wrapped__, in_axes=(CELL_AXES, Carry, 1), out_axes=(Carry, 1), reverse=True
    )
    h, ys = jit(reverse_rnn)(cell, h0, xs)
    h_ref, ys_ref = reference_rnn(h0, xs, reverse=True)
    np.testing.assert_allclose(h, h_ref, rtol=1e-6)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-6)
    np.testing.assert_allclose(cell.last.value, h_ref, rtol=1e-6)
    assert int(cell.steps.value) == 4


def test_scan_with_length_and_no_scanned_input() -> None:
    counter = {"n": Count(jnp.array(0))}

    @scan(in_axes=(Carry,), out_axes=(Carry, 0), length=6)
    def count(graph: dict) -> tuple[dict, jax.Array]:
        graph["n"].value += 1
        return graph, graph["n"].value

    same, ys = count(counter)
    assert same["n"] is counter["n"]  # the dict is a pytree; the Variable is the caller's
    np.testing.assert_array_equal(ys, np.arange(1, 7))
    assert int(counter["n"].value) == 6


def test_state_added_in_the_body_is_stacked_along_its_state_axes_axis() -> None:
    stack = make_stack(jnp.arange(3))

    @scan(in_axes=(StateAxes({(Param, Intermediate): 0, ...: None}), Carry), out_axes=Carry)
    def forward(layer: Layer, x: jax.Array) -> jax.Array:
        y = x @ layer.w.value
        layer.seen = Intermediate(y)  # as `sow` does
        return y

    forward(stack, jnp.ones(2))
    assert stack.seen.value.shape == (3, 2)
    forward(stack, jnp.ones(2))  # replaced by the next call's, stacked again
    assert stack.seen.value.shape == (3, 2)


def test_scan_with_the_whole_argument_as_carry_and_keyword_arguments() -> None:
    counter = Layer(0)

    @scan(in_axes=Carry, out_axes=Carry, length=3)
    def count(layer: Layer) -> Layer:
        layer.calls.value += 1
        return layer

    assert count(counter) is counter and int(counter.calls.value) == 3

    @scan(in_axes=(Carry, 0), out_axes=(Carry, 0))
    def cumsum(total: jax.Array, x: jax.Array) -> tuple:
        return total + x, total + x

    total, sums = cumsum(jnp.zeros(()), x=jnp.arange(4.0))  # `x` takes in_axes[1]
    assert float(total) == 6.0 and sums.tolist() == [0.0, 1.0, 3.0, 6.0]


@pytest.mark.parametrize("remat", [True, "nested", ScanCheckpointPolicy(save_block_internals=True)])
def test_scan_checkpoint_policies_keep_gradients(remat: object) -> None:
    stack = make_stack(jnp.arange(4))

    def loss(stack: Layer, scanned: object) -> jax.Array:
        return (scanned(X, stack) ** 2).sum()

    plain = grad(lambda s: loss(s, run_stack))(stack)
    pure = jax.grad(lambda w: (unrolled(X, w) ** 2).sum())(stack.w.value)
    np.testing.assert_allclose(plain["w"].value, pure, rtol=1e-5)
    checkpointed_scan = scan(run_stack.__wrapped__, in_axes=(Carry, 0), out_axes=Carry, remat=remat)
    checkpointed = grad(lambda s: loss(s, checkpointed_scan))(stack)
    np.testing.assert_allclose(checkpointed["w"].value, plain["w"].value, rtol=1e-5)


def test_scan_errors() -> None:
    cell = Cell()
    with pytest.raises(TransformError, match="If one of in_axes or out_axes has Carry"):
        scan(lambda c, x: c(x, x), in_axes=(Carry, 0), out_axes=0)  # refused when made
    with pytest.raises(TransformError, match="Found multiple Carry definitions"):
        scan(lambda a, b: (a, b), in_axes=(Carry, Carry), out_axes=(Carry, 0))
    with pytest.raises(TransformError, match="in_axes=Carry, the function must take exactly one"):
        scan(lambda c, x: c, in_axes=Carry, out_axes=Carry, length=2)(jnp.zeros(2), 1)
    with pytest.raises(TransformError, match="nothing to scan over"):
        scan(lambda c: (c, None), in_axes=(Carry,), out_axes=(Carry, 0))(jnp.zeros(2))

    def grows(cell: Cell, x: jax.Array) -> tuple:
        cell.extra = Param(x)
        return cell, x

    with pytest.raises(TransformError, match="added a Param at extra to an argument whose"):
        scan(grows, in_axes=(Carry, 0), out_axes=(Carry, 0))(cell, jnp.ones((3, 2)))

    def reshapes(h: jax.Array, x: jax.Array) -> tuple:
        return (h, h), x

    with pytest.raises(TransformError, match="keep its structure"):
        scan(reshapes, in_axes=(Carry, 0), out_axes=(Carry, 0))(jnp.zeros(2), jnp.ones((3, 2)))
    with pytest.raises(TransformError, match=r"size 2, but the array argument #1 has 3"):
        scan(lambda h, a, b: (h, a + b), in_axes=(Carry, 0, 0), out_axes=(Carry, 0))(
            jnp.zeros(()), jnp.ones(3), jnp.ones(2)
        )
    assert int(cell.steps.value) == 0 and not hasattr(cell, "extra")


def test_out_axes_never_broadcast_an_output() -> None:
    with pytest.raises(TransformError, match=r"Cannot broadcast output state.*at: out_axes\[1\]"):
        scan(lambda c, x: (c, x), in_axes=(Carry, 0), out_axes=(Carry, None))
    with pytest.raises(TransformError, match=r"Cannot broadcast output state.*at: out_axes\."):
        scan(lambda x: x, in_axes=0, out_axes=None)
    with pytest.raises(TransformError, match=r"broadcast output state. Got StateAxes\(\{\.\.\."):
        scan(lambda c, x: (c, x), out_axes=(Carry, StateAxes({...: None})))
    with pytest.raises(TransformError, match=r"Cannot carry output state.*out_axes\[1\]\[0\]"):
        scan(lambda c, x: (c, x), out_axes=(Carry, (StateAxes({Param: 0, ...: Carry}),)))


@pytest.mark.parametrize("modes", [{"graph_updates": False}, {"graph": False}])
def test_simple_mode_threads_a_changed_broadcast_variable_through_the_steps(modes) -> None:
    seen = Variable(jnp.array(1))

    @scan(in_axes=(None, Carry, 0), out_axes=(Carry, 0), **modes)
    def step(seen: Variable, carry: jax.Array, x: jax.Array) -> tuple:
        seen.value = seen.value + 1  # the next step sees this value
        return carry + x, seen.value

    carry, ys = step(seen, jnp.array(0), jnp.arange(3))
    assert int(seen.value) == 4 and int(carry) == 3
    np.testing.assert_array_equal(ys, [2, 3, 4])


class Pair(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.array(1.0))
        self.b = Param(jnp.array(2.0))


def test_a_new_variable_in_place_of_a_carried_one_is_carried() -> None:
    pair = Pair()
    old = pair.w

    @scan(in_axes=(Carry, 0), out_axes=(Carry, 0))
    def step(pair: Pair, x: jax.Array) -> tuple:
        pair.w = Param(pair.w.value + x)
        return pair, pair.w.value

    same, ys = step(pair, jnp.arange(3.0))
    assert same is pair and pair.w is not old  # the caller's module holds the new Param
    assert float(pair.w.value) == 4.0 and float(old.value) == 1.0
    np.testing.assert_array_equal(ys, [1.0, 2.0, 4.0])


def test_carried_variables_keep_their_structure() -> None:
    def replace(pair: Pair, x: jax.Array) -> tuple:
        pair.w = Param(pair.w.value + x)
        return pair, x

    def retype(pair: Pair, x: jax.Array) -> tuple:
        pair.w = Count(pair.w.value)
        return pair, x

    def reshape(pair: Pair, x: jax.Array) -> tuple:
        pair.w = Param(jnp.ones(2))
        return pair, x

    def delete(pair: Pair, x: jax.Array) -> tuple:
        del pair.b
        return pair, x

    pair, xs, axes = Pair(), jnp.arange(3.0), {"in_axes": (Carry, 0), "out_axes": (Carry, 0)}
    with pytest.raises(TransformError, match=r"identity must be preserved.*Param `args\[0\]` at w"):
        scan(replace, graph_updates=False, **axes)(pair, xs)
    with pytest.raises(TransformError, match=r"replaced the carried Param .* with a Count"):
        scan(retype, **axes)(pair, xs)
    with pytest.raises(TransformError, match=r"float32\[\]\) with a Param \(float32\[2\]\)"):
        scan(reshape, **axes)(pair, xs)
    for modes in ({}, {"graph_updates": False}):
        with pytest.raises(TransformError, match=r"removed the carried Param `args\[0\]` at b"):
            scan(delete, **modes, **axes)(pair, xs)
    with pytest.raises(
        TransformError, match=r"Carry references must be the same.*at carry, a Pair"
    ):
        scan(lambda p, x: (Pair(), x), **axes)(pair, xs)
    with pytest.raises(TransformError, match=r"scan Variable identity must be preserved.*at carry"):
        scan(lambda w, x: (Param(w.value + x), x), graph_updates=False, **axes)(pair.w, xs)
    with pytest.raises(ValueError, match=r"Duplicate Param[\s\S]*`scan` with graph_updates"):
        scan(lambda w, x: (w, w), graph_updates=False, **axes)(pair.w, xs)  # w is stacked
    assert float(pair.w.value) == 1.0 and float(pair.b.value) == 2.0  # left unchanged


# Rng streams through vmap and scan --------------------------------------------------


class Noise(Object):
    """Adds noise from a stream forked at construction (implicit rng state)."""

    def __init__(self, rngs: Rngs) -> None:
        self.rngs = rngs["dropout"].fork()
        self.scale = Param(jnp.ones(()))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.scale.value * jax.random.normal(self.rngs(), x.shape)


class Sampler(Object):
    def __init__(self, rngs: Rngs) -> None:
        self.noise = Noise(rngs)
        self.params = rngs  # keeps the Rngs itself: its 'params' stream is drawn at call

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.noise(x) + jax.random.uniform(self.params.params(), ())


DROPOUT_AXES = StateAxes({"dropout": 0, ...: None})


@fork_rngs(split={"dropout": 5})
@vmap(in_axes=(DROPOUT_AXES, None), out_axes=0)
def sample(model: Noise, x: jax.Array) -> jax.Array:
    return model(x)


def test_trap_a_each_batch_element_draws_its_own_key() -> None:
    model = Noise(Rngs(dropout=0))
    first = sample(model, jnp.zeros(3))
    assert first.shape == (5, 3)
    assert len({tuple(np.asarray(row).round(6)) for row in first}) == 5  # five masks
    second = sample(model, jnp.zeros(3))
    assert not np.allclose(first, second)  # and new ones on the next call
    assert model.rngs.key.value.shape == ()  # the stream is back in one piece
    assert int(model.rngs.count.value) == 2  # one fork draw per call


def test_trap_b_layers_built_under_a_split_survive_the_restore() -> None:
    rngs = Rngs(params=0, dropout=1)

    @split_rngs(splits=4)
    @vmap(in_axes=(0,), out_axes=0)
    def create(rngs: Rngs) -> Noise:
        return Noise(rngs)

    stack = create(rngs)
    assert rngs.dropout.key.value.shape == ()  # the caller's streams are restored
    assert stack.rngs.key.value.shape == (4,)  # the layers keep their own split streams

    @scan(in_axes=(Carry, 0), out_axes=(Carry, 0))
    def apply_all(x: jax.Array, layer: Noise) -> tuple:
        y = layer(x)
        return y, y

    _, ys = apply_all(jnp.zeros(2), stack)
    steps = np.diff(np.asarray(ys), axis=0, prepend=0.0)
    assert len({tuple(step.round(6)) for step in steps}) == 4  # each layer its own noise
    np.testing.assert_array_equal(stack.rngs.count.value, [1, 1, 1, 1])


def test_trap_c_streams_left_out_of_a_split_keep_counting() -> None:
    model = Sampler(Rngs(params=0, dropout=1))

    @split_rngs(splits={"dropout": 3})
    @vmap(in_axes=(DROPOUT_AXES, None), out_axes=0)
    def run(model: Sampler, x: jax.Array) -> jax.Array:
        return model(x)

    params_count = int(model.params.params.count.value)
    first, second = run(model, jnp.zeros(2)), run(model, jnp.zeros(2))
    assert int(model.params.params.count.value) == params_count + 2  # drawn, not restarted
    assert not np.allclose(first, second)  # no key replayed


def test_recurrent_dropout_style_broadcast_stream() -> None:
    class Drop(Object):
        def __init__(self) -> None:
            self.rngs = Rngs(recurrent=3).recurrent.fork()
            self.steps = Count(jnp.array(0))

        def __call__(self, h: jax.Array, x: jax.Array) -> tuple:
            mask = jax.random.bernoulli(self.rngs(), 0.5, h.shape)
            self.steps.value += 1
            return h, mask

    axes = StateAxes({"recurrent": None, ...: Carry})
    run = jit(scan(lambda c, h, x: c(h, x), in_axes=(axes, Carry, 0), out_axes=(Carry, 0)))
    drop = Drop()
    _, masks = run(drop, jnp.ones(8), jnp.ones((6, 8)))
    assert all(np.array_equal(masks[0], m) for m in masks)  # one mask for every step
    assert int(drop.steps.value) == 6 and int(drop.rngs.count.value) == 1
    _, again = run(drop, jnp.ones(8), jnp.ones((6, 8)))
    assert not np.array_equal(masks[0], again[0])  # the next call draws a new mask


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}, {"graph": False}])
def test_scan_takes_a_module_shaped_prefix_as_in_axes(modes) -> None:
    from bryo_filters import PathContains
    from bryo_transforms import prefix

    class Shifted(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.arange(3.0))  # one weight per step
            self.shift = Param(jnp.array(10.0))  # the same at every step

    model = Shifted()
    axes = prefix(model, {PathContains("w"): 0, ...: None})

    @scan(in_axes=(axes, Carry), out_axes=Carry, **modes)
    def total(m: Shifted, x: jax.Array) -> jax.Array:
        return x + m.w[...] + m.shift[...]

    assert float(total(model, jnp.array(0.0))) == 0 + 1 + 2 + 3 * 10
    assert model.w[...].shape == (3,)  # the caller's model is left as it was


def test_a_module_shaped_prefix_holding_a_non_axis_names_the_path() -> None:
    from bryo_transforms import prefix

    model = Layer(0)
    axes = prefix(model, lambda path, leaf: "zero" if path == ("w",) else None)
    with pytest.raises(TransformError, match=r"module-shaped prefix.*got 'zero' at w"):
        scan(lambda m, x: x, in_axes=(axes, Carry), out_axes=Carry)(model, jnp.zeros(2))


class Sows(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones(()))

    def step(self, c: jax.Array) -> jax.Array:
        self.data = Intermediate(c + self.w[...])  # what a sow inside the step makes
        return c + 1


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}])
@pytest.mark.parametrize("graph", [False, True])
def test_state_sown_under_a_prefix_is_placed_by_the_prefix_filters(modes, graph) -> None:
    # a prefix gives the paths that existed before the scan their axes; state made inside
    # takes the axis of the first filter of the prefix's mapping that matches it
    from bryo_transforms import prefix

    model = Sows()
    axes = prefix(model, {Intermediate: 0, ...: None}, graph=graph)
    if graph:
        modes = {"graph_updates": False}  # TreeState prefixes are for graph simple mode
    run = scan(Sows.step, in_axes=(axes, Carry), out_axes=Carry, length=3, **modes)
    assert float(run(model, jnp.zeros(()))) == 3.0
    np.testing.assert_allclose(model.data[...], [1.0, 2.0, 3.0])
    assert float(model.w[...]) == 1.0


def test_state_sown_under_a_prefix_without_filters_is_refused_naming_the_path() -> None:
    from bryo_transforms import prefix

    model = Sows()
    axes = prefix(model, lambda path, leaf: None)  # a function: nothing to place new state by
    run = scan(Sows.step, in_axes=(axes, Carry), out_axes=Carry, length=3)
    refused = r"added a Intermediate at data to .*StateAxes\(\{PathIn"
    with pytest.raises(TransformError, match=refused):
        run(model, jnp.zeros(()))
    assert not hasattr(model, "data") and float(model.w[...]) == 1.0  # the model is unchanged
    stacks = StateAxes({Intermediate: 0, ...: None})
    stacked = scan(Sows.step, in_axes=(stacks, Carry), out_axes=Carry, length=3)
    assert float(stacked(model, jnp.zeros(()))) == 3.0
    np.testing.assert_allclose(model.data[...], [1.0, 2.0, 3.0])


def test_a_prefix_of_nodes_in_a_container_places_new_state_from_their_own_path() -> None:
    from bryo_filters import PathContains
    from bryo_transforms import prefix

    first, second = Sows(), Sows()
    axes = prefix((first, second), {PathContains(1): None, Intermediate: 0, ...: None})

    def step(a: Sows, b: Sows, c: jax.Array) -> jax.Array:
        Sows.step(a, c)
        return Sows.step(b, c)

    run = scan(step, in_axes=(*axes, Carry), out_axes=Carry, length=3)
    with pytest.raises(TransformError, match=r"added a Intermediate at data .* give it None"):
        run(first, second, jnp.zeros(()))  # second's state sits under path 1: None


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}])
def test_eager_calls_reuse_the_step_trace_with_the_new_values(modes) -> None:
    traced = []

    class Scale(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.array(2.0))  # broadcast: in_axes None

    @scan(in_axes=(Carry, None, 0, None), **modes)
    def run(total, model, x, offset):
        traced.append(1)
        return total + x * model.w[...] + offset, x

    model = Scale()
    total, _ = run(jnp.zeros(()), model, jnp.arange(3.0), jnp.ones(()))
    assert float(total) == 2 * 3 + 3 and len(traced) == 1
    model.w[...] = jnp.array(10.0)  # new values, same structure: the kept trace, fed anew
    total, _ = run(total, model, jnp.arange(3.0), jnp.zeros(()))
    assert float(total) == 9 + 30 and len(traced) == 1
    run(total, model, jnp.arange(4.0), jnp.zeros(()))  # another length: traced again
    assert len(traced) == 2

    @jax.jit
    def inside(total):
        return run(total, model, jnp.arange(3.0), jnp.zeros(()))[0]

    assert float(inside(jnp.zeros(()))) == 30 and len(traced) == 3  # under jit: jit's cache


def test_a_prefix_remembers_its_filters_without_keeping_itself_or_the_model_alive() -> None:
    import gc
    import weakref

    from bryo_transforms import prefix

    model = Sows()
    axes = prefix(model, {Intermediate: 0, ...: None})
    gone_prefix, gone_model = weakref.ref(axes), weakref.ref(model)
    del axes, model
    gc.collect()
    assert gone_prefix() is None and gone_model() is None


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}])
def test_a_variable_holding_a_pytree_is_scanned_and_stacked_leaf_by_leaf(modes) -> None:
    # a Variable may hold a dict or tuple of arrays (what `sow` and `capture` keep): each
    # array is scanned over the axis, and one the step gives a new structure is stacked
    from bryo_transforms import prefix

    class Holds(Object):
        def __init__(self) -> None:
            self.kept = Intermediate({"a": jnp.arange(3.0)})
            self.made = Intermediate({})

        def step(self, c: jax.Array) -> jax.Array:
            self.made.value = {**self.made.value, "seen": (self.kept.value["a"] + c,)}
            return c + 1

    model = Holds()
    axes = prefix(model, {Intermediate: 0, ...: None})
    scan(Holds.step, in_axes=(axes, Carry), out_axes=Carry, **modes)(model, jnp.zeros(()))
    np.testing.assert_allclose(model.made.value["seen"][0], [0.0, 2.0, 4.0])
    np.testing.assert_allclose(model.kept.value["a"], [0.0, 1.0, 2.0])
    model.kept.value = {"a": jnp.arange(3.0), "b": jnp.arange(4.0)}
    with pytest.raises(TransformError, match=r"kept\['b'\] has size 4, but .*kept\['a'\] has 3"):
        scan(Holds.step, in_axes=(axes, Carry), out_axes=Carry)(model, jnp.zeros(()))


def test_vmap_maps_a_variable_holding_a_pytree_leaf_by_leaf() -> None:
    graph = {"made": Intermediate({}), "kept": Intermediate((jnp.ones((3, 2)),))}

    def f(g: dict, x: jax.Array) -> None:
        g["made"].value = {"twice": g["kept"].value[0] * x}

    vmap(f, in_axes=(0, 0))(graph, jnp.arange(3.0))
    np.testing.assert_allclose(graph["made"].value["twice"], [[0.0, 0.0], [1.0, 1.0], [2, 2]])


def test_a_carried_module_may_hold_an_empty_dict_variable() -> None:
    # Flax's `sow`/capture Variables start as `{}`: an empty dict holds nothing written in
    # place, so the carry keeps it as it is (it was refused as a Python value)
    class Holder(Object):
        def __init__(self) -> None:
            self.total = Count(jnp.array(0.0))
            self.captured = Intermediate({})

    holder = Holder()

    @scan(in_axes=(Carry, 0), out_axes=Carry)
    def add(holder: Holder, x: jax.Array) -> Holder:
        holder.total.value = holder.total.value + x
        return holder

    add(holder, jnp.arange(3.0))
    np.testing.assert_allclose(holder.total.value, 3.0)
    assert holder.captured.get_value() == {}
