"""A wrapper that lets unhashable static values sit in treedefs and GraphDefs.

Treedef aux data and GraphDef entries must hash; a static value that does not (a list
of layer sizes, a config dict) is wrapped in `ByIdentity`, which hashes and compares by
the object's identity, and unwrapped when the structure is rebuilt.
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


def hashable(value: object) -> Hashable:
    """`value` itself if it hashes, else `ByIdentity(value)`."""
    try:
        hash(value)
    except TypeError:
        return ByIdentity(value)
    return value


def unwrap_hashable(value: object) -> object:
    """The value `hashable` wrapped, or `value` unchanged."""
    return value.value if type(value) is ByIdentity else value
