"""A node made in one JAX trace refuses writes from inside another (Flax NNX 0.12's trace
level check): the write would leave a tracer in it, broken once the trace ends."""

from __future__ import annotations

import copy
import pickle
import sys

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import (
    Dict,
    List,
    Object,
    Param,
    TraceContextError,
    Variable,
    current_trace,
    merge,
    split,
)


class _Counter(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones(3))
        self.count = 0


def test_attribute_write_from_a_jit_closure_is_refused_and_the_node_kept() -> None:
    counter = _Counter()

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        with pytest.raises(TraceContextError, match=r"'_Counter'.*attribute 'count'.*nnx\.jit"):
            counter.count = x
        with pytest.raises(TraceContextError, match="as an argument"):
            counter.count = 1  # a plain value too, as Flax: the node belongs to another trace
        with pytest.raises(TraceContextError, match="attribute 'w'"):
            del counter.w
        return x

    step(jnp.zeros(()))
    assert counter.count == 0
    assert isinstance(counter.w, Param)


@pytest.mark.parametrize("transform", ["vmap", "scan"])
def test_variable_tracer_write_from_a_raw_transform_body_is_refused(transform: str) -> None:
    counter = _Counter()
    before = counter.w.value

    def body(carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        with pytest.raises(TraceContextError, match=r"Cannot mutate Param.*f32\[3\]"):
            counter.w.value = x
        with pytest.raises(TraceContextError):
            counter.w[...] = x
        return carry, x

    xs = jnp.zeros((2, 3))
    if transform == "vmap":
        jax.vmap(lambda x: body(x, x)[1])(xs)
    else:
        jax.lax.scan(body, jnp.zeros(()), xs)
    assert counter.w.value is before


def test_nodes_passed_as_arguments_are_made_in_the_trace_and_may_change() -> None:
    counter = _Counter()

    @jax.jit
    def step(counter: _Counter, x: jax.Array) -> _Counter:
        counter.count = 1  # a new node, unflattened inside this trace
        counter.w.value = counter.w.value + x
        return counter

    out = step(counter, jnp.ones(3))
    assert out.count == 1
    assert jnp.allclose(out.w.value, 2.0)
    assert counter.count == 0


def test_nodes_made_inside_the_trace_may_change_there() -> None:
    @jax.jit
    def build(x: jax.Array) -> jax.Array:
        counter = _Counter()
        counter.count = x
        counter.w.value = x * counter.w.value
        items = List([1])
        items.append(x)
        table = Dict(a=1)
        table.b = x
        return counter.w.value + items[1] + table.b

    assert jnp.allclose(build(jnp.float32(2.0)), 6.0)


def test_merged_nodes_belong_to_the_trace_they_were_merged_in() -> None:
    graphdef, state = split(_Counter())

    @jax.jit
    def step(state: object, x: jax.Array) -> jax.Array:
        counter = merge(graphdef, state)
        counter.count = x  # merged here: allowed
        counter.w.value = x * 2
        return counter.w.value

    assert jnp.allclose(step(state, jnp.ones(3)), 2.0)
    outer = merge(graphdef, state)

    @jax.jit
    def leak(x: jax.Array) -> jax.Array:
        with pytest.raises(TraceContextError):
            outer.count = x  # merged outside this trace
        return x

    leak(jnp.ones(()))


def test_containers_refuse_items_written_from_another_trace() -> None:
    items, table = List([1, 2]), Dict(a=1)

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        with pytest.raises(TraceContextError, match=r"'List'.*item \[2\]"):
            items.append(x)
        with pytest.raises(TraceContextError, match=r"'Dict'.*item \['a'\]"):
            table.a = x
        with pytest.raises(TraceContextError, match="'Dict'"):
            table.pop("a")
        return x

    step(jnp.zeros(()))
    assert list(items) == [1, 2]
    assert dict(table) == {"a": 1}


def test_copies_and_unpickled_nodes_belong_to_the_trace_that_made_them() -> None:
    counter = _Counter()
    copies = [copy.copy(counter), copy.deepcopy(counter), pickle.loads(pickle.dumps(counter))]
    for each in copies:
        each.count = 5  # made here, at the top level
        assert each.count == 5

    @jax.jit
    def inner(x: jax.Array) -> jax.Array:
        fresh = copy.deepcopy(counter)  # made in this trace
        fresh.count = x
        with pytest.raises(TraceContextError):
            copies[0].count = x
        return x

    inner(jnp.ones(()))


def test_variable_holding_a_tracer_was_put_in_the_trace_by_its_tracer() -> None:
    variable = Variable(jnp.zeros(()))

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        variable.set_raw_value(x)  # what a lifted transform does with the state it traces
        variable.value = variable.value + 1
        result = variable.value
        variable.set_raw_value(jnp.zeros(()))
        return result

    assert float(step(jnp.ones(()))) == 2.0


def test_current_trace_is_one_token_per_trace() -> None:
    top = current_trace()
    assert current_trace() is top
    seen = []

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        seen.append(current_trace())
        seen.append(current_trace())
        return x

    step(jnp.ones(()))
    assert seen[0] is seen[1]
    assert seen[0] != top


def test_nodes_of_a_compiled_merge_belong_to_the_trace_they_were_merged_in() -> None:
    graphdef, state = split(_Counter())
    merged = [merge(graphdef, state) for _ in range(40)]  # merged often: compiled
    merged[-1].count = 1

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        inner = merge(graphdef, state)
        inner.count = x
        with pytest.raises(TraceContextError):
            merged[-1].count = x
        return x

    step(jnp.ones(()))


def test_flax_except_clauses_catch_the_error_once_flax_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Code written for Flax catches `flax.errors.TraceContextError`: once Flax's errors
    module is imported, bryo's error is also an instance of Flax's class (bryo never
    imports Flax for it); it keeps bryo's name and pickles as bryo's class."""
    import types

    class FlaxTraceContextError(Exception):  # stands in for flax.errors.TraceContextError
        pass

    monkeypatch.delitem(sys.modules, "flax.errors", raising=False)
    assert type(TraceContextError("no Flax")) is TraceContextError

    flax_errors = types.ModuleType("flax.errors")
    flax_errors.TraceContextError = FlaxTraceContextError  # type: ignore[attr-defined]  # a stand-in module
    monkeypatch.setitem(sys.modules, "flax.errors", flax_errors)
    counter = _Counter()

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        try:
            counter.count = x
        except FlaxTraceContextError as error:
            caught.append(error)
        return x

    caught: list[BaseException] = []
    step(jnp.zeros(()))
    (error,) = caught
    assert isinstance(error, TraceContextError) and isinstance(error, FlaxTraceContextError)
    assert type(error).__name__ == "TraceContextError" and "attribute 'count'" in str(error)
    assert type(TraceContextError("again")) is type(error)  # one class per pair
    twin = pickle.loads(pickle.dumps(error))
    assert type(twin).__mro__[1:3] == (TraceContextError, RuntimeError)  # bryo's, re-mixed
    assert twin.args == error.args and counter.count == 0


def test_a_subclass_keeps_its_own_init_once_flax_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    class FlaxTraceContextError(Exception):
        pass

    class NamedError(TraceContextError):
        def __init__(self, name: str, *, where: str = "here") -> None:
            super().__init__(f"{name} changed {where}")

    flax_errors = types.ModuleType("flax.errors")
    flax_errors.TraceContextError = FlaxTraceContextError  # type: ignore[attr-defined]  # a stand-in module
    monkeypatch.setitem(sys.modules, "flax.errors", flax_errors)
    error = NamedError("w", where="in a jit")
    assert isinstance(error, NamedError) and isinstance(error, FlaxTraceContextError)
    assert str(error) == "w changed in a jit" and type(error).__name__ == "NamedError"
    assert type(NamedError("v")) is type(error)
