"""forward_operators: one method per operator, named as Python looks it up, made by the
wrapper's own `make`; the tables hold the operators Python dispatches to dunders."""

from __future__ import annotations

import math
import operator

import pytest

from bryo_pytree import (
    ARITHMETIC_OPERATORS,
    COMPARISON_OPERATORS,
    CONVERSION_OPERATORS,
    UNARY_OPERATORS,
    forward_operators,
)


class Box:
    def __init__(self, value):
        self.value = value


forward_operators(
    Box, lambda name, op: lambda self, other: op(self.value, other), ARITHMETIC_OPERATORS
)
forward_operators(
    Box,
    lambda name, op: lambda self, other: op(other, self.value),
    ARITHMETIC_OPERATORS,
    prefix="r",
)
forward_operators(
    Box, lambda name, op: lambda self, other: op(self.value, other), COMPARISON_OPERATORS
)
forward_operators(
    Box, lambda name, op: lambda self: op(self.value), {**UNARY_OPERATORS, **CONVERSION_OPERATORS}
)


@pytest.mark.parametrize("name", sorted(ARITHMETIC_OPERATORS))
def test_binary_operators_forward_both_ways(name):
    op = ARITHMETIC_OPERATORS[name]
    if name == "matmul":
        return  # ints have no matmul; the name is still installed
    assert op(Box(6), 3) == op(6, 3)
    assert op(6, Box(3)) == op(6, 3)
    assert getattr(Box, f"__{name}__").__name__ == f"__{name}__"
    assert getattr(Box, f"__r{name}__").__name__ == f"__r{name}__"


def test_comparisons_unary_operators_and_conversions_forward():
    box = Box(2.5)
    assert (box < 3, box >= 3, box == 2.5, box != 2.5) == (True, False, True, False)
    assert (-box, +box, abs(Box(-1)), ~Box(5)) == (-2.5, 2.5, 1, -6)
    assert (int(box), float(box), complex(box)) == (2, 2.5, 2.5 + 0j)
    assert (math.trunc(box), math.floor(box), math.ceil(box)) == (2, 2, 3)
    assert operator.index(Box(4)) == 4
