"""What every MoX file format must round-trip, run for each serializer plugin."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_mox as yax
from bryo_mox.testing import Linear, LoRA, ToyBackend, assert_round_trip

FORMATS = ["xml", "yson"]
X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


@pytest.fixture
def toy(bryo_plugin_manager):
    bryo_plugin_manager.register(ToyBackend())
    return bryo_plugin_manager


def _stacked_scan(stacked, v):
    body = jax.checkpoint(lambda h, lin: (jnp.tanh(lin(h)), None))
    return jax.lax.scan(body, v, stacked)[0]


@pytest.mark.parametrize("format", FORMATS)
def test_lora_inside_scan_round_trip(toy, format):
    layers = [Linear(4, 4, key=k) for k in jax.random.split(jax.random.key(0), 3)]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *layers)
    mox = yax.make_mox(_stacked_scan)(stacked, X)
    lora = LoRA(Linear(4, 4, key=jax.random.key(1)), rank=2, key=jax.random.key(2))
    lora_mox = yax.make_mox(lambda m, v: m(v))(lora, X)
    new = yax.sub('//module_call[@type="Linear"]', lora_mox, mox, with_state=True)
    extra = {k: jnp.full(s.shape, 0.1, s.dtype) for k, s in new.extra_params}
    back = assert_round_trip(new, format, stacked, X, extra)
    assert [k for k, _ in back.extra_params] == ["Linear:0", "Linear:1"]
    assert yax.query("//scan//remat2//module_call[@type='LoRA']/module_call", back)


@pytest.mark.parametrize("format", FORMATS)
def test_prng_keys_round_trip(bryo_plugin_manager, format):
    key = jax.random.key(3)

    def f(k, seed, v):
        data = jax.random.key_data(jax.random.key(seed))
        k2 = jax.random.fold_in(jax.random.wrap_key_data(data), 1)
        noise = jax.random.normal(key, v.shape) + jax.random.uniform(k2, v.shape)
        return v + noise + jax.random.normal(k, v.shape), jax.random.split(k, 2)

    mox = yax.make_mox(f)(key, jnp.int32(1), X)
    text = yax.dumps(mox, format=format)
    assert "key<fry>[]" in (text if isinstance(text, str) else text.decode()).replace(
        "&lt;", "<"
    ).replace("&gt;", ">")
    back = assert_round_trip(mox, format, key, jnp.int32(1), X)
    assert "key<fry>[2]" in str(back)


# -- hostile and malformed files: every format refuses them the same way ----------------

import copy  # noqa: E402
import tracemalloc  # noqa: E402

from bryo_mox import MoxLimitError, MoxSerializationError  # noqa: E402
from bryo_mox._hooks import serializer_for  # noqa: E402
from bryo_mox.document import DocNode, Limits, Port, to_document  # noqa: E402


def _text(doc, format):
    return serializer_for(format).dumps(doc)


def _doc(fun, *args):
    return to_document(yax.make_mox(fun)(*args))


def _refused(format, doc, match, kind=MoxSerializationError, **kwargs):
    with pytest.raises(kind, match=match) as info:
        yax.loads(_text(doc, format), format, **kwargs)
    error = info.value
    assert error.line is not None or error.path is not None, "the error must say where"
    return error


@pytest.mark.parametrize("format", FORMATS)
def test_region_index_is_bounded_by_the_regions_present(bryo_plugin_manager, format):
    doc = _doc(lambda p, v: jax.lax.cond(p, jnp.sin, jnp.cos, v), True, X)
    (cond,) = [c for c in doc.children if c.tag == "cond"]
    cond.children[1].attrs["index"] = 10**9
    _refused(format, doc, "index")


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("count", [float("inf"), 10**100, "x", -1, 99])
def test_module_counts_must_be_small_integers(toy, format, count):
    doc = _doc(lambda m, v: m(v), Linear(4, 4, key=jax.random.key(0)), X)
    doc.children[0].attrs["state_inputs"] = count
    _refused(format, doc, "state_inputs")


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("value", [10**100, 2**40, 1.5, (1, 2)])
def test_literals_must_fit_their_type(bryo_plugin_manager, format, value):
    doc = _doc(lambda v: v * 2, jnp.arange(3, dtype=jnp.int32))
    (mul,) = doc.children
    (literal,) = [p for p in mul.inputs if p.name is None]
    literal.value = value
    literal.type = "i32[]"
    _refused(format, doc, "literal|integer|fit")


@pytest.mark.parametrize("format", FORMATS)
def test_literal_type_is_checked_against_its_value(bryo_plugin_manager, format):
    doc = _doc(lambda v: v * 2.0, X)
    (literal,) = [p for p in doc.children[0].inputs if p.name is None]
    literal.type = "f32[4]"
    _refused(format, doc, "literal")


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("where", ["input", "output", "result", "module input"])
def test_declared_types_are_checked_against_what_they_connect_to(toy, format, where):
    doc = _doc(lambda m, v: m(v) + 1.0, Linear(4, 4, key=jax.random.key(0)), X)
    call, add = doc.children
    port = {
        "input": add.inputs[0],
        "output": add.outputs[0],
        "result": doc.results[0],
        "module input": call.inputs[-1],
    }[where]
    port.type = "f32[5,4]"
    _refused(format, doc, r"f32\[5,4\]")


@pytest.mark.parametrize("format", FORMATS)
def test_malformed_type_text_is_refused(bryo_plugin_manager, format):
    doc = _doc(jnp.sin, X)
    doc.inputs[0].type = "f32[1 2]"
    _refused(format, doc, "shape")


@pytest.mark.parametrize("format", FORMATS)
def test_duplicate_root_inputs_are_refused(bryo_plugin_manager, format):
    doc = _doc(lambda a, b: a + b, X, X)
    doc.inputs[1] = copy.copy(doc.inputs[0])
    _refused(format, doc, "twice")


def _nested_calls(depth):
    """A root calling a module that calls a module ... `depth` deep, the last one adds."""
    leaf = DocNode(
        "add",
        inputs=[Port("x", "f32[2]"), Port("x", "f32[2]")],
        outputs=[Port("y", "f32[2]")],
    )
    node = leaf
    for level in range(depth):
        node = DocNode(
            "module_call",
            {"type": "Id", "qualtype": "pkg.Id", "name": f"m{level}", "state_inputs": 0},
            inputs=[Port("x", "f32[2]")],
            outputs=[Port("y", "f32[2]")],
            children=[node],
            results=[Port("y", "f32[2]")],
        )
    return DocNode(
        "mox",
        {"in_tree": (0,), "out_tree": 0, "extra": ()},
        inputs=[Port("x", "f32[2]")],
        children=[node],
        results=[Port("y", "f32[2]")],
    )


@pytest.mark.parametrize("format", FORMATS)
def test_deeply_nested_module_calls_load_or_fail_cleanly(bryo_plugin_manager, format):
    back = yax.loads(_text(_nested_calls(120), format), format)
    assert len(yax.query("//module_call", back)) == 120
    np.testing.assert_allclose(yax.eval_mox(back, jnp.ones(2)), 2 * jnp.ones(2))
    with pytest.raises(MoxLimitError, match="deeper than 200"):
        yax.loads(_text(_nested_calls(250), format), format)


@pytest.mark.parametrize("format", FORMATS)
def test_array_budget_is_configurable(bryo_plugin_manager, format):
    weights = jnp.ones((64, 64))
    text = yax.dumps(yax.make_mox(lambda v: v @ weights)(jnp.ones((2, 64))), format)
    with pytest.raises(MoxLimitError, match="array budget"):
        yax.loads(text, format, limits=Limits(array_bytes=1000))
    assert yax.loads(text, format, limits=Limits(array_bytes=64 * 64 * 4))


@pytest.mark.parametrize("format", FORMATS)
def test_huge_declared_constant_is_refused_before_allocating(bryo_plugin_manager, format):
    doc = _doc(lambda v: v + np.arange(4.0, dtype=np.float32), jnp.ones(4))
    doc.consts[0].type = "f64[8000,8000]"
    tracemalloc.start()
    try:
        _refused(format, doc, "array budget", MoxLimitError)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20


@pytest.mark.parametrize("format", FORMATS)
def test_node_count_is_bounded(bryo_plugin_manager, format):
    text = yax.dumps(yax.make_mox(lambda v: jnp.sin(jnp.cos(v)) * 2)(X), format)
    with pytest.raises(MoxLimitError, match="nodes"):
        yax.loads(text, format, limits=Limits(max_nodes=5))


@pytest.mark.parametrize("format", FORMATS)
def test_keyword_arguments_round_trip(bryo_plugin_manager, format):
    def f(v, *, scale, train):
        return v * scale["a"] if train else v

    mox = yax.make_mox(f)(X, scale={"a": jnp.float32(3.0)}, train=True)
    back = yax.loads(yax.dumps(mox, format), format)
    assert back.in_tree == mox.in_tree and back.kwargs_tree == mox.kwargs_tree
    assert back.static_kwargs == (("train", True),)
    np.testing.assert_allclose(
        yax.eval_mox(back, X, scale={"a": jnp.float32(2.0)}, train=True), 2 * X
    )


@pytest.mark.parametrize("format", FORMATS)
def test_custom_rule_regions_must_fit_the_equation(bryo_plugin_manager, format):
    """A rule region that lost its result loaded once, and failed only when differentiated."""
    doc = _doc(lambda v: jax.nn.relu(v) * 2, X)
    (custom,) = [c for c in doc.children if c.tag == "custom_jvp_call"]
    (rule,) = [r for r in custom.children if r.attrs["param"] == "jvp"]
    rule.results = []
    _refused(format, doc, r"jvp returns \(\); the equation needs \(f32\[2,4\]\)")


@pytest.mark.parametrize("format", FORMATS)
def test_while_regions_must_fit_the_loop(bryo_plugin_manager, format):
    def loop(v):
        return jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, v))

    doc = _doc(loop, X)
    (node,) = [c for c in doc.children if c.tag == "while"]
    (cond,) = [r for r in node.children if r.attrs["param"] == "cond_jaxpr"]
    cond.results = [Port(cond.inputs[0].name, cond.inputs[0].type)]  # the counter, not a bool
    _refused(format, doc, r"cond_jaxpr returns \(i32\[\]\)")
