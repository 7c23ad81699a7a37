"""Python's operators, forwarded by wrapper types to the arrays they hold.

A `Variable` and a `NamedArray` both answer `+`, `<`, `-x` ... by applying the operator
to the array inside. The operator tables and the loop that installs one method per
operator live here, once; each wrapper supplies only how one operator is applied
(`make(name, op)`), and chooses which tables it forwards.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

ARITHMETIC_OPERATORS: Mapping[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "matmul": operator.matmul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
}
"""The binary operators with reflected (`__radd__`) and in-place (`__iadd__`) forms."""

COMPARISON_OPERATORS: Mapping[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}
"""The rich comparisons (`__lt__` ... `__ne__`)."""

UNARY_OPERATORS: Mapping[str, Callable[[Any], Any]] = {
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": operator.abs,
    "invert": operator.invert,
}
"""`-x`, `+x`, `abs(x)`, `~x`."""

CONVERSION_OPERATORS: Mapping[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "complex": complex,
    "index": operator.index,
    "trunc": lambda value: value.__trunc__(),
    "floor": lambda value: value.__floor__(),
    "ceil": lambda value: value.__ceil__(),
}
"""`int(x)`, `float(x)`, `complex(x)`, `operator.index(x)`, `math.trunc/floor/ceil(x)`."""


def forward_operators(
    cls: type,
    make: Callable[[str, Callable[..., Any]], Callable[..., Any]],
    operators: Mapping[str, Callable[..., Any]],
    *,
    prefix: str = "",
) -> None:
    """Give `cls` one method `__{prefix}{name}__` per operator, made by `make(name, op)`.

    Args:
        cls: the wrapper class.
        make: builds the method applying `op` (its result is renamed to the dunder name).
        operators: `name -> op`, e.g. `ARITHMETIC_OPERATORS`.
        prefix: `"r"` for reflected methods (`__radd__`), `"i"` for in-place ones.

    >>> class Box:
    ...     def __init__(self, value):
    ...         self.value = value
    >>> forward_operators(Box, lambda name, op: lambda self, o: op(self.value, o),
    ...                   {"add": operator.add})
    >>> Box(2) + 3
    5
    """
    for name, op in operators.items():
        method = make(name, op)
        method.__name__ = method.__qualname__ = f"__{prefix}{name}__"
        setattr(cls, method.__name__, method)
