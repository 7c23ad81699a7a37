"""Wrappers that let unhashable static values sit in treedefs and GraphDefs.

Treedef aux data and GraphDef entries must hash. A static value that does not is
wrapped, and unwrapped when the structure is rebuilt: plain containers of hashable values
(a list of layer sizes, a config dict) in `ByValue`, which hashes and compares by their
contents, as JAX compares static data with `==`; anything else in `ByIdentity`, which
hashes and compares by the object's identity.
"""

from __future__ import annotations

from collections.abc import Hashable


class ByIdentity:
    """An unhashable static value, compared by identity so the structure holding it hashes."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByIdentity) and other.value is self.value

    def __repr__(self) -> str:
        return repr(self.value)


class ByValue:
    """A list, dict, set or tuple of hashable values, compared by its contents (a frozen
    copy taken when it was wrapped), so equal configs of two models compare equal."""

    __slots__ = ("_frozen", "_hash", "value")

    def __init__(self, value: object) -> None:
        self.value = value
        self._frozen = _freeze(value)  # TypeError when some content does not hash
        self._hash = hash(self._frozen)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByValue) and self._frozen == other._frozen

    def __repr__(self) -> str:
        return repr(self.value)


def _freeze(value: object) -> Hashable:
    cls = type(value)
    if cls is list or cls is tuple:
        return (cls, tuple(map(_freeze, value)))  # type: ignore[call-overload]  # cls is list or tuple: `value` is iterable
    if cls is dict:
        return (cls, tuple((k, _freeze(v)) for k, v in value.items()))  # type: ignore[attr-defined]  # cls is dict (checked by exact type, which the checker does not narrow on)
    if cls is set or cls is frozenset:
        return (cls, frozenset(map(_freeze, value)))  # type: ignore[call-overload]  # cls is set or frozenset: `value` is iterable
    hash(value)
    return value


def hashable(value: object) -> Hashable:
    """`value` itself if it hashes, else `ByValue(value)` for plain containers of hashable
    values, else `ByIdentity(value)`."""
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return value
    try:
        return ByValue(value)
    except TypeError:
        return ByIdentity(value)


def unwrap_hashable(value: object) -> object:
    """The value `hashable` wrapped, or `value` unchanged."""
    cls = type(value)
    return value.value if cls is ByIdentity or cls is ByValue else value  # type: ignore[attr-defined]  # cls is ByIdentity or ByValue, both with `.value`
