"""What `loads` traces is kept for the next load of this process (`_load.TRACES`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_mox as mox_lib
from bryo_mox import _load
from bryo_mox.document import DocNode, loading, to_document
from bryo_pytree import BoundedCache

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


def model(v):
    """A leaf per kind of equation: plain primitives, a custom derivative (relu), a jit."""
    return jax.jit(jnp.tanh)(jax.nn.relu(v * 2.0) + jnp.sin(v))


@pytest.fixture
def traces(monkeypatch):
    """An empty `TRACES`, and the list of functions the loader traces (`jax.make_jaxpr`)."""
    monkeypatch.setattr(_load, "TRACES", BoundedCache(4096))
    traced = []
    make_jaxpr = jax.make_jaxpr
    monkeypatch.setattr(
        jax, "make_jaxpr", lambda fn, *a, **k: traced.append(fn) or make_jaxpr(fn, *a, **k)
    )
    return traced


@pytest.mark.parametrize("fmt", ["xml", "yson"])
def test_a_second_load_traces_nothing_and_evaluates_alike(bryo_plugin_manager, traces, fmt):
    text = mox_lib.dumps(mox_lib.make_mox(model)(X), format=fmt)
    first = mox_lib.loads(text, format=fmt)
    assert traces and len(_load.TRACES) > 0
    traces.clear()
    second = mox_lib.loads(text, format=fmt)
    assert traces == []
    np.testing.assert_allclose(mox_lib.eval_mox(second, X), model(X), rtol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda v: mox_lib.eval_mox(second, v).sum())(X),
        jax.grad(lambda v: model(v).sum())(X),
        rtol=1e-6,
    )
    assert mox_lib.dumps(second, format=fmt) == mox_lib.dumps(first, format=fmt)


def test_another_trace_context_traces_again(bryo_plugin_manager, traces):
    text = mox_lib.dumps(mox_lib.make_mox(model)(X))
    mox_lib.loads(text)
    traces.clear()
    with jax.default_matmul_precision("highest"):  # part of jax's trace context
        back = mox_lib.loads(text)
    assert traces
    np.testing.assert_allclose(mox_lib.eval_mox(back, X), model(X), rtol=1e-6)


def test_a_failed_trace_is_not_kept(bryo_plugin_manager, traces):
    text = mox_lib.dumps(mox_lib.make_mox(lambda v: v @ v.T)(X))
    broken = text.replace('"(((1,), (0,)), ((), ()))"', '"(((0,), (0,)), ((), ()))"')
    assert broken != text
    for _ in range(2):
        traces.clear()
        with pytest.raises(mox_lib.MoxSerializationError, match="equation `dot_general`") as error:
            mox_lib.loads(broken)
        assert traces and error.value.line == 7
    assert len(_load.TRACES) == 1  # the transpose before it, not the dot_general


def test_params_keyed_by_identity_are_not_shared():
    node = DocNode("reshape", {"new_sizes": [2, 4], "dimensions": None})
    with loading(0):
        builder = _load._Builder()
        assert builder.shared_key(node, []) is None
        node.attrs["new_sizes"] = (2, 4)
        assert builder.shared_key(node, []) is not None
    region = DocNode("custom_jvp_call", {"jvp": object()})
    assert _load._fingerprint(region)[1] is False
    region.attrs = {"name": "relu"}
    assert _load._fingerprint(region)[1] is True


def test_large_params_and_regions_with_constants_are_not_kept(bryo_plugin_manager, traces):
    big = tuple(range(1, 2 + _load.SHARED_KEY_CHARS // 3))
    node = DocNode("reshape", {"new_sizes": big, "dimensions": None})
    with loading(0):
        assert _load._Builder().shared_key(node, []) is None
    assert _load._small(("custom_jvp_call", ("scope", ())))
    assert not _load._small(("custom_jvp_call", ("const", "f32[2]", b"\0" * 8)))
    assert not _load._small(("scan",) * (_load.SHARED_FINGERPRINT_TOKENS + 1))
    # a custom derivative whose rule region holds a constant: traced again by the next load
    table = jnp.arange(3.0) + 1.0

    @jax.custom_jvp
    def scale(v):
        return v * table

    scale.defjvp(lambda p, t: (scale(p[0]), t[0] * table))
    text = mox_lib.dumps(mox_lib.make_mox(scale)(jnp.arange(3.0)))
    assert "<const" in text.split('<region param="jvp"')[1]
    mox_lib.loads(text)
    traces.clear()
    back = mox_lib.loads(text)
    assert traces  # the custom_jvp_call, whose region holds the constant
    grad = jax.grad(lambda v: mox_lib.eval_mox(back, v).sum())(jnp.arange(3.0))
    np.testing.assert_allclose(grad, table)


def test_loads_in_threads_share_the_cache(bryo_plugin_manager, traces):
    from concurrent.futures import ThreadPoolExecutor

    texts = [mox_lib.dumps(mox_lib.make_mox(f)(X)) for f in (model, jnp.tanh, lambda v: v @ v.T)]
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(mox_lib.loads, texts * 4))
    for back, text in zip(loaded, texts * 4, strict=True):
        assert mox_lib.dumps(back) == mox_lib.dumps(mox_lib.loads(text))
    np.testing.assert_allclose(mox_lib.eval_mox(loaded[0], X), model(X), rtol=1e-6)


def test_a_loaded_block_holds_the_constants_it_uses_in_the_order_it_uses_them(
    bryo_plugin_manager,
):
    from bryo_mox.document import Const, to_document

    tables = [jnp.full((2, 4), float(i)) for i in range(30)]
    f = lambda v: sum((v * t for t in tables[::-1]), v)  # uses them last to first
    mox = mox_lib.make_mox(f)(X)
    doc = to_document(mox)
    doc.consts.reverse()  # declared in another order, with one nothing uses
    doc.consts.append(Const("unused", "f32[3]", np.zeros(3, np.float32)))
    loaded = _load.from_document(doc)
    assert len(loaded.block.constvars) == len(mox.block.constvars) == 30
    first_use = []
    for node in loaded.block.nodes:
        first_use += [a for a in node.invars if a in loaded.block.constvars and a not in first_use]
    assert first_use == list(loaded.block.constvars)
    np.testing.assert_allclose(mox_lib.eval_mox(loaded, X), f(X), rtol=1e-6)


def test_fingerprints_with_the_documents_frozen_attrs_are_the_fresh_ones():
    # `_fingerprint` keeps each node's frozen attrs by its `attrs_key` for the document's
    # next fingerprints; what it gives is what a fresh one gives, and attrs keyed by
    # identity (an object without a content key) are never kept
    mox = mox_lib.make_mox(lambda v: jax.nn.relu(jax.nn.relu(v) * 2.0))(X)
    doc = to_document(mox)
    stack = [doc]
    while stack:
        node = stack.pop()
        node.attrs_key = repr(sorted(node.attrs.items()))
        stack.extend(node.children)
    customs = [c for c in doc.children if c.children]
    assert len(customs) == 2
    frozen: dict = {}
    for node in customs * 2:
        assert _load._fingerprint(node, frozen) == _load._fingerprint(node)
    assert frozen
    holder = DocNode("custom_jvp_call", {"w": object()}, children=customs[0].children)
    holder.attrs_key = "an object"
    kept = dict(frozen)
    assert _load._fingerprint(holder, frozen)[1] is False  # keyed by identity
    assert frozen == kept
