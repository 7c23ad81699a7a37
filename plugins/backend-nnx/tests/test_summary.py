"""`eval_shape` (abstract models at no cost) and `tabulate` (a table of module calls, shapes
and state sizes), on models with nested, shared and multi-method modules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import bryo_graph as graph
from bryo_graph import BatchStat, Param
from bryo_nnx import BatchNorm, Dropout, Linear, Module, eval_shape, relu, tabulate
from bryo_rngs import Rngs


class Block(Module):
    def __init__(self, din: int, dout: int, rngs: Rngs) -> None:
        self.linear = Linear(din, dout, rngs=rngs)
        self.bn = BatchNorm(dout, rngs=rngs)
        self.dropout = Dropout(0.2, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        return relu(self.dropout(self.bn(self.linear(x))))


class Model(Module):
    def __init__(self, rngs: Rngs) -> None:
        self.block1 = Block(4, 8, rngs)
        self.block2 = Block(8, 2, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.block2.forward(self.block1.forward(x))


def test_eval_shape_builds_an_abstract_model_and_leaves_arguments_alone():
    abstract = eval_shape(lambda: Model(Rngs(0)))
    kernel = abstract.block1.linear.kernel
    assert isinstance(kernel, Param) and kernel.value == jax.ShapeDtypeStruct((4, 8), jnp.float32)
    model = Model(Rngs(0))
    before = graph.state(model, BatchStat)
    out = eval_shape(lambda m, x: (m(x), m), model, jnp.ones((3, 4)))
    assert out[0] == jax.ShapeDtypeStruct((3, 2), jnp.float32)
    assert isinstance(out[1].block2.bn.mean.value, jax.ShapeDtypeStruct)
    assert graph.state(model, BatchStat) == before  # the BatchNorm update stayed abstract


def test_tabulate_rows_follow_the_calls_with_shapes_and_sizes():
    table = tabulate(Model(Rngs(0)), jnp.ones((1, 4)))
    lines = table.splitlines()
    assert lines[0].strip() == "Model Summary"
    header = lines[2]
    for column in ("path", "type", "inputs", "outputs", "BatchStat", "Param", "RngState"):
        assert column in header
    rows = [line for line in lines if line.startswith("│ ") and line.split("│")[1].strip()]
    assert [r.split("│")[1].strip() for r in rows] == [
        "block1/forward",
        "block1/linear",
        "block1/bn",
        "block1/dropout",
        "block2/forward",
        "block2/linear",
        "block2/bn",
        "block2/dropout",
    ]
    linear = next(i for i, line in enumerate(lines) if "block1/linear" in line)
    assert "float32[1,4]" in lines[linear] and "float32[1,8]" in lines[linear]
    assert "kernel: float32[4,8]" in lines[linear + 1]
    assert "40 (160 B)" in lines[linear + 3]  # 4*8 + 8 parameters
    total = next(line for line in lines if "Total " in line and "│" in line)
    assert "20 (80 B)" in total  # BatchStat: mean and var, of 8 and of 2 features
    params = (4 * 8 + 8) + (8 + 8) + (8 * 2 + 2) + (2 + 2)
    assert f"{params} ({params * 4} B)" in total
    assert f"Total Parameters: {params + 20 + 4:,}" in table  # and 2 streams' key and count


def test_tabulate_depth_shared_modules_multiple_outputs_and_flops():
    class Shared(Module):
        def __init__(self) -> None:
            self.linear = Linear(2, 2, rngs=Rngs(0))
            self.same = self.linear

        def __call__(self, x):
            y = self.same(self.linear(x))
            return x, y, {"doubled": 2 * y}

    table = tabulate(Shared(), jnp.ones((3, 2)), depth=1, compute_flops=True)
    rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│ ")]
    assert rows.count("linear") == 1  # one row per distinct call of a shared module
    assert "- float32[3,2]" in table and "- {doubled: float32[3,2]}" in table
    assert "flops" in table.splitlines()[2]
    assert tabulate(Shared(), jnp.ones((3, 2)), depth=0).count("linear") == 0


@pytest.mark.parametrize("flops", [{}, {"compute_flops": True}, {"compute_vjp_flops": True}])
def test_a_module_shared_by_two_measured_blocks_is_one_row(flops):
    class Wrap(Module):
        def __init__(self, linear: Linear) -> None:
            self.linear = linear

        def __call__(self, x):
            return self.linear(x)

    class Pair(Module):
        def __init__(self) -> None:
            shared = Linear(2, 2, rngs=Rngs(0))
            self.first, self.second = Wrap(shared), Wrap(shared)

        def __call__(self, x):
            return self.second(self.first(x))

    table = tabulate(Pair(), jnp.ones((3, 2)), **flops)
    rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│ ")]
    # the blocks are measured inside their own traces: the shared Linear stays one module
    assert [r for r in rows if r] == ["first", "first/linear", "second"]


def test_tabulate_records_inherited_methods():
    class Wide(Linear):
        pass

    class Holder(Module):
        def __init__(self) -> None:
            self.wide = Wide(2, 3, rngs=Rngs(0))

        def __call__(self, x):
            return self.wide(x)

    table = tabulate(Holder(), jnp.ones((1, 2)))
    assert "│ wide " in table and "Wide" in table


def test_with_flops_each_module_body_still_runs_once():
    calls = []

    class Counted(Block):
        def forward(self, x):
            calls.append(1)
            return super().forward(x)

    class Twice(Module):
        def __init__(self) -> None:
            self.a, self.b = Counted(4, 4, Rngs(0)), Counted(4, 4, Rngs(1))

        def __call__(self, x):
            return self.b.forward(self.a.forward(x))

    table = tabulate(Twice(), jnp.ones((1, 4)), compute_flops=True)
    assert len(calls) == 2
    assert "a/forward" in table and "a/linear" in table and "b/bn" in table


def test_tabulate_leaves_the_model_and_its_classes_as_they_were():
    model = Model(Rngs(0))
    before = graph.state(model)
    tabulate(model, jnp.ones((1, 4)))
    assert graph.state(model) == before
    assert "recorded" not in repr(Block.forward)  # the methods are restored
    assert model(jnp.ones((1, 4))).shape == (1, 2)


def test_tabulate_errors_name_the_problem():
    with pytest.raises(AttributeError, match="Model has no method 'encode'"):
        tabulate(Model(Rngs(0)), jnp.ones((1, 4)), method="encode")
    with pytest.raises(TypeError, match="summarizes a Module; got dict"):
        tabulate({}, jnp.ones(1))
