"""Linen collection names and Variable classes, one to one (`'params'` is `Param`).

Code that moves state between Flax Linen's collections and NNX-style Variables looks the
names up here, as with Flax NNX's `variable_type_from_name`/`variable_name_from_type`. The
core registers its own Variable types; a backend registers its own (`'perturbations'`),
and users theirs with `register_variable_name`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar, overload

from ._variables import BatchStat, Cache, Intermediate, Param, Variable

V = TypeVar("V", bound=type[Variable])

_names: dict[str, type[Variable]] = {}
_lock = threading.Lock()


@overload
def register_variable_name(name: str, typ: V, /, *, overwrite: bool = False) -> V: ...
@overload
def register_variable_name(name: str, /, *, overwrite: bool = False) -> Callable[[V], V]: ...
def register_variable_name(
    name: str, typ: V | None = None, /, *, overwrite: bool = False
) -> V | Callable[[V], V]:
    """Link the collection `name` with the Variable class `typ` (or decorate the class).

    Args:
        name: the Linen collection name (`'params'`).
        typ: the Variable subclass; omitted, a decorator for it is returned.
        overwrite: replace a class already linked with `name` (else a `ValueError`).

    Returns:
        `typ`, or the decorator.
    """
    if typ is None:
        return lambda cls: register_variable_name(name, cls, overwrite=overwrite)
    if not (isinstance(typ, type) and issubclass(typ, Variable)):
        raise TypeError(
            f"`register_variable_name({name!r}, typ)` takes a Variable subclass; got {typ!r}."
        )
    with _lock:
        known = _names.get(name)
        if known is not None and known is not typ and not overwrite:
            raise ValueError(
                f"Name {name!r} is already linked with {known.__name__}; pass "
                f"`overwrite=True` to link it with {typ.__name__} instead."
            )
        _names[name] = typ
    return typ


def variable_type_from_name(
    name: str, /, *, base: type[Variable] = Variable, allow_register: bool = False
) -> type[Variable]:
    """The Variable class linked with the collection `name`.

    Args:
        name: the collection name.
        base: the base of the class made for an unknown name (with `allow_register`).
        allow_register: make (and link) a new subclass of `base` named `name` when
            none is linked, instead of raising a `ValueError`.

    Returns:
        The Variable class.
    """
    with _lock:
        typ = _names.get(name)
        if typ is None:
            if not allow_register:
                raise ValueError(
                    f"Name {name!r} is not linked with a Variable class (known: "
                    f"{sorted(_names)}). Register it with `register_variable_name({name!r}, "
                    "cls)`, or pass `allow_register=True`."
                )
            typ = _names[name] = type(name, (base,), {})
    return typ


def variable_name_from_type(typ: type[Variable], /, *, allow_register: bool = False) -> str:
    """The collection name linked with the Variable class `typ`.

    Args:
        typ: the Variable class.
        allow_register: link an unknown class under its own `__name__` instead of
            raising a `ValueError`.

    Returns:
        The name.
    """
    with _lock:
        for name, known in _names.items():
            if known is typ:
                return name
        if not allow_register:
            raise ValueError(
                f"{typ.__name__} is not linked with a collection name. Register it with "
                f"`register_variable_name(name, {typ.__name__})`, or pass `allow_register=True`."
            )
        name = typ.__name__
        known = _names.get(name)
        if known is not None:
            raise ValueError(
                f"Name {name!r} is already linked with another class, {known.__module__}."
                f"{known.__qualname__}; register {typ.__name__} under another name with "
                "`register_variable_name`."
            )
        _names[name] = typ
    return name


for _name, _type in (
    ("params", Param),
    ("batch_stats", BatchStat),
    ("cache", Cache),
    ("intermediates", Intermediate),
):
    register_variable_name(_name, _type)
