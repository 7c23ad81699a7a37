"""The Filter DSL: predicates over `(path, value)` pairs and the literals that stand for them.

A filter is anything `to_predicate` understands: a predicate `(path, value) -> bool`, a
one-argument predicate on values (`eqx.is_array`, `lambda v: v.ndim == 2`: a
`ValuePredicate`), or a literal — `...`/`True` (everything), `None`/`False` (nothing), a
type (`OfType`), a string (`WithTag`), a tuple or list (`Any` of its items). Plugins add
literals through the `bryo_filter_predicate` hook; what a callable means is the core's rule
alone, so installing a plugin never changes it. Every filter class here is a frozen
dataclass, so filters are hashable, compare by value, and can key dicts (`StateAxes({(Param,
'dropout'): 0})`).
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
from collections.abc import Callable
from typing import TypeAlias, cast

from bryo_pytree import Key, Path

from . import _hooks

Predicate: TypeAlias = Callable[[Path, object], bool]
Filter: TypeAlias = (
    type | str | bool | Predicate | tuple["Filter", ...] | list["Filter"] | object | None
)

ACCEPTED_LITERALS = (
    "`...` or `True` (everything), `None` or `False` (nothing), a type such as `Param` "
    "(values of that type, or with a `type` attribute that is a subclass of it), a string "
    "(values whose `tag` equals it, e.g. an rng stream name), a tuple or list of filters "
    "(any of them), a callable `(path, value) -> bool`, a callable taking one value "
    "(`eqx.is_array`, `lambda v: v.ndim == 2`), or a literal a plugin declares"
)


@dataclasses.dataclass(frozen=True, slots=True)
class OfType:
    """Values that are instances of `type`, or whose `type` attribute is a subclass of it.

    The second case covers `VariableState(type=Param, value=...)`.
    """

    type: type

    def __call__(self, path: Path, value: object) -> bool:
        if isinstance(value, self.type):
            return True
        value_type = getattr(value, "type", None)
        return isinstance(value_type, builtins.type) and issubclass(value_type, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type.__name__})"


@dataclasses.dataclass(frozen=True, slots=True)
class PathContains:
    """Values whose path contains `key`, exactly, or as a substring when `exact=False`."""

    key: Key
    exact: bool = True

    def __call__(self, path: Path, value: object) -> bool:
        if self.exact:
            return self.key in path
        needle = str(self.key)
        return builtins.any(needle in str(step) for step in path)

    def __repr__(self) -> str:
        exact = "" if self.exact else ", exact=False"
        return f"PathContains({self.key!r}{exact})"


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class PathIn:
    """Values whose path is one of `paths` (each a tuple of keys)."""

    paths: frozenset[Path]

    def __init__(self, *paths: Path) -> None:
        object.__setattr__(self, "paths", frozenset(tuple(p) for p in paths))

    def __call__(self, path: Path, value: object) -> bool:
        return path in self.paths

    def __repr__(self) -> str:
        return f"PathIn({', '.join(map(repr, sorted(self.paths, key=repr)))})"


@dataclasses.dataclass(frozen=True, slots=True)
class WithTag:
    """Values with a string `tag` attribute equal to `tag` (`RngKey`, `RngCount`)."""

    tag: str

    def __call__(self, path: Path, value: object) -> bool:
        return getattr(value, "tag", None) == self.tag

    def __repr__(self) -> str:
        return f"WithTag({self.tag!r})"


def _predicates(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    return tuple(to_predicate(f) for f in filters)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Any:
    """Values that match any of `filters`."""

    predicates: tuple[Predicate, ...]

    def __init__(self, *filters: Filter) -> None:
        object.__setattr__(self, "predicates", _predicates(filters))

    def __call__(self, path: Path, value: object) -> bool:
        return builtins.any(predicate(path, value) for predicate in self.predicates)

    def __repr__(self) -> str:
        return f"Any({', '.join(map(repr, self.predicates))})"


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class All:
    """Values that match all of `filters`."""

    predicates: tuple[Predicate, ...]

    def __init__(self, *filters: Filter) -> None:
        object.__setattr__(self, "predicates", _predicates(filters))

    def __call__(self, path: Path, value: object) -> bool:
        return builtins.all(predicate(path, value) for predicate in self.predicates)

    def __repr__(self) -> str:
        return f"All({', '.join(map(repr, self.predicates))})"


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Not:
    """Values that do not match `filter`."""

    predicate: Predicate

    def __init__(self, filter: Filter, /) -> None:
        object.__setattr__(self, "predicate", to_predicate(filter))

    def __call__(self, path: Path, value: object) -> bool:
        return not self.predicate(path, value)

    def __repr__(self) -> str:
        return f"Not({self.predicate!r})"


@dataclasses.dataclass(frozen=True, slots=True)
class Everything:
    """Every value."""

    def __call__(self, path: Path, value: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "Everything()"


@dataclasses.dataclass(frozen=True, slots=True)
class Nothing:
    """No value."""

    def __call__(self, path: Path, value: object) -> bool:
        return False

    def __repr__(self) -> str:
        return "Nothing()"


@dataclasses.dataclass(frozen=True, slots=True)
class ValuePredicate:
    """A one-argument predicate on values, used as a filter on `(path, value)`.

    It sees the raw value: for a value holding a Variable's state (one with a `type`
    attribute that is a class, as `Variable` and `VariableState` have), its `value`;
    otherwise the value itself. `to_predicate` makes one of every callable that takes
    exactly one positional argument (Equinox's `eqx.is_array`, `lambda v: v.ndim == 2`),
    whichever plugins are installed.

    >>> is_matrix = ValuePredicate(lambda v: v.ndim == 2)
    >>> is_matrix(("kernel",), VariableState(Param, jnp.ones((2, 3))))  # doctest: +SKIP
    True
    """

    predicate: Callable[[object], bool]

    def __call__(self, path: Path, value: object) -> bool:
        if isinstance(getattr(value, "type", None), builtins.type) and hasattr(value, "value"):
            value = getattr(value, "value")  # noqa: B009 (pyright: value is an object here)
        return bool(self.predicate(value))

    def __repr__(self) -> str:
        name = getattr(self.predicate, "__qualname__", None) or repr(self.predicate)
        return f"ValuePredicate({name})"


def value_predicate(filter: object) -> ValuePredicate | None:
    """`filter` as a `ValuePredicate` if it is a callable taking exactly one positional
    argument (not two: `(path, value)` predicates stay as they are), else None."""
    if isinstance(filter, type) or not callable(filter):
        return None
    try:
        signature = inspect.signature(filter)
    except (TypeError, ValueError):  # builtins without a signature: `(path, value)` as before
        return None
    if _accepts(signature, 1) and not _accepts(signature, 2):
        return ValuePredicate(filter)  # type: ignore[arg-type]  # a one-argument callable filter: its result is used as a bool
    return None


def _accepts(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


_FILTER_CLASSES = (OfType, PathContains, PathIn, WithTag, Any, All, Not, Everything, Nothing)


def to_predicate(filter: Filter) -> Predicate:
    """Turn a filter literal into its predicate `(path, value) -> bool`.

    A callable is a predicate as it is, unless it takes exactly one positional argument:
    then it is a predicate on values, wrapped in a `ValuePredicate`. This is the core's
    rule whatever plugins are installed; plugins only add literals that are not callable.

    >>> to_predicate((Param, "dropout"))  # doctest: +SKIP
    Any(OfType(Param), WithTag('dropout'))
    >>> to_predicate(lambda value: value.ndim == 2)  # doctest: +SKIP
    ValuePredicate(<lambda>)

    Raises:
        TypeError: `filter` is not a literal bryo or any plugin understands; the message
            lists the accepted literals.
    """
    if isinstance(filter, _FILTER_CLASSES):
        return filter
    if filter is Ellipsis or filter is True:
        return Everything()
    if filter is None or filter is False:
        return Nothing()
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, str):
        return WithTag(filter)
    if isinstance(filter, tuple | list):
        return Any(*filter)
    if callable(filter):
        return value_predicate(filter) or cast(Predicate, filter)
    predicate = _hooks.plugin_predicate(filter)
    if predicate is not None:
        return predicate
    raise TypeError(
        f"`filter` must be one of: {ACCEPTED_LITERALS}. Got {type(filter).__name__}: {filter!r}."
    )


def is_builtin_filter(predicate: Predicate) -> bool:
    """Whether `predicate` is one of bryo's filter classes all the way down.

    Their answers depend only on the path and the value's type and metadata (never on
    an array's contents), so callers may cache them per structure.
    """
    if isinstance(predicate, Any | All):
        return all(map(is_builtin_filter, predicate.predicates))
    if isinstance(predicate, Not):
        return is_builtin_filter(predicate.predicate)
    return isinstance(predicate, _FILTER_CLASSES)


def filters_to_predicates(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    """`to_predicate` over several filters, in order."""
    return _predicates(filters)
