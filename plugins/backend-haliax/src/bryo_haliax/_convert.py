"""Conversions between Haliax's NamedArray and bryo's (the same array, the same axes)."""

from __future__ import annotations

import haliax

import bryo_named


def from_haliax(array: haliax.NamedArray) -> bryo_named.NamedArray:
    """bryo's NamedArray with the axes and the array of Haliax's `array`.

    Raises:
        TypeError: `array` is not a `haliax.NamedArray`.
    """
    if not isinstance(array, haliax.NamedArray):
        raise TypeError(
            f"`from_haliax` takes a haliax.NamedArray; got {type(array).__name__}. bryo's own "
            "NamedArray needs no conversion."
        )
    axes = tuple(bryo_named.Axis(axis.name, axis.size) for axis in array.axes)
    return bryo_named.named(array.array, axes)


def to_haliax(array: bryo_named.NamedArray) -> haliax.NamedArray:
    """Haliax's NamedArray with the axes and the array of bryo's `array`.

    Raises:
        TypeError: `array` is not a bryo NamedArray.
    """
    if not isinstance(array, bryo_named.NamedArray):
        raise TypeError(
            f"`to_haliax` takes bryo's NamedArray (bryo.hax, bryo_named); got "
            f"{type(array).__name__}."
        )
    axes = tuple(haliax.Axis(axis.name, axis.size) for axis in array.axes)
    return haliax.named(array.array, axes)
