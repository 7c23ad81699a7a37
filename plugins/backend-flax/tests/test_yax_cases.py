"""The model cases of YAX's own test suite (tests/yax_test.py, static_test.py,
dynamic_test.py, custom_jvp_test.py), on bryo: trace `model.apply`, check the nodes,
evaluate with exactly what `apply` takes."""

import copy
import functools
import operator

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

yax = pytest.importorskip("bryo_mox")

BINARY = pytest.mark.parametrize("fn", [operator.add, operator.mul, operator.sub])


def root_call(mox):
    (node,) = mox.nodes
    assert isinstance(node, yax.ModuleCall)
    return node


def check_eval(model, variables, *args, **kwargs):
    mox = yax.make_mox(model.apply)(variables, *args, **kwargs)
    expected = model.apply(variables, *args, **kwargs)
    actual = yax.eval_mox(mox, variables, *args, **kwargs)
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        if jnp.issubdtype(b.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(a, b, rtol=1e-6)
    return mox


@BINARY
def test_binary_functions(fn):
    xs, ys = jnp.ones(3), jnp.arange(3.0)
    mox = yax.make_mox(fn)(xs, ys)
    (eqn,) = mox.nodes
    assert isinstance(eqn, yax.Equation) and eqn.primitive.name == fn.__name__
    assert len(eqn.invars) == 2 and len(eqn.outvars) == 1
    np.testing.assert_allclose(yax.eval_mox(mox, xs, ys), fn(xs, ys))


class FuncModule(nn.Module):
    binary_fn: object

    @nn.compact
    def __call__(self, xs, ys):
        return self.binary_fn(xs, ys)


@BINARY
def test_binary_modules(fn):
    batch = (jnp.ones(4), jnp.arange(4.0))
    model = FuncModule(fn)
    variables = jax.jit(model.init)(jax.random.key(42), *batch)
    node = root_call(check_eval(model, variables, *batch))
    assert node.n_state == 0 and len(node.invars) == 2 and len(node.outvars) == 1
    assert "binary_fn" not in node.attrs  # a function is not an attribute MoX records


class IdentityModule(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs


def test_identity_module():
    batch = jnp.ones(4)
    model = IdentityModule()
    node = root_call(check_eval(model, model.init(jax.random.key(42), batch), batch))
    assert len(node.invars) == 1 and len(node.outvars) == 1
    assert node.body.outvars == node.body.invars  # the input comes straight out


class RNGModuleInner(nn.Module):
    @nn.compact
    def __call__(self):
        return self.make_rng("rng_stream"), self.make_rng("rng_stream")


class RNGModule(nn.Module):
    @nn.compact
    def __call__(self):
        xs, ys = RNGModuleInner()()
        return xs, ys, self.make_rng("rng_stream")


def test_rng_module():
    model = RNGModule()
    variables = model.init(jax.random.key(42))
    rngs = {"rng_stream": jax.random.key(42)}
    mox = check_eval(model, variables, rngs=rngs)
    node = root_call(mox)
    assert len(node.outvars) == 3 and node.n_state == 1  # the stream's key is its state
    (inner,) = yax.query('//module_call[@type="RNGModuleInner"]', mox)
    assert inner.name == "RNGModuleInner_0" and len(inner.outvars) == 2
    other = yax.eval_mox(mox, variables, rngs={"rng_stream": jax.random.key(0)})
    keys = yax.eval_mox(mox, variables, rngs=rngs)
    assert not np.array_equal(jax.random.key_data(other[0]), jax.random.key_data(keys[0]))


def test_stateful_module():
    batch = jnp.ones(4)
    model = nn.Dense(4)
    node = root_call(check_eval(model, jax.jit(model.init)(jax.random.key(42), batch), batch))
    assert node.info.short_type == "Dense" and node.name == ""
    assert len(node.invars) == 3 and node.n_state == 2 and len(node.outvars) == 1


class ResBlock(nn.Module):
    features: int = 4

    @nn.compact
    def __call__(self, xs):
        assert self.features == xs.shape[-1], f"{self.features} vs {xs.shape}"
        return xs + nn.Dense(self.features)(xs)


def test_res_block():
    batch = jnp.ones(4)
    model = ResBlock()
    mox = check_eval(model, jax.jit(model.init)(jax.random.key(42), batch), batch)
    node = root_call(mox)
    assert node.attrs == {"features": 4} and len(node.invars) == 3
    (dense,) = [n for n in node.nodes if isinstance(n, yax.ModuleCall)]
    assert dense.name == "Dense_0" and dense.attrs["features"] == 4


class SetupModule(nn.Module):
    def setup(self):
        self.dense = nn.Dense(4)

    def __call__(self, xs):
        return self.dense(xs)


def test_setup_module():
    batch = jnp.ones(4)
    model = SetupModule()
    mox = check_eval(model, jax.jit(model.init)(jax.random.key(42), batch), batch)
    node = root_call(mox)  # `setup` itself is not a node
    assert len(node.invars) == 3 and len(node.outvars) == 1
    assert [n.name for n in yax.query("//module_call", mox)] == ["", "dense"]


class Attention(nn.Module):
    features: int = 8
    heads: int = 2

    def split_heads(self, xs):
        return xs.reshape(*xs.shape[:-1], self.heads, self.features // self.heads)

    @nn.compact
    def __call__(self, xs):
        q, k, v = (
            self.split_heads(nn.Dense(self.features, name=name)(xs))
            for name in ("query", "key", "value")
        )
        weights = jax.nn.softmax(jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(q.shape[-1]))
        out = jnp.einsum("hqk,khd->qhd", weights, v).reshape(xs.shape)
        return nn.Dense(self.features, name="out")(out)


def test_attention_with_an_inner_method():
    batch = jnp.linspace(-1.0, 1.0, 24).reshape(3, 8)
    model = Attention()
    mox = check_eval(model, model.init(jax.random.key(0), batch), batch)
    assert [n.name for n in yax.query('//module_call[@type="Dense"]', mox)] == [
        "query",
        "key",
        "value",
        "out",
    ]
    split = yax.query('//module_call[@method="split_heads"]', mox)
    assert [n.name for n in split] == ["", "", ""]
    assert all(n.attrs["heads"] == 2 for n in split)


class DropoutModule(nn.Module):
    @nn.compact
    def __call__(self, xs, train: bool = True):
        return nn.Dropout(0.5)(xs, deterministic=not train)


@pytest.mark.parametrize("kwargs", [{}, {"train": True}, {"train": False}])
def test_dropout_with_a_static_train_flag(kwargs):
    xs = jnp.ones((2, 3))
    model = DropoutModule()
    variables = model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, xs)
    mox = check_eval(model, variables, xs, rngs={"dropout": jax.random.key(2)}, **kwargs)
    assert dict(mox.static_kwargs) == kwargs


class InputLiteralModel(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return nn.Dense(2)(jnp.ones_like(xs))


class OutputLiteralModel(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return nn.Dense(2)(xs), jnp.ones((2, 3))


@pytest.mark.parametrize("model", [InputLiteralModel(), OutputLiteralModel()])
def test_constants_in_and_out(model):
    batch = jnp.ones((1, 2))
    check_eval(model, jax.jit(model.init)(jax.random.key(42), batch), batch)


class MLP(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return nn.Dense(2)(nn.relu(nn.Dense(2)(xs)))


def test_custom_jvp_survives():
    batch = jnp.array([[1.0, -1.0, 0.0]])
    model = MLP()
    variables = jax.jit(model.init)(jax.random.key(42), batch)
    mox = check_eval(model, variables, batch)
    grad = lambda f: jax.grad(lambda v: f(v, batch).sum())(variables)
    expected, actual = grad(model.apply), grad(lambda v, x: yax.eval_mox(mox, v, x))
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


class Trained(nn.Module):
    """The README's flow on a model with everything Linen hands MoX: a submodule given as
    a field, `setup` submodules, batch statistics and dropout."""

    head: nn.Module

    def setup(self):
        self.blocks = [ResBlock(), ResBlock()]
        self.norm = nn.BatchNorm(use_running_average=False)
        self.drop = nn.Dropout(0.5, deterministic=False)

    def __call__(self, xs):
        for block in self.blocks:
            xs = block(xs)
        return self.head(self.drop(self.norm(xs)))


@pytest.mark.slow
def test_readme_flow_jitted_and_on_a_deep_copy():
    """`make_mox(mod.apply)`, then `eval_mox` eagerly, and on a `copy.deepcopy` of the
    MoX under `jax.jit` and `jax.grad`: all agree with `apply`."""
    batch = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    model = Trained(nn.Dense(3))
    rngs = {"dropout": jax.random.key(2)}
    variables = jax.jit(model.init)({"params": jax.random.key(42), **rngs}, batch)
    mutable = ["batch_stats"]
    mox = yax.make_mox(model.apply)(variables, batch, rngs=rngs, mutable=mutable)
    assert [n.name for n in yax.query("//module_call", mox)][-2:] == ["drop", "head"]
    twin = copy.deepcopy({"model": mox})["model"]
    apply = functools.partial(model.apply, mutable=mutable)
    run = functools.partial(yax.eval_mox, twin, mutable=mutable)  # static: not jitted
    expected = apply(variables, batch, rngs=rngs)
    eager = yax.eval_mox(mox, variables, batch, rngs=rngs, mutable=mutable)
    for actual in (eager, jax.jit(run)(variables, batch, rngs=rngs)):
        for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    loss = lambda f: jax.jit(jax.grad(lambda v: jnp.sum(f(v, batch, rngs=rngs)[0] ** 2)))
    for a, b in zip(
        jax.tree.leaves(loss(run)(variables)), jax.tree.leaves(loss(apply)(variables)), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
