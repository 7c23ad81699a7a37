"""A model 1,000 modules deep: traced once, then converted, printed, evaluated, queried and
written to files without Python recursion (at the default recursion limit)."""

import contextlib
import contextvars
import inspect
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex

from bryo_mox import (
    Block,
    Limits,
    ModuleCall,
    ModuleInfo,
    Mox,
    MoxError,
    MoxSerializationError,
    dumps,
    eval_mox,
    loads,
    make_mox,
    pformat,
    query,
)
from bryo_mox._ir import iter_nodes
from bryo_mox._trace import convert_closed, intercepting
from bryo_plugins import hookimpl

DEPTH = 1000
_handler = contextvars.ContextVar("deep_handler", default=None)


class Layer:
    """`sin(inner(x) * scale)`; the innermost layer has no inner layer. Calls nest as deep
    as the layers do, as in any module system."""

    def __init__(self, inner, scale):
        self.inner, self.scale = inner, scale

    def forward(self, x):
        return jnp.sin((x if self.inner is None else self.inner(x)) * self.scale)

    def __call__(self, x):
        handler = _handler.get()
        if handler is None:
            return self.forward(x)
        info = ModuleInfo("deep.Layer", "", {"scale": self.scale})
        return handler(info, (), lambda _, v: ((), self.forward(v)), lambda _: None, (x,), {})


class DeepBackend:
    @hookimpl
    def bryo_mox_interceptor(self):
        @contextlib.contextmanager
        def intercept(handler):
            token = _handler.set(handler)
            try:
                yield
            finally:
                _handler.reset(token)

        return intercept


@contextlib.contextmanager
def recursion_limit(limit):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def recursion_depth():
    """The depth Python counts here: C calls on the stack (pytest's and pluggy's) count too,
    so the frames `inspect.stack` lists can be fewer. The lowest limit Python accepts is it."""
    old = sys.getrecursionlimit()
    depth = len(inspect.stack(0))
    while True:
        try:
            sys.setrecursionlimit(depth + 1)
        except RecursionError:
            depth += 1
        else:
            sys.setrecursionlimit(old)
            return depth


@pytest.fixture(scope="module")
def deep():
    """The model, its MoX and its marked jaxpr. Tracing recurses as deep as the model's
    own calls do (as `jax.make_jaxpr` of it would), so it runs with a raised limit."""
    from bryo_plugins import new_plugin_manager, use_plugin_manager

    model = None
    for depth in range(DEPTH):
        model = Layer(model, 1.0 + depth % 3)
    pm = new_plugin_manager()
    pm.register(DeepBackend())
    with use_plugin_manager(pm), recursion_limit(20 * DEPTH):
        x = jnp.linspace(0.0, 1.0, 4)
        mox = make_mox(model)(x)
        with intercepting():
            closed = jax.make_jaxpr(model)(x)
        expected = model(x)
    return mox, closed, x, expected


@pytest.mark.slow
def test_deep_model_converts_prints_evaluates_and_queries(deep):
    mox, closed, x, expected = deep
    with recursion_limit(1000):
        block = convert_closed(closed)
        calls = [n for n in iter_nodes(block) if isinstance(n, ModuleCall)]
        assert len(calls) == DEPTH
        text = pformat(mox)
        assert text.count("module_call[") == DEPTH
        np.testing.assert_allclose(eval_mox(mox, x), expected, rtol=1e-5)
        np.testing.assert_allclose(jax.jit(lambda v: eval_mox(mox, v))(x), expected, rtol=1e-5)
        assert len(query("//module_call[@scale=2.0]", mox)) == len(range(1, DEPTH, 3))
        assert query("count(//module_call//module_call)", mox) == DEPTH - 1


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["xml", "yson"])
def test_deep_model_is_written_to_files(deep, fmt):
    mox, _, x, expected = deep
    with recursion_limit(1000):
        text = dumps(mox, format=fmt)
    assert len(text) > DEPTH
    with pytest.raises(MoxSerializationError, match=r"deeper than|depth"):  # XML: libxml2's
        loads(text, format=fmt)
    with recursion_limit(1000):
        back = loads(text, format=fmt, limits=Limits(max_depth=4 * DEPTH))
        assert len(query("//module_call", back)) == DEPTH
        np.testing.assert_allclose(eval_mox(back, x), expected, rtol=1e-5)


def nnx_chain(depth):
    """An NNX-style model `depth` modules deep, each calling the next (a Linear at the
    bottom): its calls nest as deep as its modules."""
    nnx = pytest.importorskip("bryo_nnx")
    rngs = pytest.importorskip("bryo_rngs")

    class Wrap(nnx.Module):
        def __init__(self, inner, scale):
            self.inner, self.scale = inner, scale

        def __call__(self, x):
            return jnp.sin(self.inner(x) * self.scale)

    model = nnx.Linear(2, 2, rngs=rngs.Rngs(params=0))
    for level in range(depth - 1):
        model = Wrap(model, 1.0 + level % 3)
    return model


@pytest.mark.slow
def test_a_real_backends_deep_model_traces_at_the_default_recursion_limit():
    graph = pytest.importorskip("bryo_graph")
    model = nnx_chain(DEPTH)
    x = jnp.linspace(0.0, 1.0, 4).reshape(2, 2)
    with recursion_limit(1000):  # Python's default: the model alone nests 2 frames a call
        mox = make_mox(model)(x)
        assert pformat(mox).count("module_call[") == DEPTH
        assert len(str(graph.state(model))) > DEPTH
        with recursion_limit(20 * DEPTH):  # calling the model itself nests too deep
            expected = model(x)
        np.testing.assert_allclose(eval_mox(mox, x), expected, rtol=1e-5)
        for fmt in ("xml", "yson"):
            back = loads(dumps(mox, format=fmt), format=fmt, limits=Limits(max_depth=2 * DEPTH))
            assert query("count(//module_call)", back) == DEPTH
            np.testing.assert_allclose(eval_mox(back, x), expected, rtol=1e-5)


def test_a_model_deeper_than_tracing_allows_is_a_clear_error():
    limit = recursion_depth() + 30  # where the test runs, and some room
    depth = 2 * limit  # a traced call nests about 8 frames: 16 * limit > 10 * limit
    model, x = nnx_chain(depth), jnp.ones((1, 2))
    with recursion_limit(limit):
        with pytest.raises(MoxError, match="nested deeper than Python allows"):
            make_mox(model)(x)
        assert sys.getrecursionlimit() == limit  # given back
    assert query("count(//module_call)", make_mox(model)(x)) == depth


def test_a_mox_deeper_than_xpath_views_allow_is_a_clear_error_to_query():
    """libxml2 nests 2,048 elements at most: a deeper MoX prints and evaluates, and
    querying it is a MoxError, not lxml's XMLSyntaxError."""
    scalar = jax.core.ShapedArray((), jnp.float32)
    x = jex.Var(scalar)
    body = Block((), (), (x,), (), (x,))
    for _ in range(3000):
        y = jex.Var(scalar)
        call = ModuleCall(ModuleInfo("deep.Layer"), (x,), (y,), body, n_state=0, n_state_out=0)
        body = Block((), (), (x,), (call,), (y,))
    mox = Mox(body, None, None)
    with recursion_limit(1000):
        assert pformat(mox).count("module_call[") == 3000
        assert float(eval_mox(mox, jnp.float32(2.0))[0]) == 2.0
        with pytest.raises(MoxError, match="too deep to query"):
            query("//module_call", mox)
