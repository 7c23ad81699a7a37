"""`make_mox` and `eval_mox` on one shared model from 8 threads at once give what they give
one after the other, and leave the model as it was: NNX-style, Equinox, Flax NNX and Flax
Linen models, passed as arguments or closed over.

Before traces took turns, a model closed over whose call changes its state (batch
statistics) came out of concurrent traces holding another trace's tracers: traces failed
(`UnexpectedTracerError`) or came out different, and the model was broken for good."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import eval_mox, make_mox

THREADS = 8
ROUNDS = 3
X = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)


def nnx_style():
    nnx = pytest.importorskip("bryo_nnx")
    graph = pytest.importorskip("bryo_graph")
    rngs = pytest.importorskip("bryo_rngs").Rngs(params=0)

    class Model(nnx.Module):
        def __init__(self):
            self.up = nnx.Linear(3, 4, rngs=rngs)
            self.norm = nnx.BatchNorm(4, rngs=rngs)  # training mode: each call updates it
            self.down = nnx.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            return self.down(jax.nn.relu(self.norm(self.up(x))))

    return Model(), graph.state


def equinox():
    eqx = pytest.importorskip("equinox")
    graph = pytest.importorskip("bryo_graph")
    k1, k2 = jax.random.split(jax.random.key(0))

    class Model(eqx.Module):
        up: eqx.nn.Linear
        down: eqx.nn.Linear

        def __call__(self, x):
            return jax.vmap(lambda row: self.down(jax.nn.relu(self.up(row))))(x)

    model = Model(eqx.nn.Linear(3, 4, key=k1), eqx.nn.Linear(4, 2, key=k2))
    return model, lambda m: graph.split(m)[1]


def flax_nnx():
    nnx = pytest.importorskip("flax.nnx")
    pytest.importorskip("bryo_flax")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.up = nnx.Linear(3, 4, rngs=rngs)
            self.down = nnx.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            return self.down(jax.nn.relu(self.up(x)))

    return Model(nnx.Rngs(0)), nnx.state


def flax_linen():
    linen = pytest.importorskip("flax.linen")
    pytest.importorskip("bryo_flax")

    class Model(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(2)(jax.nn.relu(linen.Dense(4)(x)))

    module = Model()
    return (module, module.init(jax.random.key(0), X)), lambda m: m[1]


MODELS = {"nnx_style": nnx_style, "equinox": equinox, "flax_nnx": flax_nnx, "linen": flax_linen}


def call_of(model):
    """`f(*args)` calling `model` on X: a Linen model is its module and variables."""
    if isinstance(model, tuple):
        module, variables = model
        return lambda v, x: module.apply(v, x), (variables,)
    return lambda m, x: m(x), (model,)


def as_argument(model):
    call, model_args = call_of(model)
    return call, (*model_args, X)


def closed_over(model):
    call, model_args = call_of(model)
    return (lambda x: call(*model_args, x)), (X,)


def leaves(tree):
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def race(work, threads=THREADS):
    """Run `work()` in `threads` threads released at once; the errors they raised."""
    start = threading.Barrier(threads)
    errors = []

    def run():
        start.wait()
        try:
            work()
        except Exception as error:  # collected: the test reports them all
            errors.append(error)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return errors


#: The NNX-style model closed over is the case that broke; the rest run in the slow set.
CASES = [
    pytest.param(kind, how, marks=() if kind == "nnx_style" else pytest.mark.slow)
    for kind in sorted(MODELS)
    for how in (as_argument, closed_over)
]


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_concurrent_traces_equal_sequential_ones(kind, how):
    model, state_of = MODELS[kind]()
    state_before = leaves(state_of(model))
    fun, args = how(model)
    expected = make_mox(fun)(*args)
    expected_text, expected_out = str(expected), np.asarray(eval_mox(expected, *args))
    mismatches = []

    def trace_and_evaluate():
        for _ in range(ROUNDS):
            mox = make_mox(fun)(*args)
            if str(mox) != expected_text:
                mismatches.append(str(mox))
            np.testing.assert_allclose(eval_mox(mox, *args), expected_out, rtol=1e-6)

    assert race(trace_and_evaluate) == []
    assert mismatches == []
    for got, want in zip(leaves(state_of(model)), state_before, strict=True):
        np.testing.assert_array_equal(got, want)  # the model is untouched, and works
    np.testing.assert_allclose(fun(*args), expected_out, rtol=1e-6)


def test_evaluations_wait_for_a_trace_of_the_model_they_read():
    """Half the threads trace the model closed over (its modules hold tracers meanwhile),
    half evaluate a MoX of it taking the model as an argument."""
    model, _ = nnx_style()
    fun, args = closed_over(model)
    by_argument, model_args = as_argument(model)
    traced = make_mox(by_argument)(*model_args)
    expected = np.asarray(fun(*args))
    turn = iter(range(THREADS))

    def trace_or_evaluate():
        mine = next(turn)
        for _ in range(ROUNDS):
            if mine % 2:
                make_mox(fun)(*args)
            else:
                np.testing.assert_allclose(eval_mox(traced, *model_args), expected, rtol=1e-6)

    assert race(trace_or_evaluate) == []
    np.testing.assert_allclose(fun(*args), expected, rtol=1e-6)


def test_a_traced_function_may_trace_again():
    """The turn is re-entrant: a function traced may call `make_mox` and `eval_mox`."""
    inner = make_mox(jnp.sin)(X)

    def outer(x):
        again = make_mox(jnp.cos)(x)
        return eval_mox(inner, x) + eval_mox(again, x)

    mox = make_mox(outer)(X)
    np.testing.assert_allclose(eval_mox(mox, X), jnp.sin(X) + jnp.cos(X), rtol=1e-6)
