"""`Variable`s hold a model's state in place; `VariableState`s are their pytree snapshots.

A `Variable` is a mutable box: a value plus metadata (a stream `tag`, logical sharding
axes, ...) that modules keep as attributes. Its subclass says what kind of state it is
(`Param`, `BatchStat`, ...), and filters select on that. `split` turns each Variable into
a `VariableState`, an immutable-by-convention record with the same type, value and
metadata that JAX sees as a pytree node with one child, the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any as _Any

import jax
from jax.tree_util import GetAttrKey, register_pytree_with_keys

from bryo_pytree import safe_equal

from ._nodes import structure_changed

_MISSING = object()  # `get_metadata`'s "no default given"


def _value_repr(value: object) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None and len(shape) > 0:
        from bryo_pytree import describe_leaf

        return describe_leaf(value)
    return repr(value)


class Variable:
    """A box for one piece of state: `value`, plus keyword metadata readable as attributes.

    >>> count = Variable(0, tag="dropout")
    >>> count.value += 1
    >>> count.value, count.tag
    (1, 'dropout')

    Subclass it to name a kind of state (`class Count(Variable): pass`); the subclass is a
    filter for that kind. Arithmetic, indexing and `jnp` functions see the value.
    """

    __slots__ = ("__weakref__", "_metadata", "raw_value")

    def __init__(self, value: object, **metadata: object) -> None:
        object.__setattr__(self, "raw_value", value)
        object.__setattr__(self, "_metadata", metadata)

    @property
    def value(self) -> _Any:
        """The value held."""
        return self.raw_value

    @value.setter
    def value(self, value: object) -> None:
        object.__setattr__(self, "raw_value", value)

    @property
    def type(self) -> type[Variable]:
        """The Variable's class, as on a `VariableState`."""
        return type(self)

    @property
    def metadata(self) -> dict[str, object]:
        """The metadata, as a dict (a copy)."""
        return dict(self._metadata)

    def get_metadata(self, name: str | None = None, default: object = _MISSING) -> _Any:
        """All metadata as a dict (a copy), or the entry `name` (Flax 0.12's spelling).

        Args:
            name: the metadata key to read; None for the whole dict.
            default: returned when `name` is missing; without it a missing `name` raises
                a `KeyError`.
        """
        if name is None:
            if default is not _MISSING:
                raise TypeError("`default` needs a `name`: `get_metadata('sharding', None)`.")
            return dict(self._metadata)
        if default is _MISSING:
            return self._metadata[name]
        return self._metadata.get(name, default)

    def __getattr__(self, name: str) -> _Any:
        metadata = object.__getattribute__(self, "_metadata")
        if name in metadata:
            return metadata[name]
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(object.__getattribute__(self, "raw_value"), name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no metadata or value attribute {name!r}; its "
                f"metadata is {sorted(metadata)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("value", "raw_value"):
            object.__setattr__(self, "raw_value", value)
        elif name.startswith("_") and name in type(self).__dict__:
            object.__setattr__(self, name, value)
        else:  # metadata is read by filters whose results bryo caches with the structure
            self._metadata[name] = value
            structure_changed()

    def replace(self, value: object = None, **metadata: object) -> Variable:
        """A new Variable of the same type with `value` and metadata replaced."""
        new_value = self.raw_value if value is None else value
        return type(self)(new_value, **{**self._metadata, **metadata})

    def to_state(self) -> VariableState:
        """This Variable's snapshot as a `VariableState`."""
        return VariableState(type(self), self.raw_value, **self._metadata)

    @classmethod
    def from_metadata(cls, value: object, metadata: Mapping[str, object]) -> Variable:
        """Make a Variable of this type without calling a subclass's `__init__`."""
        variable = _new(cls)
        _set_raw_value(variable, value)
        _set_metadata(variable, dict(metadata))
        return variable

    def copy_from(self, state: VariableState | Variable) -> None:
        """Take `state`'s value and metadata, in place."""
        object.__setattr__(self, "raw_value", state.value)
        self._metadata.update(state._metadata)

    def __repr__(self) -> str:
        fields = [f"value={_value_repr(self.raw_value)}"]
        fields += [f"{k}={v!r}" for k, v in self._metadata.items()]
        return f"{type(self).__name__}({', '.join(fields)})"

    # The value's protocols, so `x @ kernel` and `jnp.sum(param)` work on Variables.
    def __jax_array__(self) -> jax.Array:
        return self.raw_value

    def __array__(self, dtype: object = None, copy: object = None) -> _Any:
        import numpy as np

        return np.asarray(self.raw_value, dtype=dtype)

    def __getitem__(self, index: object) -> _Any:
        return self.raw_value[index]

    def __setitem__(self, index: object, value: object) -> None:
        if index is Ellipsis:
            object.__setattr__(self, "raw_value", value)
        else:
            object.__setattr__(self, "raw_value", self.raw_value.at[index].set(value))

    def __len__(self) -> int:
        return len(self.raw_value)

    def __iter__(self) -> _Any:
        return iter(self.raw_value)

    def __bool__(self) -> bool:
        return bool(self.raw_value)

    def __int__(self) -> int:
        return int(self.raw_value)

    def __float__(self) -> float:
        return float(self.raw_value)


_new = object.__new__
_set_raw_value = Variable.raw_value.__set__  # type: ignore[attr-defined]
_set_metadata = Variable._metadata.__set__  # type: ignore[attr-defined]
_KEEP = object()


def _binary(name: str) -> None:
    def forward(self: Variable, other: object) -> _Any:
        if isinstance(other, Variable):
            other = other.raw_value
        return getattr(self.raw_value, name)(other)

    forward.__name__ = name
    setattr(Variable, name, forward)


def _unary(name: str) -> None:
    def forward(self: Variable) -> _Any:
        return getattr(self.raw_value, name)()

    forward.__name__ = name
    setattr(Variable, name, forward)


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor"):
    _binary(f"__{_op}__")
    _binary(f"__r{_op}__")
for _op in ("lt", "le", "gt", "ge"):
    _binary(f"__{_op}__")
for _op in ("neg", "pos", "abs", "invert"):
    _unary(f"__{_op}__")


class Param(Variable):
    """A trainable parameter."""

    __slots__ = ()


class BatchStat(Variable):
    """A running statistic (BatchNorm's mean and variance)."""

    __slots__ = ()


class Cache(Variable):
    """A cached value (an attention key/value cache)."""

    __slots__ = ()


class Intermediate(Variable):
    """A value a module sowed during its call, for inspection."""

    __slots__ = ()


class VariableState:
    """A `Variable`'s snapshot: its type, value and metadata. A pytree with one child.

    `split` and `state` return `State`s whose leaves are VariableStates; `merge` turns
    them back into Variables of their `type`. Change one with `replace`.
    """

    __slots__ = ("_metadata", "type", "value")

    def __init__(self, type: type[Variable], value: object, **metadata: object) -> None:
        self.type = type
        self.value = value
        self._metadata = metadata

    def __getattr__(self, name: str) -> _Any:
        metadata = object.__getattribute__(self, "_metadata")
        if name in metadata:
            return metadata[name]
        raise AttributeError(
            f"VariableState of {self.type.__name__} has no attribute {name!r}; its metadata "
            f"is {sorted(metadata)}"
        )

    @property
    def metadata(self) -> dict[str, object]:
        """The metadata, as a dict (a copy)."""
        return dict(self._metadata)

    def get_metadata(self, name: str | None = None, default: object = _MISSING) -> _Any:
        """All metadata as a dict (a copy), or the entry `name` (Flax 0.12's spelling).

        Args:
            name: the metadata key to read; None for the whole dict.
            default: returned when `name` is missing; without it a missing `name` raises
                a `KeyError`.
        """
        if name is None:
            if default is not _MISSING:
                raise TypeError("`default` needs a `name`: `get_metadata('sharding', None)`.")
            return dict(self._metadata)
        if default is _MISSING:
            return self._metadata[name]
        return self._metadata.get(name, default)

    def replace(self, value: object = _KEEP, **metadata: object) -> VariableState:
        """The same type with `value` and/or metadata replaced."""
        new_value = self.value if value is _KEEP else value
        return VariableState(self.type, new_value, **{**self._metadata, **metadata})

    def to_variable(self) -> Variable:
        """A new Variable of `type` holding this value and metadata."""
        return self.type.from_metadata(self.value, self._metadata)

    def __repr__(self) -> str:
        fields = [f"type={self.type.__name__}", f"value={_value_repr(self.value)}"]
        fields += [f"{k}={v!r}" for k, v in self._metadata.items()]
        return f"VariableState({', '.join(fields)})"


class VariableMeta:
    """A Variable's type and metadata, hashed once: VariableState's aux data, and the key
    lifted transforms cache on (metadata that does not hash counts by its keys)."""

    __slots__ = ("_hash", "metadata", "type")

    def __init__(self, type: type, metadata: dict[str, object]) -> None:
        self.type = type
        self.metadata = metadata
        try:
            self._hash = hash((type, tuple(metadata.items())))
        except TypeError:
            self._hash = hash((type, tuple(metadata)))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        fields = "".join(f", {k}={v!r}" for k, v in self.metadata.items())
        return f"{self.type.__name__}{fields}"

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, VariableMeta)
            and self.type is other.type
            and _metadata_equal(self.metadata, other.metadata)
        )


def _metadata_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(map(safe_equal, a.values(), b.values()))


_VALUE_KEY = (GetAttrKey("value"),)


def _flatten_with_keys(state: VariableState) -> tuple[tuple, VariableMeta]:
    return ((_VALUE_KEY[0], state.value),), VariableMeta(state.type, state._metadata)


def _flatten(state: VariableState) -> tuple[tuple, VariableMeta]:
    return (state.value,), VariableMeta(state.type, state._metadata)


def _unflatten(meta: VariableMeta, children: tuple) -> VariableState:
    return VariableState(meta.type, children[0], **meta.metadata)


register_pytree_with_keys(VariableState, _flatten_with_keys, _unflatten, _flatten)
