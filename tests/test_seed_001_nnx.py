"""Seed 001 (YAX) on NNX-style modules: trace, evaluate, query, rewrite, serialize."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo import nnx

yax = pytest.importorskip("bryo_mox")


class ResBlock(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(10, 10, rngs=rngs)

    def __call__(self, xs):
        return xs + nnx.relu(self.dense(xs))


class Net(nnx.Module):
    def __init__(self, rngs):
        self.blocks = nnx.List([ResBlock(rngs) for _ in range(2)])
        self.head = nnx.Linear(10, 3, rngs=rngs)

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture(scope="module")
def traced():
    model = Net(nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    def apply(params, x):
        return nnx.merge(graphdef, params)(x)

    batch = jnp.ones((1, 10))
    return apply, params, batch, yax.make_mox(apply)(params, batch)


def test_tracing_builds_one_module_call_per_module(traced):
    _, _, _, mox = traced
    assert [node.name for node in yax.query("//module_call[@type='ResBlock']", mox)] == [
        "blocks/0",
        "blocks/1",
    ]
    dense = yax.query("//module_call[@type='Linear']", mox)
    assert [node.name for node in dense] == ["blocks/0/dense", "blocks/1/dense", "head"]
    assert [n.name for n in yax.query("//module_call[@out_features=10]", mox)] == [
        "blocks/0/dense",
        "blocks/1/dense",
    ]
    assert "module_call" in str(mox)


def test_eval_matches_the_model_eagerly_and_jitted(traced):
    apply, params, batch, mox = traced
    expected = apply(params, batch)
    np.testing.assert_allclose(yax.eval_mox(mox, params, batch), expected, rtol=1e-6)
    jitted = jax.jit(lambda p, x: yax.eval_mox(mox, p, x))
    np.testing.assert_allclose(jitted(params, batch), expected, rtol=1e-6)


def test_tracing_leaves_the_model_unchanged(traced):
    model = Net(nnx.Rngs(1))
    before = jax.tree.map(np.asarray, nnx.state(model))
    graphdef = nnx.graphdef(model)
    yax.make_mox(lambda x: model(x))(jnp.ones((1, 10)))
    after = nnx.state(model)
    assert nnx.graphdef(model) == graphdef
    for (p, a), (_, b) in zip(before.flat_state().items(), after.flat_state().items(), strict=True):
        np.testing.assert_array_equal(a.value, b.value, err_msg=str(p))


def test_relu_to_gelu(traced):
    _, params, batch, mox = traced
    gelu_mox = yax.make_mox(jax.nn.gelu)(jnp.ones((1, 10)))
    modified = yax.sub('//pjit[@name="relu"]', gelu_mox, mox)
    assert yax.query('//pjit[@name="relu"]', modified) == []
    assert yax.query('//pjit[@name="relu"]', mox)  # the input is untouched

    def reference(params, x):
        model = nnx.merge(nnx.graphdef(Net(nnx.Rngs(0))), params)
        for block in model.blocks:
            x = x + jax.nn.gelu(block.dense(x))
        return model.head(x)

    np.testing.assert_allclose(
        yax.eval_mox(modified, params, batch), reference(params, batch), rtol=1e-5
    )


def test_round_trip_through_xml_and_yson(traced, tmp_path):
    apply, params, batch, mox = traced
    for suffix in (".xml", ".yson"):
        path = tmp_path / f"model{suffix}"
        yax.dump(mox, path)
        loaded = yax.load(path)  # takes the traced arguments: the file records their paths
        np.testing.assert_allclose(
            yax.eval_mox(loaded, params, batch), apply(params, batch), rtol=1e-6
        )
        assert [n.name for n in yax.query("//module_call[@type='Linear']", loaded)] == [
            "blocks/0/dense",
            "blocks/1/dense",
            "head",
        ]
