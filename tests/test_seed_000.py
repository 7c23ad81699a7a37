"""Seed 000 (Flax NNX filters), every code cell, on bryo: `from bryo import nnx`.

Cells that build on earlier ones share a test. Besides what each cell prints, the tests
check the seed's claims: which group each value lands in, the filter literals' predicates,
order-dependent grouping, and that the `nnx.vmap(in_axes=(state_axes, 0))` of the DSL
section maps Params and the `dropout` stream while broadcasting the rest.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from bryo import nnx


class Foo(nnx.Module):
    def __init__(self):
        self.a = nnx.Param(0)
        self.b = nnx.BatchStat(True)


def test_split_by_type_filters() -> None:
    foo = Foo()

    graphdef, params, batch_stats = nnx.split(foo, nnx.Param, nnx.BatchStat)  # noqa: RUF059

    print(f"{params = }")
    print(f"{batch_stats = }")
    assert list(params.flat_state()) == [("a",)] and params["a"].value == 0
    assert list(batch_stats.flat_state()) == [("b",)] and batch_stats["b"].value is True


def test_the_filter_protocol() -> None:
    def is_param(path, value) -> bool:
        return isinstance(value, nnx.Param) or (
            hasattr(value, "type") and issubclass(value.type, nnx.Param)
        )

    print(f"{is_param((), nnx.Param(0)) = }")
    print(f"{is_param((), nnx.VariableState(type=nnx.Param, value=0)) = }")
    assert is_param((), nnx.Param(0))
    assert is_param((), nnx.VariableState(type=nnx.Param, value=0))

    is_param = nnx.OfType(nnx.Param)

    print(f"{is_param((), nnx.Param(0)) = }")
    print(f"{is_param((), nnx.VariableState(type=nnx.Param, value=0)) = }")
    assert is_param((), nnx.Param(0))
    assert is_param((), nnx.VariableState(type=nnx.Param, value=0))
    assert not is_param((), nnx.BatchStat(0))


def test_the_filter_dsl_in_vmap() -> None:
    state_axes = nnx.StateAxes({(nnx.Param, "dropout"): 0, ...: None})

    @nnx.vmap(in_axes=(state_axes, 0))
    def forward(model, x): ...

    # Beyond the seed: the same StateAxes on a model with Params, a dropout stream and a
    # BatchStat maps the first two over axis 0 and broadcasts the BatchStat.
    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.arange(8.0).reshape(4, 2))
            self.rngs = nnx.Rngs(dropout=0).split({"dropout": 4})
            self.stat = nnx.BatchStat(jnp.ones(2))

        def __call__(self, x):
            noise = self.rngs.dropout.uniform(())
            return self.w.value * x * self.stat.value + 0 * noise, noise

    @nnx.vmap(in_axes=(state_axes, 0))
    def forward(model, x):  # noqa: F811 (the seed's `forward`, now doing something)
        return model(x)

    model = Model()
    y, noise = forward(model, jnp.ones((4, 2)))
    np.testing.assert_allclose(y, model.w.value)
    assert len(set(np.asarray(noise).tolist())) == 4  # one key per mapped element
    np.testing.assert_array_equal(model.rngs.dropout.count.value, [1, 1, 1, 1])
    assert model.stat.value.shape == (2,)


def test_to_predicate() -> None:
    is_param = nnx.filterlib.to_predicate(nnx.Param)
    everything = nnx.filterlib.to_predicate(...)
    nothing = nnx.filterlib.to_predicate(False)
    params_or_dropout = nnx.filterlib.to_predicate((nnx.Param, "dropout"))

    print(f"{is_param = }")
    print(f"{everything = }")
    print(f"{nothing = }")
    print(f"{params_or_dropout = }")
    assert is_param == nnx.OfType(nnx.Param)
    assert everything == nnx.Everything() and nothing == nnx.Nothing()
    assert params_or_dropout == nnx.Any(nnx.OfType(nnx.Param), nnx.WithTag("dropout"))


KeyPath = tuple[nnx.graph.Key, ...]


def split(node, *filters):
    graphdef, state = nnx.graph.flatten(node)
    predicates = [nnx.filterlib.to_predicate(f) for f in filters]
    flat_states: list[dict[KeyPath, Any]] = [{} for p in predicates]

    for path, value in state.flat_state().items():
        for i, predicate in enumerate(predicates):
            if predicate(path, value):
                flat_states[i][path] = value
                break
        else:
            raise ValueError(f"No filter matched {path = } {value = }")

    states: tuple[nnx.GraphState, ...] = tuple(
        nnx.State.from_flat_path(flat_state) for flat_state in flat_states
    )
    return graphdef, *states


def test_grouping_states_by_hand() -> None:
    foo = Foo()

    graphdef, params, batch_stats = split(foo, nnx.Param, nnx.BatchStat)

    print(f"{params = }")
    print(f"{batch_stats = }")
    assert list(params.flat_state()) == [("a",)]
    assert list(batch_stats.flat_state()) == [("b",)]
    restored = nnx.merge(graphdef, params, batch_stats)
    assert restored.a.value == 0 and restored.b.value is True


def test_filtering_is_order_dependent() -> None:
    class SpecialParam(nnx.Param):
        pass

    class Bar(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(0)
            self.b = SpecialParam(0)

    bar = Bar()

    graphdef, params, special_params = split(bar, nnx.Param, SpecialParam)  # wrong!
    print(f"{params = }")
    print(f"{special_params = }")
    assert set(params.flat_state()) == {("a",), ("b",)} and not special_params.flat_state()

    graphdef, special_params, params = split(bar, SpecialParam, nnx.Param)  # noqa: RUF059 correct!
    print(f"{params = }")
    print(f"{special_params = }")
    assert list(params.flat_state()) == [("a",)]
    assert list(special_params.flat_state()) == [("b",)]
