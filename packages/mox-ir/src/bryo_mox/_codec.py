"""Text form of equation params and attributes, and its safe parser.

Params are written in Python literal syntax (`(([1], [0]), ([], []))`, `dtype('float32')`,
`Precision.HIGHEST`, `GatherDimensionNumbers(offset_dims=(1,), ...)`) and read back with
`ast.parse` and a whitelist: literals, `None`/`True`/`False`, and calls of a fixed set of
jax value types. Nothing is evaluated, so reading untrusted text is safe. Arrays are
written compactly, `array('<base64 of little-endian bytes>', dtype('float32'), (2, 3))`
(`encode_array`/`decode_array`, shared with the constants of files); the older decimal
form `array([[1.0, 2.0]], dtype('float32'))` is still read. Every array is counted against
the active load budget (`_limits`) before it is allocated, and dtypes come from a fixed
list (no structured or sub-array dtypes).
"""

from __future__ import annotations

import ast
import base64
import binascii
import dataclasses
import enum
import functools
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex

from ._errors import MoxError, MoxLimitError
from ._limits import array_nbytes, current_budget
from ._policies import decode_policy, encode_policy
from ._types import dtype_named, is_key_dtype, key_impls

MAX_TEXT = 100_000
#: A decimal int (up to 18 digits: within 64 bits) or float as `repr` writes them; the
#: groups say it is a float.
_PLAIN_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(\.[0-9]+)?([eE][-+]?[0-9]+)?")
#: Integers in params must fit 64 bits (signed or unsigned).
MAX_INT = 2**64
#: Text that `decode` refuses when it holds `/`, `<`, `>` or two dots: such characters make
#: an operator, a comparison or an attribute of an attribute, none of them a value.
_BARE = re.compile(r"[\w.<>/\-]+")
_COMPACT_ARRAY = re.compile(
    r"^\s*array\('([A-Za-z0-9+/=]*)', dtype\('(\w+)'\), \(([0-9, ]*)\)\)\s*$"
)


class Unencodable(MoxError):
    """A param value the text form cannot express (a callable, a sharding object, ...)."""


def _value_classes() -> dict[str, type]:
    """The value types of `jax.lax` params: enums (`Precision`, `RoundingMethod`),
    named tuples (`GatherDimensionNumbers`) and dataclasses (`RaggedDotDimensionNumbers`)."""
    classes: dict[str, type] = {}
    for name in dir(jax.lax):
        value = getattr(jax.lax, name)
        if isinstance(value, type) and (
            issubclass(value, enum.Enum)
            or (issubclass(value, tuple) and hasattr(value, "_fields"))
            or dataclasses.is_dataclass(value)
        ):
            classes[value.__name__] = value
    return classes


def _primitives() -> dict[str, Any]:
    """The primitives `jax.extend.core.primitives` exports, by name: a param may hold one
    (`select_and_scatter_add`'s `select_prim`), written `primitive('ge')`."""
    found: dict[str, Any] = {}
    for value in vars(jex.primitives).values():
        if isinstance(value, jex.Primitive):
            found.setdefault(value.name, value)
    return found


_CLASSES = _value_classes()
_PRIMITIVES = _primitives()


def encode(value: Any, *, strict: bool = True) -> str:
    """`value` in Python literal syntax; raises `Unencodable` (if `strict`) when impossible."""
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, enum.Enum) and _CLASSES.get(type(value).__name__) is type(value):
        return f"{type(value).__name__}.{value.name}"  # before `int`: an IntEnum is one
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, np.dtype):
        return f"dtype({value.name!r})"
    if isinstance(value, type) and issubclass(value, np.generic):
        return f"dtype({np.dtype(value).name!r})"
    if is_key_dtype(value):
        return f"dtype({str(value)!r})"
    if type(value).__name__ == "PRNGImpl":
        impl = key_impls().get(str(getattr(value, "name", "")))
        if impl is not None and impl.param == value:
            return f"prng_impl({impl.name!r})"
    if isinstance(value, jex.Primitive) and _PRIMITIVES.get(value.name) is value:
        return f"primitive({value.name!r})"
    if dataclasses.is_dataclass(value) and _CLASSES.get(type(value).__name__) is type(value):
        fields = ", ".join(
            f"{f.name}={encode(getattr(value, f.name), strict=strict)}"
            for f in dataclasses.fields(value)
        )
        return f"{type(value).__name__}({fields})"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        if _CLASSES.get(type(value).__name__) is type(value):
            fields = ", ".join(
                f"{k}={encode(v, strict=strict)}"
                for k, v in zip(value._fields, value, strict=False)  # type: ignore[attr-defined]  # a NamedTuple
            )
            return f"{type(value).__name__}({fields})"
    if isinstance(value, (tuple, list)):
        items = [encode(v, strict=strict) for v in value]
        if isinstance(value, list):
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, dict):
        items = [
            f"{encode(k, strict=strict)}: {encode(v, strict=strict)}" for k, v in value.items()
        ]
        return "{" + ", ".join(items) + "}"
    if isinstance(value, np.ndarray) and dtype_named(value.dtype.name) == value.dtype:
        shape = ", ".join(str(d) for d in value.shape) + ("," if value.ndim == 1 else "")
        return f"array({encode_array(value)!r}, dtype({value.dtype.name!r}), ({shape}))"
    policy = encode_policy(value)  # a `remat`'s `jax.checkpoint_policies` policy
    if policy is not None:
        return policy
    if strict:
        raise Unencodable(
            f"a value of type {type(value).__name__} ({value!r:.60}) has no text form"
        )
    return str(value)


def encode_array(array: np.ndarray) -> str:
    """The base64 text of an array's bytes, little-endian, C order (see `decode_array`)."""
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">" or (data.dtype.byteorder == "=" and sys.byteorder == "big"):
        data = data.astype(data.dtype.newbyteorder("<"))
    return base64.b64encode(data.tobytes()).decode("ascii")


def decode_array(
    text: str, dtype: Any, shape: tuple[int, ...], what: str = "an array"
) -> np.ndarray:
    """The array of `dtype` and `shape` whose little-endian bytes `text` holds in base64.

    The array's bytes are counted against the active load budget and the text's length
    checked against them before anything is decoded.

    Raises:
        MoxError: the text does not hold exactly such an array.
        MoxLimitError: the array is over the load's array budget.
    """
    dtype = np.dtype(dtype)
    nbytes = array_nbytes(tuple(shape), dtype.itemsize)
    current_budget().spend_array(nbytes, what)
    expected = 4 * ((nbytes + 2) // 3)
    if len(text) != expected:
        raise MoxError(
            f"{what} of type {dtype.name}{list(shape)} takes {expected} base64 characters "
            f"({nbytes} bytes), the data has {len(text)}."
        )
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MoxError(f"{what}: the data is not valid base64 ({error}).") from None
    if len(raw) != nbytes:
        raise MoxError(f"{what}: the data decodes to {len(raw)} bytes, not {nbytes}.")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def plain_number(text: str) -> int | float | None:
    """`decode(text)` when `text` is a plain decimal int or float (as `repr` writes them),
    read without `ast` (10x faster: a file may hold a literal value per equation); else
    `None`."""
    number = _PLAIN_NUMBER.fullmatch(text)
    if number is None:
        return None
    return float(text) if number.group(1) or number.group(2) else int(text)


def decode(text: str) -> Any:
    """Parse text written by `encode`. Raises `MoxError` for anything else."""
    number = plain_number(text)
    if number is not None:
        return number
    compact = _COMPACT_ARRAY.match(text)
    if compact is not None:
        return _compact_array(*compact.groups())
    if len(text) > MAX_TEXT:
        raise MoxError(f"a param text of {len(text)} characters exceeds {MAX_TEXT}.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _eval(tree.body)
    except MoxError:
        raise
    except (
        SyntaxError,
        RecursionError,
        MemoryError,
        ValueError,
        TypeError,
        OverflowError,
    ) as error:
        raise MoxError(f"cannot read param text {text[:80]!r}: {error}") from None


def _compact_array(data: str, dtype_name: str, dims: str) -> np.ndarray:
    dtype = _plain_dtype(dtype_name)
    pieces = [d.strip() for d in dims.split(",") if d.strip()]
    if not all(p.isdigit() and len(p) <= 18 for p in pieces):
        raise MoxError(f"array shape ({dims}) is malformed.")
    return decode_array(data, dtype, tuple(map(int, pieces)), "an array param")


def _plain_dtype(name: Any) -> np.dtype:
    dtype = dtype_named(name) if isinstance(name, str) else None
    if dtype is None:
        raise ValueError(f"{name!r} is not a dtype MoX reads (such as 'float32')")
    return np.dtype(dtype)


def _decimal_array(data: Any, dtype: Any) -> np.ndarray:
    """The older decimal form, `array([[1.0, 2.0]], dtype('float32'))`: bounded by the
    text it was read from; its bytes still count against the budget."""
    if isinstance(dtype, str):
        dtype = _plain_dtype(dtype)
    if not isinstance(dtype, np.dtype) or dtype_named(dtype.name) != dtype:
        raise ValueError(f"array dtype {dtype!r} is not a dtype MoX reads")
    array = np.asarray(data, dtype=dtype)
    current_budget().spend_array(array.nbytes, "an array param")
    return array


def encode_attr(value: Any, *, strict: bool = True) -> str:
    """Like `encode`, but a string is written bare when it cannot be mistaken for a value
    (`name="relu"`, `name="layers/0"`), as the seed's XML shows."""
    if isinstance(value, str):
        return _encode_str(value)
    return encode(value, strict=strict)


#: Types whose values are equal only when they write the same text (a `bool` is not
#: an `int` here: the key holds the type).
_EXACT_TYPES = frozenset({str, int, bool, type(None)})


def value_key(value: Any, *, mutable: bool = False) -> Any:
    """A hashable key of an attribute value such that equal keys mean values that write
    the same text and read back equal: types are kept apart (`True`/`1`/`1.0`,
    tuple/list/named tuple), floats compare by their text (`-0.0`, `nan`).

    `None` for a value with no such key: callables and other objects, and lists, dicts
    and arrays unless `mutable` (then keyed by content: for a reader that does not hand
    one value to two places, as the writer's cache of params would)."""
    kind = type(value)
    if kind in _EXACT_TYPES:
        return (kind, value)
    if kind is float or kind is complex:
        return (kind, repr(value))
    if (
        kind is tuple
        or (kind.__base__ is tuple and hasattr(value, "_fields"))
        or (mutable and kind is list)
    ):
        items: list[Any] = [kind]
        for item in value:
            if type(item) is str:  # a str equals only itself: its own key
                items.append(item)
                continue
            key = value_key(item, mutable=mutable)
            if key is None:
                return None
            items.append(key)
        return tuple(items)
    if isinstance(value, (np.dtype, enum.Enum)):
        return (kind, value)
    if mutable and kind is dict:
        pairs: list[Any] = [kind]
        for item in value.items():
            key = value_key(item, mutable=True)
            if key is None:
                return None
            pairs.append(key)
        return tuple(pairs)
    if mutable and isinstance(value, np.ndarray):
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    return None


@functools.lru_cache(maxsize=4096)
def _encode_str(value: str) -> str:
    try:
        decode(value)
    except MoxLimitError:
        return repr(value)  # it reads as an array too large to read: quote it
    except MoxError:
        return value
    return repr(value)


def decode_attr(text: str) -> Any:
    """Read an attribute written by `encode_attr`: a value, or else the bare string.

    Raises:
        MoxLimitError: the text is an array over the load's budget.
    """
    if _BARE.fullmatch(text) and ("/" in text or "<" in text or text.count(".") > 1):
        return text  # a path or qualified name (`layers/0`, `a.b.C`): no value reads so
    try:
        return decode(text)
    except MoxLimitError:
        raise
    except MoxError:
        return text


_CALLS: dict[str, Callable[..., Any]] = {
    "dtype": lambda name: _dtype_name(name),
    "float": lambda text: float(text) if text in ("inf", "-inf", "nan") else _bad(text),
    "array": _decimal_array,
    "prng_impl": lambda name: _prng_impl(name),
    "primitive": lambda name: _primitive(name),
    "checkpoint_policy": decode_policy,
}


def _primitive(name: Any) -> Any:
    found = _PRIMITIVES.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"primitive({name!r}) names no primitive jax exports")
    return found


def _prng_impl(name: Any) -> Any:
    impl = key_impls().get(name) if isinstance(name, str) else None
    if impl is None:
        raise ValueError(f"prng_impl({name!r}) names no known PRNG implementation")
    return impl.param


def _dtype_name(name: Any) -> Any:
    if isinstance(name, str) and name.startswith("key<") and name.endswith(">"):
        impl = key_impls().get(name[len("key<") : -1])
        if impl is None:
            raise ValueError(f"dtype({name!r}) names no known PRNG implementation")
        return impl.dtype
    return _plain_dtype(name)


def _bad(text: Any) -> Any:
    raise ValueError(f"float({text!r}) is not allowed")


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(
        node.value, (int, float, str, bool, type(None), complex)
    ):
        if isinstance(node.value, int) and not -MAX_INT < node.value < MAX_INT:
            raise ValueError(f"an integer of {node.value.bit_length()} bits does not fit 64")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _eval(node.operand)
        if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_eval(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if k is not None]  # None: a `**mapping` entry
        if len(keys) == len(node.keys):
            return {_eval(k): _eval(v) for k, v in zip(keys, node.values, strict=True)}
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        cls = _CLASSES.get(node.value.id)
        if cls is not None and issubclass(cls, enum.Enum) and node.attr in cls.__members__:
            return cls[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        args = [_eval(a) for a in node.args]
        kwargs = {k.arg: _eval(k.value) for k in node.keywords if k.arg is not None}
        if name in _CALLS and len(kwargs) == 0:
            return _CALLS[name](*args)
        cls = _CLASSES.get(name)
        if cls is not None and not issubclass(cls, enum.Enum):
            return cls(*args, **kwargs)
    raise ValueError(f"{ast.dump(node)[:60]} is not an allowed value")
