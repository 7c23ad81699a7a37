"""Type strings of MoX values: `f32[2,3]`, `key<fry>[]`, the short form jaxprs print.

One place converts an abstract value to its string and back, so the pretty printer, the
element view, the serializers and the type checks of `sub` all agree on how a type reads.
Typed PRNG key arrays (`jax.random.key`) read `key<fry>[...]` as jax prints them; their
values are stored as key data (`jax.random.key_data`, unsigned ints) and rebuilt with
`jax.random.wrap_key_data` and the implementation the type names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

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
_TYPE_RE = re.compile(r"^\s*([A-Za-z0-9_]+|key<[A-Za-z0-9_]+>)\[([0-9,\s]*)\](\{weak\})?\s*$")
#: PRNG implementations whose key types can be written and read back.
KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


@dataclass(frozen=True)
class KeyImpl:
    """One PRNG implementation: its name, its key dtype and the `impl` param jax binds."""

    name: str
    tag: str
    dtype: Any
    param: Any
    data_shape: tuple[int, ...]
    data_dtype: np.dtype


@functools.lru_cache(maxsize=1)
def key_impls() -> dict[str, KeyImpl]:
    """Known key implementations by name (`threefry2x32`) and by tag (`fry`)."""
    table: dict[str, KeyImpl] = {}
    for name in KEY_IMPLS:
        try:
            closed = jax.make_jaxpr(lambda seed, _n=name: jax.random.key(seed, impl=_n))(0)
            data = jax.eval_shape(lambda _n=name: jax.random.key_data(jax.random.key(0, impl=_n)))
        except (ValueError, TypeError, KeyError):  # not in this jax
            continue
        dtype = closed.out_avals[0].dtype
        (eqn,) = closed.jaxpr.eqns
        tag = str(dtype)[len("key<") : -1]
        impl = KeyImpl(name, tag, dtype, eqn.params.get("impl"), data.shape, np.dtype(data.dtype))
        table.setdefault(name, impl)
        table.setdefault(tag, impl)
    return table


def is_key_dtype(dtype: Any) -> bool:
    """Whether `dtype` is the dtype of typed PRNG key arrays (`key<fry>`)."""
    return type(dtype) in _key_dtype_classes()


@functools.lru_cache(maxsize=1)
def _key_dtype_classes() -> frozenset[type]:
    dtypes = [impl.dtype for impl in key_impls().values()]
    return frozenset(type(d) for d in dtypes if jnp.issubdtype(d, jax.dtypes.prng_key))


def key_impl_of(dtype: Any) -> KeyImpl:
    """The implementation of a key dtype; `MoxError` when this module does not know it."""
    for impl in key_impls().values():
        if impl.dtype == dtype:
            return impl
    raise MoxError(
        f"PRNG key type {dtype} uses an implementation MoX cannot write; known: "
        f"{', '.join(KEY_IMPLS)}."
    )


def storage_layout(aval: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """How a value of type `aval` is stored in a file: its numpy dtype and shape.

    Arrays are stored as they are; a key array `key<fry>[3]` as its key data, `u32[3,2]`.
    """
    if is_key_dtype(aval.dtype):
        impl = key_impl_of(aval.dtype)
        return impl.data_dtype, (*aval.shape, *impl.data_shape)
    return np.dtype(aval.dtype), tuple(aval.shape)


def to_storage(value: Any) -> np.ndarray:
    """A value as the numpy array files store (key data for key arrays)."""
    if is_key_dtype(getattr(value, "dtype", None)):
        key_impl_of(value.dtype)
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


def from_storage(data: np.ndarray, aval: Any) -> Any:
    """The value of type `aval` stored as `data` (see `storage_layout`)."""
    dtype, shape = storage_layout(aval)
    if tuple(data.shape) != shape:
        raise MoxError(f"data of shape {tuple(data.shape)} does not fit type {type_str(aval)}.")
    # Concrete jax arrays even inside a trace, so that they stay constants there (a numpy
    # scalar would be inlined as a literal).
    with jax.ensure_compile_time_eval():
        if is_key_dtype(aval.dtype):
            impl = key_impl_of(aval.dtype)
            return jax.random.wrap_key_data(np.asarray(data, dtype), impl=impl.name)  # type: ignore[arg-type]  # takes array-likes
        return jnp.asarray(np.asarray(data).astype(aval.dtype))


@functools.lru_cache(maxsize=256)
def short_dtype_name(dtype: Any) -> str:
    """`float32` -> `f32`, `uint8` -> `u8`, `bfloat16` -> `bf16`, `bool` -> `bool`;
    PRNG key dtypes as jax prints them, `key<fry>`."""
    if is_key_dtype(dtype):
        return str(dtype)
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


def type_str(aval: Any, *, weak: bool = False) -> str:
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
    if dtype_name.startswith("key<"):
        impl = key_impls().get(dtype_name[len("key<") : -1])
        if impl is None:
            raise MoxError(
                f"`type` {text!r} names an unknown PRNG implementation; known: "
                f"{', '.join(KEY_IMPLS)}."
            )
        dtype = impl.dtype
    else:
        dtype = _DTYPES.get(dtype_name)
    if dtype is None:
        raise MoxError(
            f"`type` {text!r} names an unknown dtype {dtype_name!r}; known: "
            f"{', '.join(sorted(k for k in _DTYPES if len(k) <= 5))}."
        )
    pieces = [d.strip() for d in dims.split(",")] if dims.strip() else []
    if not all(p.isdigit() and len(p) <= 18 for p in pieces):
        raise MoxError(f"`type` {text!r} has a malformed shape; write dims as '[2,3]'.")
    return jax.ShapeDtypeStruct(tuple(map(int, pieces)), dtype, weak_type=bool(weak))


def dtype_named(name: str) -> np.dtype | None:
    """The dtype called `name` (`float32`, or short `f32`), or `None` if MoX does not know it."""
    return _DTYPES.get(name)


def same_type(a: Any, b: Any) -> bool:
    """Equal shape and dtype (of abstract values, `ShapeDtypeStruct`s or arrays; jax types
    a variable's aval as any `AbstractValue`); weak typing is ignored."""
    return tuple(a.shape) == tuple(b.shape) and _dtype(a.dtype) == _dtype(b.dtype)


def _dtype(dtype: Any) -> Any:
    return dtype if is_key_dtype(dtype) else np.dtype(dtype)
