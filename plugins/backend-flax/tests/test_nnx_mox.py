"""Flax NNX modules in MoX: calls recorded with type, path and attributes, whether the model
is an argument, closed over, or merged inside the traced function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

yax = pytest.importorskip("bryo_mox")

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(4, 4, rngs=rngs)
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.norm(jax.nn.relu(self.linear(x))))


class Net(nnx.Module):
    def __init__(self, rngs):
        self.blocks = nnx.List([Block(rngs), Block(rngs)])
        self.head = nnx.Linear(4, 2, use_bias=False, rngs=rngs)

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def calls(mox):
    return [(n.info.short_type, n.name) for n in yax.query("//module_call", mox)]


def leaves(tree):
    return [
        jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        for x in jax.tree.leaves(tree)
    ]


def assert_same(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


def test_positional_model_records_calls_and_returns_its_new_state():
    net = Net(nnx.Rngs(0))
    mox = yax.make_mox(lambda model, x: (model(x), nnx.state(model)))(net, X)
    assert calls(mox)[:5] == [
        ("Net", ""),
        ("Block", "blocks/0"),
        ("Linear", "blocks/0/linear"),
        ("BatchNorm", "blocks/0/norm"),
        ("Dropout", "blocks/0/drop"),
    ]
    assert calls(mox)[-1] == ("Linear", "head")
    (head,) = yax.query('//module_call[@name="head"]', mox)
    assert head.type == "flax.nnx.nn.linear.Linear"
    assert head.attrs["in_features"] == 4 and head.attrs["out_features"] == 2
    assert head.attrs["use_bias"] is False and head.n_state == 1
    (drop,) = yax.query('//module_call[@name="blocks/0/drop"]', mox)
    assert drop.attrs["rate"] == 0.5 and drop.n_state_out == 1  # the rng count moves
    reference = nnx.clone(net)
    out, state = yax.eval_mox(mox, net, X)
    assert_same(out, reference(X))
    assert_same(state, nnx.state(reference))  # new batch statistics and rng counts
    assert_same(nnx.state(net), nnx.state(Net(nnx.Rngs(0))))  # tracing changed nothing


def test_closed_over_model_is_traced_and_left_unchanged():
    net = Net(nnx.Rngs(1))
    net.eval()  # deterministic dropout, running statistics: the calls change nothing
    before = nnx.clone(net)
    mox = yax.make_mox(lambda x: net(x))(X)
    assert len(calls(mox)) == 10
    assert_same(yax.eval_mox(mox, X), before(X))
    assert_same(nnx.state(net), nnx.state(before))


def test_a_closed_over_model_whose_state_changes_is_refused():
    """Flax forbids mutating a module inside a trace it was not created in (plain
    `jax.make_jaxpr` fails the same way); MoX says how to trace it instead."""
    net = Net(nnx.Rngs(1))
    before = nnx.clone(net)
    with pytest.raises(
        yax.MoxError,
        match=r"module called at the top level \(.*Net\) changed its state \(blocks/0/drop/"
        r"rngs/count, blocks/0/norm/mean, .*\) while traced.*Pass the module as an argument",
    ):
        yax.make_mox(lambda x: net(x))(X)
    assert_same(nnx.state(net), nnx.state(before))
    assert not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(nnx.state(net)))


def test_where_nnx_update_does_not_check_the_trace_the_route_does(monkeypatch):
    """flax 0.12.0's `nnx.update` writes a Variable of another trace without a word: there
    the route refuses the write itself, with Flax's error, before updating anything."""
    from flax import errors

    import bryo_flax._nnx as routing

    net = Net(nnx.Rngs(1))
    updated, update = [], nnx.update

    def spy(module, *states):
        updated.append(module)
        update(module, *states)

    monkeypatch.setattr(routing, "UPDATE_CHECKS_TRACE", False)
    monkeypatch.setattr(routing.nnx, "update", spy)
    before = nnx.clone(net)
    with pytest.raises(yax.MoxError, match="Pass the module as an argument") as raised:
        yax.make_mox(lambda x: net(x))(X)
    assert isinstance(raised.value.__cause__, errors.TraceContextError)
    assert "from a different trace level" in str(raised.value.__cause__)
    assert updated and not any(module is net for module in updated)  # only traced copies
    assert_same(nnx.state(net), nnx.state(before))


def test_split_and_merged_inside():
    net = Net(nnx.Rngs(2))
    graphdef, state = nnx.split(net)

    def apply(state, x):
        return nnx.merge(graphdef, state)(x)

    mox = yax.make_mox(apply)(state, X)
    assert ("Linear", "blocks/1/linear") in calls(mox)
    np.testing.assert_allclose(yax.eval_mox(mox, state, X), apply(state, X), rtol=1e-6)
    jitted = jax.jit(lambda s, x: yax.eval_mox(mox, s, x))
    np.testing.assert_allclose(jitted(state, X), apply(state, X), rtol=1e-6)


def test_non_pytree_modules_closed_over():
    class Scale(nnx.Module, pytree=False):
        def __init__(self):
            self.factor = nnx.Param(jnp.full((4,), 2.0))
            self.label = "double"

        def __call__(self, x):
            return x * jnp.broadcast_to(self.factor[...], x.shape)

    scale = Scale()
    mox = yax.make_mox(lambda x: scale(x) + 1.0)(X)
    (node,) = yax.query('//module_call[@type="Scale"]', mox)
    assert node.attrs == {"label": "double"} and node.n_state == 1
    np.testing.assert_allclose(yax.eval_mox(mox, X), X * 2.0 + 1.0)


def test_relu_to_gelu_and_linear_to_lora():
    net = Net(nnx.Rngs(3))
    net.eval()  # no dropout or statistics updates: a deterministic reference
    graphdef, state = nnx.split(net)
    apply = lambda s, x: nnx.merge(graphdef, s)(x)
    mox = yax.make_mox(apply)(state, X)
    gelu = yax.sub('//pjit[@name="relu"]', yax.make_mox(jax.nn.gelu)(X), mox)
    assert not yax.query('//pjit[@name="relu"]', gelu)
    linear_graphdef, linear_state = nnx.split(net.head)

    def lora(a, b, base, x):
        return nnx.merge(linear_graphdef, base)(x) + (x @ a) @ b

    lora_mox = yax.make_mox(lora)(jnp.zeros((4, 1)), jnp.zeros((1, 2)), linear_state, X)
    adapted = yax.sub('//module_call[@name="head"]', lora_mox, mox, with_state=True)
    assert [key for key, _ in adapted.extra_params] == ["head:0", "head:1"]
    a, b = jnp.ones((4, 1)), jnp.ones((1, 2))
    hidden = X
    for block in nnx.merge(graphdef, state).blocks:
        hidden = block(hidden)
    expected = net.head(hidden) + (hidden @ a) @ b
    actual = yax.eval_mox(adapted, state, X, {"head:0": a, "head:1": b})
    np.testing.assert_allclose(actual, expected, rtol=1e-5)
