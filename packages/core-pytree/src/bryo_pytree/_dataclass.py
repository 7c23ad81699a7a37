"""Dataclass-style pytree registration whose unflatten never calls `__init__`.

JAX transformations rebuild pytrees with placeholder leaves (`object()` under `vmap`,
whole trees under `jacobian`), so an `__init__` that validates or converts its inputs
breaks them (seed 004, "Custom PyTrees and Initialization"). `pytree_dataclass` turns a
class into a dataclass, registers it with `jax.tree_util.register_pytree_with_keys`, and
rebuilds instances with `object.__new__` plus direct field assignment. Fields marked
`static_field()` go into the treedef (they must be hashable); the others are children.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, dataclass_transform, overload

from jax.tree_util import GetAttrKey, register_pytree_with_keys

T = TypeVar("T", bound=type)

_STATIC = "bryo_static"


def static_field(**kwargs: Any) -> Any:
    """A dataclass field kept in the treedef instead of the leaves (hashable values only)."""
    metadata = {**kwargs.pop("metadata", {}), _STATIC: True}
    return dataclasses.field(metadata=metadata, **kwargs)


def field(*, static: bool = False, **kwargs: Any) -> Any:
    """`dataclasses.field`, with `static=True` to keep the value in the treedef."""
    return static_field(**kwargs) if static else dataclasses.field(**kwargs)


@overload
def pytree_dataclass(cls: T, /) -> T: ...
@overload
def pytree_dataclass(*, frozen: bool = ...) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(field, static_field, dataclasses.field))
def pytree_dataclass(cls: type | None = None, /, *, frozen: bool = True) -> Any:
    """Make `cls` a dataclass and a pytree whose unflatten skips `__init__`.

    >>> import jax.numpy as jnp
    >>> @pytree_dataclass
    ... class Affine:
    ...     weight: object
    ...     bias: object
    ...     name: str = static_field(default="affine")
    >>> jax.vmap(lambda a: a.weight * 2)(Affine(jnp.ones(3), jnp.zeros(3)))  # doctest: +SKIP

    Args:
        cls: the class to decorate.
        frozen: make instances immutable, as Equinox modules are (default).
    """

    def wrap(cls: type) -> type:
        cls = dataclasses.dataclass(frozen=frozen)(cls)
        _register(cls)
        return cls

    return wrap if cls is None else wrap(cls)


def _register(cls: type) -> None:
    fields = dataclasses.fields(cls)
    data_names = tuple(f.name for f in fields if not f.metadata.get(_STATIC))
    static_names = tuple(f.name for f in fields if f.metadata.get(_STATIC))
    keyed_names = tuple((GetAttrKey(name), name) for name in data_names)

    def flatten_with_keys(obj: object) -> tuple[list[tuple[object, object]], tuple]:
        children = [(key, getattr(obj, name)) for key, name in keyed_names]
        return children, tuple(getattr(obj, name) for name in static_names)

    def flatten(obj: object) -> tuple[list[object], tuple]:
        children = [getattr(obj, name) for name in data_names]
        return children, tuple(getattr(obj, name) for name in static_names)

    def unflatten(static: tuple, children: Iterable[object]) -> object:
        obj = object.__new__(cls)
        for name, value in zip(data_names, children, strict=True):
            object.__setattr__(obj, name, value)
        for name, value in zip(static_names, static, strict=True):
            object.__setattr__(obj, name, value)
        return obj

    register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
