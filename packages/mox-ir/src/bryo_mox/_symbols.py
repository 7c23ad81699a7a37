"""YAX's symbols: `Var` and `Literal` over the jaxpr atoms a MoX is wired with.

A node's `inputs`/`outputs` (YAX's names for `invars`/`outvars`) hold these. A symbol
wraps one atom (`jax.extend.core.Var` or `Literal`) and stands for it: two symbols are
equal when they wrap the same atom, so `call.inputs == call.outputs` says a call passes
its input through. `Var(aval)` and `Literal(value)` make fresh atoms, as YAX's do.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.core
import numpy as np
from jax.extend import core as jex

from ._errors import MoxError


class Symbol:
    """A value of a MoX at evaluation time: a variable (`Var`) or a constant (`Literal`).

    Attributes:
        atom: the jaxpr atom it stands for (`jax.extend.core.Var` or `Literal`).
    """

    __slots__ = ("atom",)

    atom: jex.Var | jex.Literal

    def __new__(cls, value: Any, aval: Any = None) -> Symbol:
        if cls is Symbol:
            atom = value if isinstance(value, (jex.Var, jex.Literal)) else None
            is_var = isinstance(atom, jex.Var) or (
                atom is None and isinstance(value, jax.core.AbstractValue)
            )
            cls = Var if is_var else Literal
        return object.__new__(cls)

    def __init__(self, value: Any, aval: Any = None) -> None:
        self.atom = _atom(type(self), value, aval)

    @property
    def aval(self) -> jax.core.AbstractValue:
        """The symbol's type (a `ShapedArray`)."""
        return self.atom.aval

    @property
    def value(self) -> Any:
        """YAX's `value`: a variable's type (`ShapedArray`), a literal's constant."""
        atom = self.atom
        return atom.val if isinstance(atom, jex.Literal) else atom.aval

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Symbol) and other.atom is self.atom

    def __hash__(self) -> int:
        return id(self.atom)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.atom}:{self.atom.aval.str_short()})"


class Var(Symbol):
    """A variable: `Var(aval)` makes a fresh one of type `aval` (a `ShapedArray`)."""

    __slots__ = ()


class Literal(Symbol):
    """A constant: `Literal(value)` (its type is `value`'s unless `aval` is given)."""

    __slots__ = ()

    @property
    def const(self) -> Any:
        """The constant (YAX's name; `value` too)."""
        return self.value


def _atom(cls: type[Symbol], value: Any, aval: Any) -> jex.Var | jex.Literal:
    if isinstance(value, Symbol):
        value = value.atom
    if cls is Var:
        if isinstance(value, jex.Var):
            return value
        if isinstance(value, jax.core.AbstractValue):
            return jex.Var(value)
        raise MoxError(
            f"`Var` takes a jaxpr variable or an abstract value (a `ShapedArray`), got "
            f"{type(value).__name__}; a constant is a `Literal`."
        )
    if isinstance(value, jex.Literal):
        return value
    if isinstance(value, (jex.Var, jax.core.AbstractValue)):
        raise MoxError(
            f"`Literal` takes a constant (an array or a number), got "
            f"{type(value).__name__}; a placeholder is a `Var`."
        )
    if aval is None:
        aval = _typeof(np.asarray(value) if isinstance(value, list) else value)
    return jex.Literal(value, aval)


#: `jax.typeof` (jax 0.10 removed `jax.core.get_aval`, which older ones have).
_typeof: Any = getattr(jax, "typeof", None) or getattr(jax.core, "get_aval", None)


def symbol(atom: jex.Var | jex.Literal) -> Symbol:
    """The symbol standing for `atom`."""
    return Literal(atom) if isinstance(atom, jex.Literal) else Var(atom)


def symbols(atoms: Any) -> list[Symbol]:
    """The symbols standing for `atoms`, as a list (YAX's `inputs`/`outputs`)."""
    return [symbol(atom) for atom in atoms]
