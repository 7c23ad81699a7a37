"""What new Variables are by default: array-ref backed or not (Flax 0.12's `var_defaults`).

A Variable made with `ref=True` keeps its array in a JAX mutable array (`jax.new_ref`):
writes through it (`v[...] = x`) are seen by every holder of the ref, also across
`jax.jit` boundaries, where JAX passes refs by reference. `var_defaults(ref=True)` makes
that the default for the Variables created while it is set; called with no argument it
returns the current defaults.

`var_defaults(hijax=True)` makes new Variables hijax ones (Flax's, built on
`jax.experimental.hijax`: see `_hijax`); on a JAX without that API, making one raises a
ValueError naming the JAX version needed.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def check_flag(name: str, value: object, where: str, *, hijax_allowed: bool = False) -> bool:
    """`value` as the bool the `hijax`/`ref` option `name` of `where` takes (`hijax=True`
    only on a JAX with hijax, unless `hijax_allowed`: a default, checked when used)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` of {where} takes True or False; got {value!r}.")
    if name == "hijax" and value and not hijax_allowed:
        from ._hijax import check_hijax_available

        check_hijax_available(where)
    return value


@dataclasses.dataclass(frozen=True)
class VarDefaults(Mapping[str, bool]):
    """The defaults new Variables take when `hijax`/`ref` are not given (a read-only
    mapping too: `dict(var_defaults())`)."""

    hijax: bool
    ref: bool

    def __getitem__(self, key: str) -> bool:
        if key not in ("hijax", "ref"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(("hijax", "ref"))

    def __len__(self) -> int:
        return 2


class _Defaults(threading.local):
    hijax: bool = False
    ref: bool = False


_DEFAULTS = _Defaults()


def default_hijax() -> bool:
    """Whether a Variable made now without `hijax=` is a hijax one."""
    return _DEFAULTS.hijax


def default_ref() -> bool:
    """Whether a Variable made now without `ref=` is array-ref backed."""
    return _DEFAULTS.ref


def _set(values: VarDefaults) -> None:
    _DEFAULTS.hijax, _DEFAULTS.ref = values.hijax, values.ref


class VarDefaultsSetting:
    """What `var_defaults(hijax=..., ref=...)` returns: the defaults are already set (for
    the rest of the thread); as a context manager they are restored on exit; as a
    decorator the call is undone and the function runs with them set instead."""

    def __init__(self, hijax: bool | None, ref: bool | None) -> None:
        self._previous = previous = current_defaults()
        self._new = VarDefaults(
            hijax=previous.hijax if hijax is None else hijax,
            ref=previous.ref if ref is None else ref,
        )
        self._hijax, self._ref = hijax, ref
        _set(self._new)

    def __enter__(self) -> VarDefaults:
        return current_defaults()

    def __exit__(self, *exc: object) -> None:
        _set(self._previous)

    def __call__(self, fn: F) -> F:
        _set(self._previous)  # decorating undoes the call's setting
        if not callable(fn):
            raise TypeError(
                "`var_defaults(...)` decorates a function (`@nnx.var_defaults(ref=True)`); "
                f"got {fn!r}."
            )
        hijax, ref = self._hijax, self._ref

        @functools.wraps(fn)
        def with_defaults(*args: object, **kwargs: object) -> object:
            previous = current_defaults()
            _set(
                VarDefaults(
                    hijax=previous.hijax if hijax is None else hijax,
                    ref=previous.ref if ref is None else ref,
                )
            )
            try:
                return fn(*args, **kwargs)
            finally:
                _set(previous)

        return with_defaults  # type: ignore[return-value]  # functools.wraps keeps fn's signature


def current_defaults() -> VarDefaults:
    """The defaults in force now."""
    return VarDefaults(hijax=_DEFAULTS.hijax, ref=_DEFAULTS.ref)


def var_defaults(
    *, hijax: bool | None = None, ref: bool | None = None
) -> VarDefaults | VarDefaultsSetting:
    """The defaults of new Variables (no argument), or set them (Flax 0.12).

    >>> import jax
    >>> from bryo_graph import Variable, var_defaults
    >>> var_defaults().ref
    False
    >>> with var_defaults(ref=True):
    ...     v = Variable(1.0)
    >>> v.ref, isinstance(v.get_raw_value(), jax.Ref), var_defaults().ref
    (True, True, False)

    Called with `ref=`, the default is set at once (for the rest of the thread);
    used as a context manager it is restored on exit, and as a decorator
    (`@var_defaults(ref=True)`) it holds while the function runs.

    Args:
        hijax: whether new Variables are hijax ones (JAX 0.10 or newer: on older JAX, a
            Variable made while this is True and not given `hijax=False` raises a
            ValueError naming the version).
        ref: whether new Variables keep their value in a `jax.new_ref` mutable array.

    Returns:
        The current `VarDefaults` without arguments, else the setting (a context
        manager and decorator).
    """
    if hijax is not None:
        check_flag("hijax", hijax, "`var_defaults`", hijax_allowed=True)
    if ref is not None:
        check_flag("ref", ref, "`var_defaults`")
    if hijax is None and ref is None:
        return current_defaults()
    return VarDefaultsSetting(hijax, ref)
