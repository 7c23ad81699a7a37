"""The transforms' caches: shared by threads working on separate models, emptied by
`bryo_graph.clear_caches()`, and not defeated by writes to unrelated modules."""

from __future__ import annotations

import threading

import jax.numpy as jnp

from bryo_graph import Object, Param, Variable, clear_caches
from bryo_transforms import jit


class Count(Variable):
    pass


class Scale(Object):
    def __init__(self, factor: float) -> None:
        self.factor = Param(jnp.full((2,), factor))
        self.calls = Count(jnp.array(0))

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        self.calls.value += 1
        return x * self.factor


def _plans(jitted: object) -> dict:
    """The call plans a jitted function holds: the `PlanCache` of the graph-mode jit whose
    bound `prepare` the returned `Jitted` calls."""
    graph_jit = jitted._prepare.__self__  # type: ignore[attr-defined]  # reads the private plan cache of a Jitted on purpose
    assert type(graph_jit.cache).__name__ == "PlanCache"
    return graph_jit.cache.plans


def test_a_write_to_an_unrelated_module_keeps_the_call_plan():
    call = jit(lambda m, x: m(x))
    model, other = Scale(2.0), Scale(3.0)
    call(model, jnp.ones(2))
    plans = dict(_plans(call))
    other.note = "unrelated"
    call(model, jnp.ones(2))
    assert _plans(call) == plans and len(plans) == 1
    model.note = "related"  # the model's own structure changed: a new plan
    call(model, jnp.ones(2))
    assert len(_plans(call)) == 2


def test_clear_caches_empties_the_call_plans():
    call = jit(lambda m, x: m(x))
    model = Scale(2.0)
    call(model, jnp.ones(2))
    assert _plans(call)
    clear_caches()
    assert not _plans(call)
    assert float(call(model, jnp.ones(2))[0]) == 2.0
    assert int(model.calls.value) == 2


def test_jit_from_several_threads_on_separate_models():
    call = jit(lambda m, x: m(x))
    errors: list[BaseException] = []
    models = [Scale(float(i)) for i in range(4)]
    barrier = threading.Barrier(4)

    def work(model: Scale, factor: float) -> None:
        try:
            barrier.wait()
            for _ in range(25):
                assert float(call(model, jnp.ones(2))[0]) == factor
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(m, float(i))) for i, m in enumerate(models)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert [int(m.calls.value) for m in models] == [25] * 4  # no update lost
