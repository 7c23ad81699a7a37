"""Lifted `jit`, `vmap`, `grad`, `value_and_grad` and `remat` on graph nodes.

The modules here are plain `bryo_graph.Object`s holding Variables (core-graph knows no
backend); a dict of Variables stands for a graph of a backend with no classes at all.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_graph import (
    BatchStat,
    Dict,
    List,
    Object,
    Param,
    State,
    Variable,
    merge,
    split,
    state,
)
from bryo_transforms import (
    Carry,
    StateAxes,
    TransformError,
    grad,
    jit,
    remat,
    value_and_grad,
    vmap,
)


class Count(Variable):
    pass


class Linear(Object):
    def __init__(self, din: int, dout: int, seed: int = 0) -> None:
        key = jax.random.key(seed)
        self.kernel = Param(jax.random.normal(key, (din, dout)))
        self.bias = Param(jnp.zeros((dout,)))
        self.calls = Count(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.value += 1
        y = x @ self.kernel
        return y + jnp.broadcast_to(self.bias, y.shape)


class Block(Object):
    def __init__(self, seed: int = 0) -> None:
        self.linear = Linear(2, 2, seed)
        self.mean = BatchStat(jnp.zeros((2,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.linear(x)
        self.mean.value = 0.9 * self.mean.value + 0.1 * y.mean(axis=0)
        return y


def pure_linear(kernel: jax.Array, bias: jax.Array, x: jax.Array) -> jax.Array:
    y = x @ kernel
    return y + jnp.broadcast_to(bias, y.shape)


X = jnp.arange(6.0).reshape(3, 2)


# jit --------------------------------------------------------------------------------


@jit
def forward(model: Object, x: jax.Array) -> jax.Array:
    return model(x)


def test_jit_matches_eager_and_writes_state_back() -> None:
    model, twin = Block(), Block()
    y = forward(model, X)
    np.testing.assert_allclose(y, twin(X), rtol=1e-6)
    np.testing.assert_allclose(model.mean.value, twin.mean.value, rtol=1e-6)
    assert int(model.linear.calls.value) == 1
    forward(model, X)
    assert int(model.linear.calls.value) == 2


def test_jit_compiles_once_per_structure() -> None:
    traces = []

    @jit
    def f(model: Object, x: jax.Array) -> jax.Array:
        traces.append(1)
        return model(x)

    a, b = Linear(2, 2, 0), Linear(2, 2, 1)
    for model in (a, a, b, b):
        f(model, X)
    assert len(traces) == 1
    np.testing.assert_allclose(f(b, X), pure_linear(b.kernel.value, b.bias.value, X))
    b.extra = Param(jnp.ones(1))  # a new structure: traced again
    f(b, X)
    assert len(traces) == 2


def test_jit_new_attributes_and_variables_propagate() -> None:
    @jit
    def grow(model: Linear) -> Linear:
        model.scale = Param(jnp.full((2,), 3.0))
        model.note = "grown"
        del model.bias
        return model

    model = Linear(2, 2)
    kernel = model.kernel
    out = grow(model)
    assert out is model
    assert model.kernel is kernel  # the caller's Variable is kept
    np.testing.assert_array_equal(model.scale.value, [3.0, 3.0])
    assert model.note == "grown" and not hasattr(model, "bias")


def test_jit_structural_changes_of_lists_and_dicts() -> None:
    class Holder(Object):
        def __init__(self) -> None:
            self.layers = List([Param(jnp.ones(2))])
            self.table = Dict({"a": Param(jnp.zeros(1)), "b": Param(jnp.ones(1))})

    @jit
    def grow(holder: Holder) -> None:
        holder.layers.append(Param(jnp.full(2, 5.0)))
        del holder.table["a"]
        holder.table["c"] = Count(jnp.arange(3))

    @jit
    def shrink(holder: Holder) -> None:
        holder.layers.pop()

    holder = Holder()
    layers, first = holder.layers, holder.layers[0]
    grow(holder)
    assert holder.layers is layers and holder.layers[0] is first
    np.testing.assert_array_equal(holder.layers[1].value, [5.0, 5.0])
    assert sorted(holder.table) == ["b", "c"] and isinstance(holder.table["c"], Count)
    shrink(holder)
    assert len(holder.layers) == 1 and holder.layers[0] is first


def test_vmap_new_variables_take_the_arguments_axis() -> None:
    class Weights(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones((3, 2)))

    weights = Weights()
    vmap(lambda m, x: setattr(m, "scaled", Param(x * m.w.value)), in_axes=(0, 0))(
        weights, jnp.full((3, 2), 2.0)
    )
    np.testing.assert_array_equal(weights.scaled.value, jnp.full((3, 2), 2.0))


def test_jit_returns_new_and_existing_nodes() -> None:
    @jit
    def make(model: Linear, x: jax.Array) -> tuple:
        child = Linear(2, 2, 5)
        child.kernel.value = child.kernel.value * 0 + x.sum()
        return model, child, model.kernel

    model = Linear(2, 2)
    same, child, kernel = make(model, X)
    assert same is model and kernel is model.kernel
    assert isinstance(child, Linear) and child is not model
    np.testing.assert_allclose(child.kernel.value, jnp.full((2, 2), X.sum()))


def test_jit_shared_references_across_arguments() -> None:
    @jit
    def f(model: Block, linear: Linear) -> jax.Array:
        assert model.linear is linear
        linear.kernel.value = linear.kernel.value + 1.0
        return model.linear.kernel.value

    model = Block()
    before = model.linear.kernel.value
    out = f(model, model.linear)
    np.testing.assert_allclose(out, before + 1.0)
    np.testing.assert_allclose(model.linear.kernel.value, before + 1.0)


def test_jit_shared_variable_inside_one_graph() -> None:
    shared = Param(jnp.ones(2))
    graph = {"a": shared, "b": [shared, Count(jnp.array(0))]}

    @jit
    def f(graph: dict) -> jax.Array:
        assert graph["a"] is graph["b"][0]
        graph["a"].value = graph["a"].value * 2
        graph["b"][1].value += 1
        return graph["b"][0].value

    np.testing.assert_allclose(f(graph), [2.0, 2.0])
    assert graph["a"] is shared and graph["b"][0] is shared
    np.testing.assert_allclose(shared.value, [2.0, 2.0])
    assert int(graph["b"][1].value) == 1


def test_jit_static_args_numbers_and_kwargs() -> None:
    traces = []

    @jit(static_argnums=1, static_argnames="mode")
    def f(x: jax.Array, power: int, scale: float, *, mode: str = "sum") -> jax.Array:
        traces.append(power)
        y = x**power * scale
        return y.sum() if mode == "sum" else y.max()

    assert float(f(jnp.ones(3), 2, 2.0)) == 6.0
    assert float(f(jnp.ones(3), 2, 3.0)) == 9.0  # Python numbers are traced: no retrace
    assert float(f(jnp.ones(3), 2, 3.0, mode="max")) == 3.0
    assert traces == [2, 2]


def test_jit_keeps_metadata_and_static_outputs() -> None:
    tagged = {"key": Variable(jnp.zeros(2), tag="dropout")}

    @jit
    def f(graph: dict) -> tuple:
        assert graph["key"].tag == "dropout"
        return "label", None, state(graph, "dropout")

    label, nothing, found = f(tagged)
    assert label == "label" and nothing is None
    assert isinstance(found, State) and ("key",) in found.flat_state()


def test_jit_error_inside_leaves_the_model_unchanged() -> None:
    @jit
    def broken(model: Linear) -> None:
        model.kernel.value = model.kernel.value + 1
        raise RuntimeError("boom")

    model = Linear(2, 2)
    before = model.kernel.value
    with pytest.raises(RuntimeError, match="boom"):
        broken(model)
    assert model.kernel.value is before


def test_jit_rejects_options_about_flat_arguments() -> None:
    with pytest.raises(TypeError, match="'abstracted_axes'"):
        jit(lambda m: m, abstracted_axes=())


def test_jit_as_method_decorator() -> None:
    class Model(Linear):
        @jit
        def step(self, x: jax.Array) -> jax.Array:
            return self(x)

    model = Model(2, 2)
    model.step(X)
    model.step(X)
    assert int(model.calls.value) == 2


@settings(max_examples=6, deadline=None)
@given(
    widths=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    updates=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_jit_equals_eager_for_any_update_pattern(widths: list[int], updates: list[bool]) -> None:
    def build() -> dict:
        return {
            f"v{i}": [Param(jnp.full((w,), float(i))), Count(jnp.array(i))]
            for i, w in enumerate(widths)
        }

    def step(graph: dict) -> jax.Array:
        total = jnp.zeros(())
        for i, (_, (param, count)) in enumerate(sorted(graph.items())):
            if updates[i % len(updates)]:
                param.value = param.value * 2 + 1
                count.value += 1
            total = total + param.value.sum()
        return total

    eager, jitted = build(), build()
    for _ in range(2):
        np.testing.assert_allclose(jit(step)(jitted), step(eager))
    for name in eager:
        np.testing.assert_allclose(jitted[name][0].value, eager[name][0].value)
        assert int(jitted[name][1].value) == int(eager[name][1].value)


# vmap -------------------------------------------------------------------------------


def test_vmap_broadcast_model_mapped_input() -> None:
    model = Linear(2, 2)
    y = vmap(lambda m, x: m(x), in_axes=(None, 0))(model, X)
    np.testing.assert_allclose(y, pure_linear(model.kernel.value, model.bias.value, X), rtol=1e-6)
    assert int(model.calls.value) == 1  # an unbatched update of broadcast state comes back


def test_vmap_creates_stacked_modules_with_state_axes() -> None:
    @vmap(in_axes=0, out_axes=StateAxes({Param: 0, ...: None}))
    def create(seed: jax.Array) -> Linear:
        model = Linear(2, 3)
        model.kernel.value = model.kernel.value * seed
        return model

    stack = create(jnp.arange(4.0))
    assert stack.kernel.value.shape == (4, 2, 3) and stack.bias.value.shape == (4, 3)
    assert stack.calls.value.shape == ()
    np.testing.assert_allclose(stack.kernel.value[0], 0.0)


def test_vmap_state_axes_map_parts_of_a_model() -> None:
    model = Linear(2, 2)
    model.calls = Count(jnp.zeros(3, jnp.int32))
    axes = StateAxes({Count: 0, ...: None})
    vmap(lambda m, x: m(x), in_axes=(axes, None))(model, X)
    np.testing.assert_array_equal(model.calls.value, [1, 1, 1])
    assert model.kernel.value.shape == (2, 2)


def test_vmap_seed_000_state_axes_on_param_and_dropout() -> None:
    class Noisy(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones((4, 2)))
            self.key = Variable(jax.random.split(jax.random.key(0), 4), tag="dropout")
            self.other = BatchStat(jnp.zeros(2))

    state_axes = StateAxes({(Param, "dropout"): 0, ...: None})

    @vmap(in_axes=(state_axes, 0))
    def forward(model: Noisy, x: jax.Array) -> jax.Array:
        return model.w.value * x + jax.random.normal(model.key.value, ())

    out = forward(Noisy(), jnp.ones((4, 2)))
    assert out.shape == (4, 2)
    assert len({float(v) for v in out[:, 0]}) == 4  # each element drew from its own key


def test_vmap_errors_name_argument_and_path() -> None:
    model = Linear(2, 2)
    with pytest.raises(TransformError, match=r"`args\[0\]` at bias.*shape \(2,\)"):
        vmap(lambda m: m.bias.value, in_axes=(1,))(model)
    with pytest.raises(TransformError, match=r"no filter matching `args\[0\]` at calls"):
        vmap(lambda m, x: m(x), in_axes=(StateAxes({Param: None}), 0))(model, X)
    with pytest.raises(TransformError, match=r"2 entries but .* 1 positional"):
        vmap(lambda m: m.bias.value, in_axes=(None, 0))(model)
    with pytest.raises(TransformError, match=r"size 4, but `args\[0\]` at bias has 2"):
        vmap(lambda m, x: m(x), in_axes=(StateAxes({Param: 0, ...: None}), 0))(
            model, jnp.ones((4, 2))
        )
    with pytest.raises(TransformError, match="StateAxes but the argument there is an array"):
        vmap(lambda m, x: m(x), in_axes=(None, StateAxes({...: 0})))(model, X)
    with pytest.raises(TransformError, match="depends on the mapped inputs"):
        vmap(lambda m, x: m(x), in_axes=(None, 0), out_axes=None)(model, X)
    assert int(model.calls.value) == 0  # every failed call left the model as it was


def test_vmap_unmapped_error_names_the_state_that_leaves_unmapped() -> None:
    graph = Dict(total=Count(jnp.array(0.0)))

    def add(g: Dict, x: jax.Array) -> None:
        g["total"].value = g["total"].value + x

    with pytest.raises(
        TransformError,
        match=r"out_axes\[0\]\[\d+\]\[\d+\] \(the Count at `args\[0\]\['total'\]`, "
        r"updated inside\), got axis spec None",
    ):
        vmap(add, in_axes=(None, 0))(graph, jnp.ones(3))

    def create(g: Dict, x: jax.Array) -> None:
        g["made"] = Count(x)

    with pytest.raises(TransformError, match=r"\(a Count the function created\)"):
        vmap(create, in_axes=(StateAxes({...: None}), 0))(graph, jnp.ones(3))
    with pytest.raises(TransformError, match=r"\(an output of the function\)"):
        vmap(lambda x: x, in_axes=0, out_axes=None)(jnp.ones(3))
    assert float(graph["total"].value) == 0.0 and "made" not in graph


def test_vmap_out_axes_and_nested_prefix() -> None:
    @vmap(in_axes=((0, None),), out_axes=(1, None))
    def f(pair: tuple) -> tuple:
        x, y = pair
        return x * 2, y

    a, b = f((jnp.ones((3, 2)), jnp.zeros(5)))
    assert a.shape == (2, 3) and b.shape == (5,)


# grad -------------------------------------------------------------------------------


def loss_fn(model: Block, x: jax.Array) -> jax.Array:
    return (model(x) ** 2).mean()


def pure_loss(kernel: jax.Array, bias: jax.Array, x: jax.Array) -> jax.Array:
    return (pure_linear(kernel, bias, x) ** 2).mean()


def test_grad_matches_jax_grad_of_the_pure_function() -> None:
    model = Block()
    grads = grad(loss_fn)(model, X)
    kernel_grad, bias_grad = jax.grad(pure_loss, argnums=(0, 1))(
        model.linear.kernel.value, model.linear.bias.value, X
    )
    assert isinstance(grads, State)
    assert set(grads.flat_state()) == {("linear", "kernel"), ("linear", "bias")}
    np.testing.assert_allclose(grads["linear"]["kernel"].value, kernel_grad, rtol=1e-6)
    np.testing.assert_allclose(grads["linear"]["bias"].value, bias_grad, rtol=1e-6)
    assert grads["linear"]["kernel"].type is Param
    assert int(model.linear.calls.value) == 1  # non-differentiated state written back
    assert float(jnp.abs(model.mean.value).sum()) > 0


def test_value_and_grad_argnums_aux_and_wrt() -> None:
    model = Block()

    def f(model: Block, x: jax.Array) -> tuple:
        y = model(x)
        return (y**2).mean(), {"y": y, "model": model}

    (loss, aux), (g_model, g_x) = value_and_grad(f, argnums=(0, 1), has_aux=True)(model, X)
    assert set(g_model.flat_state()) == {("linear", "kernel"), ("linear", "bias")}
    expected_loss = pure_loss(model.linear.kernel.value, model.linear.bias.value, X)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    assert aux["model"] is model and aux["y"].shape == (3, 2)
    np.testing.assert_allclose(
        g_x,
        jax.grad(pure_loss, argnums=2)(model.linear.kernel.value, model.linear.bias.value, X),
        rtol=1e-6,
    )
    only_kernel = grad(loss_fn, wrt=lambda path, v: path[-1:] == ("kernel",))(model, X)
    assert set(only_kernel.flat_state()) == {("linear", "kernel")}
    with_stats = grad(loss_fn, wrt=(Param, BatchStat))(model, X)
    assert ("mean",) in with_stats.flat_state()


def test_grad_of_a_dict_of_variables_graph() -> None:
    graph = {"w": Param(jnp.array([1.0, 2.0])), "steps": Count(jnp.array(0))}

    def f(graph: dict) -> jax.Array:
        graph["steps"].value += 1
        return (graph["w"].value ** 3).sum()

    grads = grad(f)(graph)
    np.testing.assert_allclose(grads["w"].value, [3.0, 12.0])
    assert int(graph["steps"].value) == 1


def test_grad_gives_a_shared_variable_its_gradient_at_its_first_place_only() -> None:
    p1, p2 = Param(jnp.array(1.0)), Param(jnp.array(2.0))
    graph = {"a": [p1, p2], "b": p1}
    grads = grad(lambda g: g["a"][0][...] * g["a"][1][...] + g["b"][...])(graph)
    assert isinstance(grads["a"][0], Param) and float(grads["a"][0][...]) == 3.0  # p2 + 1
    assert isinstance(grads["b"], State) and not dict(grads["b"].flat_state())
    assert len(jax.tree.leaves(grads)) == 2
    model = Dict(w=p1)
    g1, g2 = grad(lambda m, n: m["w"][...] * n["w"][...], argnums=(0, 1))(model, model)
    assert float(g1["w"][...]) == 2.0 and not dict(g2.flat_state())  # both uses, once
    simple = grad(lambda g: g["a"][0][...] + g["b"][...], graph_updates=False)(graph)
    assert float(simple["b"][...]) == 2.0  # simple mode: a pytree, every place its own


def test_grad_differentiates_a_state_argument_whole_not_only_its_params() -> None:
    model = Dict(w=Param(jnp.array(2.0)), stat=BatchStat(jnp.array(3.0)))
    graphdef, stats, params = split(model, BatchStat, ...)

    def loss(stats: State, params: State) -> jax.Array:
        m = merge(graphdef, stats, params)
        return m["w"][...] * m["stat"][...]

    g_stats, g_params = grad(loss, argnums=(0, 1))(stats, params)
    assert isinstance(g_stats["stat"], BatchStat) and float(g_stats["stat"][...]) == 2.0
    assert float(g_params["w"][...]) == 3.0
    g_model = grad(lambda m: m["w"][...] * m["stat"][...])(model)  # a model: its Params
    assert set(dict(g_model.flat_state())) == {("w",)}


def test_grad_inside_jit() -> None:
    @jit
    def train_step(model: Block, x: jax.Array) -> jax.Array:
        loss, grads = value_and_grad(loss_fn)(model, x)
        for path, g in grads.flat_state().items():
            target = model
            for key in path:
                target = getattr(target, key)
            target.value = target.value - 0.1 * g.value
        return loss

    model = Block()
    first = train_step(model, X)
    second = train_step(model, X)
    assert float(second) < float(first)
    assert int(model.linear.calls.value) == 2


# remat ------------------------------------------------------------------------------


def test_remat_values_gradients_and_state() -> None:
    model = Block()
    checkpointed = remat(loss_fn)
    np.testing.assert_allclose(checkpointed(model, X), loss_fn(Block(), X), rtol=1e-6)
    assert int(model.linear.calls.value) == 1
    g1 = grad(lambda m, x: remat(loss_fn)(m, x))(model, X)
    g2 = grad(loss_fn)(model, X)
    np.testing.assert_allclose(
        g1["linear"]["kernel"].value, g2["linear"]["kernel"].value, rtol=1e-6
    )
    policy = remat(policy=jax.checkpoint_policies.nothing_saveable)(loss_fn)
    np.testing.assert_allclose(policy(model, X), loss_fn(model, X), rtol=1e-6)


def test_state_axes_and_carry_marker() -> None:
    axes = StateAxes({(Param, "dropout"): 0, ...: None})
    assert axes.axes == (0, None)
    assert axes == StateAxes([((Param, "dropout"), 0), (..., None)])
    assert "Param" in repr(axes) and "..." in repr(axes)
    assert StateAxes({...: Carry}).axes == (Carry,)
    with pytest.raises(TypeError, match="ints, None or `Carry`"):
        StateAxes({...: "zero"})
    with pytest.raises(TypeError, match="marker"):
        Carry()


def test_state_axes_from_a_state_give_each_path_its_axis() -> None:
    model = Linear(2, 2)
    model.kernel = Param(jnp.ones((3, 2, 2)))  # three kernels, one shared bias
    spec = State({"kernel": 0, "bias": None, "calls": None})
    axes = StateAxes(spec)
    assert axes.axis_of(("kernel",), model.kernel) == 0
    assert axes.axis_of(("bias",), model.bias) is None
    assert spec.flat_state() == {("kernel",): 0, ("bias",): None, ("calls",): None}  # kept
    assert axes.map_prefix(("kernel",), None) == 0 and axes.map_prefix(("bias",), None) is None
    with pytest.raises(ValueError, match=r"no filter matching the path extra\.w"):
        axes.map_prefix(("extra", "w"), None)

    out = vmap(lambda m, x: m(x), in_axes=(axes, None))(model, X)
    assert out.shape == (3, *X.shape[:-1], 2)


def test_state_axes_from_a_state_of_unhashable_values_name_the_path() -> None:
    with pytest.raises(TypeError, match=r"`StateAxes` given a State needs hashable.*kernel"):
        StateAxes(State({"kernel": [0]}))


def test_jit_writes_back_a_dict_value_written_in_place() -> None:
    # `v['a'] += 1` writes into the Variable's dict: its identity does not change, the
    # value still leaves the call (as in Flax)
    v = Variable({"a": jnp.array(0.0)})

    @jit
    def step(v):
        v["a"] += 1.0
        v["b"] = jnp.array(2.0)

    step(v)
    step(v)
    assert set(v.get_value()) == {"a", "b"}
    np.testing.assert_allclose(v["a"], 2.0)


class Indexed(Object):
    def __init__(self) -> None:
        self.linear = Linear(2, 2)
        self.index = Param(jnp.array([1, 0]))  # an integer array (Equinox: every array a Param)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x)[:, self.index.value]


def test_grad_of_an_integer_state_leaf_names_its_path_and_the_fix() -> None:
    model = Indexed()

    def loss(model: Indexed, x: jax.Array) -> jax.Array:
        return model(x).sum()

    with pytest.raises(
        TypeError, match=r"path \('index',\) of argument 0, an array of int32.*wrt="
    ):
        grad(loss)(model, X)
    grads = grad(loss, wrt=lambda path, v: path[-1] in ("kernel", "bias"))(model, X)
    assert set(grads.flat_state()) == {("linear", "kernel"), ("linear", "bias")}
    with pytest.raises(TypeError, match="unsupported operand"):  # other TypeErrors unchanged
        grad(lambda model, x: model(x).sum() + "1")(Block(), X)
