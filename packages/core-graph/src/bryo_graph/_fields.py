"""Data or static: which attributes of an `Object` are pytree children, which are aux data.

As in Flax NNX 0.12, an Object attribute is *data* when its value is an array, a
`Variable` or a graph node (another module, an `Rngs`, a `List`), or a value of a type
registered with `register_data_type`; anything else (numbers, strings, functions, plain
containers of those) is *static*: it rides in the treedef and `jax.jit` recompiles when it
changes. `data(value)` and `static(value)` override the choice for one assignment, and
`x: int = data()` / `static()` on the class for every instance (the markers are
`dataclasses.field`s, so dataclass-style modules can use them too). The annotations
`x: Data[int]` / `Static[int]` say the same (Flax's older spelling; deprecated there and
here, with a warning naming the replacement).

A static attribute must not hide data: a plain list of arrays or modules is refused, with
a message naming the attribute and the fixes (`nnx.List`, `nnx.data`).
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from typing import Annotated, Any, TypeVar

import jax
import numpy as np

from bryo_plugins import PerEpoch

from ._nodes import node_types
from ._variables import MISSING, Variable

A = TypeVar("A")
T = TypeVar("T", bound=type)

_STATUS = "bryo_data"  # field metadata: True for data, False for static
_VALUE = "bryo_value"  # field metadata: the value `data(value)` / `static(value)` wraps


class _Mark:
    """The metadata of the `Data`/`Static` annotations."""

    __slots__ = ("status",)

    def __init__(self, status: bool) -> None:
        self.status = status

    def __repr__(self) -> str:
        return "data" if self.status else "static"


Data = Annotated[A, _Mark(True)]
"""`x: Data[int]` on a class: the attribute is data (as `x: int = data()`, the spelling
to prefer)."""

Static = Annotated[A, _Mark(False)]
"""`x: Static[int]` on a class: the attribute is static (as `x: int = static()`, the
spelling to prefer)."""

_CONTAINERS = (dict, list, tuple)
# Values of these types never hold data: skip the scan of their pytree leaves.
ATOMIC = frozenset(
    {int, float, complex, bool, str, bytes, type(None), type(Ellipsis), type, types.FunctionType}
)
_registered: set[type] = set()
_is_data_type: PerEpoch[dict[type, bool]] = PerEpoch(lambda pm: {})  # plugins decide node types


def _marker(value: object, status: bool, kwargs: dict[str, Any]) -> Any:
    name = "data" if status else "static"
    if value is not MISSING and kwargs:
        raise TypeError(
            f"`{name}` takes either a value (`self.x = {name}(value)`) or field keywords "
            f"(`x: int = {name}(default=...)`), not both; got keywords {sorted(kwargs)}."
        )
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[_VALUE] = value
    metadata[_STATUS] = status
    return dataclasses.field(**kwargs, metadata=metadata)


def data(value: A = MISSING, /, **field_kwargs: Any) -> A:
    """Mark an attribute as data (a pytree child), whatever its value.

    >>> self.counts = data([jnp.zeros(2), jnp.ones(2)])  # doctest: +SKIP

    With no value, a `dataclasses.field` for a class attribute: `x: list = data(default=...)`.
    """
    return _marker(value, True, field_kwargs)


def static(value: A = MISSING, /, **field_kwargs: Any) -> A:
    """Mark an attribute as static (kept in the treedef), whatever its value.

    Static values must not contain data (arrays, Variables, modules).
    """
    return _marker(value, False, field_kwargs)


def unmark(value: object) -> tuple[object, bool | None]:
    """`(value, status)`: the value `data`/`static` wrapped and its status, or `(value, None)`."""
    if type(value) is dataclasses.Field and _STATUS in value.metadata:
        return value.metadata[_VALUE], value.metadata[_STATUS]
    return value, None


def class_statuses(cls: type) -> dict[str, bool]:
    """The statuses `cls` and its bases declare with `x = data()` / `x = static()`, or
    with the annotations `x: Data[T]` / `x: Static[T]` (a warning names the former)."""
    statuses: dict[str, bool] = {}
    for base in reversed(cls.__mro__):
        for name, annotation in vars(base).get("__annotations__", {}).items():
            status = annotation_status(annotation)
            if status is not None:
                _warn_annotation(base, name, status)
                statuses[name] = status
        for name, value in vars(base).items():
            if type(value) is dataclasses.Field and _STATUS in value.metadata:
                statuses[name] = value.metadata[_STATUS]
    return statuses


def annotation_status(annotation: object) -> bool | None:
    """True for `Data[T]`, False for `Static[T]` (also as the strings postponed
    annotations leave, `'nnx.Data[int]'`), else None."""
    if isinstance(annotation, str):
        head = annotation.split("[", 1)[0].rsplit(".", 1)[-1].strip()
        return {"Data": True, "Static": False}.get(head) if "[" in annotation else None
    for mark in getattr(annotation, "__metadata__", ()):
        if isinstance(mark, _Mark):
            return mark.status
    return None


def _warn_annotation(cls: type, name: str, status: bool) -> None:
    spelling, marker = ("Data", "data") if status else ("Static", "static")
    warnings.warn(
        f"`{name}: nnx.{spelling}[T]` on {cls.__name__} is deprecated (as in Flax); write "
        f"`{name}: T = nnx.{marker}()` instead.",
        DeprecationWarning,
        stacklevel=4,
    )


def register_data_type(cls: T, /) -> T:
    """Make values of `cls` data when assigned to an Object attribute (usable as a decorator)."""
    _registered.add(cls)
    _is_data_type.reset()
    return cls


def is_data(value: object, /) -> bool:
    """Whether `value` is data by its type: an array, a Variable, a graph node (a module,
    an `Rngs`, a `List`, ...), or a registered data type."""
    memo = _is_data_type.get()
    try:
        return memo[type(value)]
    except KeyError:
        pass
    cls = type(value)
    node_type = node_types().lookup(cls)
    found = (
        issubclass(cls, Variable)
        or isinstance(value, jax.Array | np.ndarray)
        or cls in _registered
        or (node_type is not None and node_type.type not in _CONTAINERS)
    )
    _is_data_type.get()[cls] = found  # (the lookup may have loaded plugins: a new epoch)
    return found


def data_types() -> dict[type, bool]:
    """`type -> is_data` for the types `is_data` met under the current plugins: a loop
    over many values reads it once and calls `is_data` for types it lacks (then reads it
    again: a plugin loaded on the way starts a new one)."""
    return _is_data_type.get()


def has_data(value: object, /) -> list[object]:
    """The data found in `value`'s pytree: itself if it is data, else its data leaves
    (empty for static values)."""
    if type(value) in ATOMIC:
        return []
    if is_data(value):
        return [value]
    leaves = jax.tree_util.tree_leaves(value, is_leaf=is_data)
    return [leaf for leaf in leaves if is_data(leaf)]


def check_static(
    owner: object, name: str, value: object, explicit: bool, *, declared: bool = False
) -> None:
    """Refuse a static attribute value that holds data, naming the attribute and the fixes.

    Args:
        owner: the Object whose attribute is set.
        name: the attribute.
        value: its new value.
        explicit: whether the value came wrapped in `static(...)`.
        declared: whether the class declared the attribute static (`x = static()`), or
            the check runs after `__init__` (Flax's "unexpected data" error).
    """
    found = has_data(value)
    if not found:
        return
    kinds = ", ".join(sorted({type(leaf).__name__ for leaf in found}))
    cls, container = type(owner).__name__, type(value).__name__
    if declared:
        raise ValueError(
            f"Found unexpected data on value of type '{container}' in static attribute "
            f"'{name}' of Pytree type '{cls}': it holds {kinds}. Static attributes live in "
            "the treedef and cannot hold arrays, Variables or modules. Remove the data, or "
            f"make the attribute data: `self.{name} = nnx.data(...)` or `{name}: "
            f"{container} = nnx.data()` on the class (for a list or dict, `nnx.List(...)` / "
            "`nnx.Dict(...)`)."
        )
    if explicit:
        raise ValueError(
            f"Found data in value of type '{container}' annotated with nnx.static(...) when "
            f"setting attribute '{name}' of Pytree type '{cls}': it holds {kinds}. Static "
            "attributes live in the treedef and cannot hold arrays, Variables or modules; "
            "drop the `static(...)`, or remove the data."
        )
    fixes = ""
    if isinstance(value, list | dict):
        wrapper = "List" if isinstance(value, list) else "Dict"
        fixes = (
            f"  - use `nnx.{wrapper}(...)` instead of a plain {container}: "
            f"`self.{name} = nnx.{wrapper}(...)`;\n"
        )
    raise ValueError(
        f"Found data on value of type '{container}' assigned to static attribute '{name}' of "
        f"Pytree type '{cls}': it holds {kinds}, which JAX would not see (a plain "
        f"{container} is static). Either:\n"
        f"{fixes}"
        f"  - mark it as data on assignment: `self.{name} = nnx.data(...)`;\n"
        f"  - or declare it on the class: `{name}: {container} = nnx.data()`."
    )
