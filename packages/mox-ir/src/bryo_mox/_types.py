"""Type strings of MoX values: `f32[2,3]`, the short form jaxprs print.

One place converts an abstract value to its string and back, so the pretty printer, the
element view, the serializers and the type checks of `sub` all agree on how a type reads.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import MoxError

_DTYPE_NAMES = (
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3b11fnuz",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
)
_TYPE_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\[([0-9,\s]*)\](\{weak\})?\s*$")


@functools.lru_cache(maxsize=256)
def short_dtype_name(dtype: np.dtype) -> str:
    """`float32` -> `f32`, `uint8` -> `u8`, `bfloat16` -> `bf16`, `bool` -> `bool`."""
    name = np.dtype(dtype).name
    return (
        name.replace("bfloat", "bf")
        .replace("float", "f")
        .replace("uint", "u")
        .replace("int", "i")
        .replace("complex", "c")
    )


def _known_dtypes() -> dict[str, np.dtype]:
    table: dict[str, np.dtype] = {}
    for name in _DTYPE_NAMES:
        try:
            dtype = jnp.dtype(name)
        except TypeError:  # a dtype this jax/ml_dtypes does not know
            continue
        table[short_dtype_name(dtype)] = dtype
        table[name] = dtype
    table["fp32"], table["fp16"], table["fp64"] = (
        table["f32"],
        table["f16"],
        table["f64"],
    )
    return table


_DTYPES = _known_dtypes()


def type_str(aval: object, *, weak: bool = False) -> str:
    """The short type string of an abstract value (anything with `shape` and `dtype`).

    With `weak`, a weakly typed value (a Python scalar's type) is marked `f32[]{weak}`,
    as documents write it so that reloading keeps jax's type promotion unchanged.
    """
    shape = ",".join(str(d) for d in aval.shape)
    mark = "{weak}" if weak and getattr(aval, "weak_type", False) else ""
    return f"{short_dtype_name(aval.dtype)}[{shape}]{mark}"


def parse_type(text: str) -> jax.ShapeDtypeStruct:
    """Parse `f32[2,3]` (or the seed's `fp32[2,3]`) into a `jax.ShapeDtypeStruct`.

    Raises:
        MoxError: the text is not a type string or names an unknown dtype.
    """
    match = _TYPE_RE.match(text)
    if match is None:
        raise MoxError(f"`type` {text!r} is not a type such as 'f32[2,3]'.")
    dtype_name, dims, weak = match.groups()
    dtype = _DTYPES.get(dtype_name)
    if dtype is None:
        raise MoxError(
            f"`type` {text!r} names an unknown dtype {dtype_name!r}; known: "
            f"{', '.join(sorted(k for k in _DTYPES if len(k) <= 5))}."
        )
    shape = tuple(int(d) for d in dims.split(",") if d.strip())
    return jax.ShapeDtypeStruct(shape, dtype, weak_type=bool(weak))


def same_type(a: object, b: object) -> bool:
    """Equal shape and dtype; weak typing is ignored."""
    return tuple(a.shape) == tuple(b.shape) and np.dtype(a.dtype) == np.dtype(b.dtype)
