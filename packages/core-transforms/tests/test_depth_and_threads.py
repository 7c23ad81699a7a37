"""Lifted transforms on a model 1,000 levels deep (their walks keep their own stacks), and
several threads calling them on one shared model: an update is never lost silently; the
call that would lose one raises `ConcurrentUpdateError` and writes nothing."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param, Variable
from bryo_transforms import ConcurrentUpdateError, TransformError, grad, jit, remat


class Block(Object):
    def __init__(self, inner: Block | None) -> None:
        self.inner = inner
        self.w = Param(jnp.ones(()))


def chain(depth: int) -> Block:
    block = None
    for _ in range(depth):
        block = Block(block)
    assert block is not None
    return block


def total(block: Block | None) -> jnp.ndarray:
    out = jnp.zeros(())
    while block is not None:
        out = out + block.w[...]
        block = block.inner
    return out


@pytest.fixture(scope="module")
def deep() -> Block:
    return chain(1000)


@pytest.mark.slow  # compiling 1,000 additions: ~9 s
def test_jit_and_grad_take_a_model_1000_levels_deep(deep):
    assert float(jit(total)(deep)) == 1000.0
    grads = grad(total)(deep)
    assert float(grads.inner.inner.w[...]) == 1.0


def test_a_structure_change_deep_inside_is_written_back(deep):
    def add_leaf(block: Block) -> Block:
        innermost = block
        while innermost.inner is not None:
            innermost = innermost.inner
        innermost.extra = Param(jnp.full((), 2.0))
        return block

    out = jit(add_leaf)(deep)
    innermost = deep
    while innermost.inner is not None:
        innermost = innermost.inner
    assert out is deep and float(innermost.extra[...]) == 2.0


class Counter(Object):
    def __init__(self) -> None:
        self.count = Variable(jnp.zeros((), jnp.int32))


def _race(step, model: Counter, graph: bool = True) -> tuple[int, list[BaseException]]:
    """Run `remat(step)(model)` from two threads at once; `step` meets a barrier, so both
    calls have read the model before either writes back."""
    done: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            remat(step, graph=graph, graph_updates=graph)(model)
            done.append(1)
        except ConcurrentUpdateError as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(done), errors


@pytest.mark.parametrize("graph", [True, False], ids=["graph mode", "simple mode"])
def test_two_threads_updating_one_model_never_lose_an_update_silently(graph):
    model = Counter()
    barrier = threading.Barrier(2, timeout=120)

    def step(m: Counter) -> None:
        barrier.wait()
        m.count[...] += 1

    done, errors = _race(step, model, graph)
    assert done == 1 and len(errors) == 1
    assert int(model.count[...]) == 1  # the update that was written, the other refused
    message = str(errors[0])
    assert "take turns" in message and "nnx.clone" in message
    assert ("count" in message) if graph else ("Variable" in message)
    assert isinstance(errors[0], TransformError)


def test_threads_reading_one_model_run_side_by_side():
    model = Counter()
    barrier = threading.Barrier(2, timeout=120)

    def look(m: Counter) -> None:
        barrier.wait()
        m.count[...] + 1

    assert _race(look, model) == (2, [])


def test_threads_taking_turns_keep_every_update():
    model = Counter()
    lock = threading.Lock()
    step = jit(lambda m: m.count.__setitem__(..., m.count[...] + 1))

    def run() -> None:
        for _ in range(5):
            with lock:
                step(model)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int(model.count[...]) == 20
