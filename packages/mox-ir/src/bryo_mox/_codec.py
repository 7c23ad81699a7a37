"""Text form of equation params and attributes, and its safe parser.

Params are written in Python literal syntax (`(([1], [0]), ([], []))`, `dtype('float32')`,
`Precision.HIGHEST`, `GatherDimensionNumbers(offset_dims=(1,), ...)`) and read back with
`ast.parse` and a whitelist: literals, `None`/`True`/`False`, and calls of a fixed set of
jax value types. Nothing is evaluated, so reading untrusted text is safe.
"""

from __future__ import annotations

import ast
import enum
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ._errors import MoxError
from ._types import is_key_dtype, key_impls

MAX_TEXT = 100_000


class Unencodable(MoxError):
    """A param value the text form cannot express (a callable, a sharding object, ...)."""


def _value_classes() -> dict[str, type]:
    classes: dict[str, type] = {}
    for name in dir(jax.lax):
        value = getattr(jax.lax, name)
        if isinstance(value, type) and (
            issubclass(value, enum.Enum) or (issubclass(value, tuple) and hasattr(value, "_fields"))
        ):
            classes[value.__name__] = value
    return classes


_CLASSES = _value_classes()


def encode(value: Any, *, strict: bool = True) -> str:
    """`value` in Python literal syntax; raises `Unencodable` (if `strict`) when impossible."""
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
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
    if isinstance(value, enum.Enum) and _CLASSES.get(type(value).__name__) is type(value):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        if _CLASSES.get(type(value).__name__) is type(value):
            fields = ", ".join(
                f"{k}={encode(v, strict=strict)}"
                for k, v in zip(value._fields, value, strict=False)
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
    if isinstance(value, np.ndarray):
        return f"array({encode(value.tolist(), strict=strict)}, dtype({value.dtype.name!r}))"
    if strict:
        raise Unencodable(
            f"a value of type {type(value).__name__} ({value!r:.60}) has no text form"
        )
    return str(value)


def decode(text: str) -> Any:
    """Parse text written by `encode`. Raises `MoxError` for anything else."""
    if len(text) > MAX_TEXT:
        raise MoxError(f"a param text of {len(text)} characters exceeds {MAX_TEXT}.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _eval(tree.body)
    except (SyntaxError, RecursionError, ValueError, TypeError) as error:
        raise MoxError(f"cannot read param text {text[:80]!r}: {error}") from None


def encode_attr(value: Any, *, strict: bool = True) -> str:
    """Like `encode`, but a string is written bare when it cannot be mistaken for a value
    (`name="relu"`, `name="layers/0"`), as the seed's XML shows."""
    if isinstance(value, str):
        return _encode_str(value)
    return encode(value, strict=strict)


@functools.lru_cache(maxsize=4096)
def _encode_str(value: str) -> str:
    try:
        decode(value)
    except MoxError:
        return value
    return repr(value)


def decode_attr(text: str) -> Any:
    """Read an attribute written by `encode_attr`: a value, or else the bare string."""
    try:
        return decode(text)
    except MoxError:
        return text


_CALLS: dict[str, Callable[..., Any]] = {
    "dtype": lambda name: _dtype_name(name),
    "float": lambda text: float(text) if text in ("inf", "-inf", "nan") else _bad(text),
    "array": lambda data, dtype: np.asarray(data, dtype=dtype),
    "prng_impl": lambda name: _prng_impl(name),
}


def _prng_impl(name: Any) -> Any:
    impl = key_impls().get(name) if isinstance(name, str) else None
    if impl is None:
        raise ValueError(f"prng_impl({name!r}) names no known PRNG implementation")
    return impl.param


def _dtype_name(name: Any) -> Any:
    if not isinstance(name, str):
        raise ValueError(f"dtype name must be a string, got {name!r}")
    import jax.numpy as jnp

    if name.startswith("key<") and name.endswith(">"):
        impl = key_impls().get(name[len("key<") : -1])
        if impl is None:
            raise ValueError(f"dtype({name!r}) names no known PRNG implementation")
        return impl.dtype
    return jnp.dtype(name)


def _bad(text: Any) -> Any:
    raise ValueError(f"float({text!r}) is not allowed")


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(
        node.value, (int, float, str, bool, type(None), complex)
    ):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _eval(node.operand)
        if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_eval(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_eval(k): _eval(v) for k, v in zip(node.keys, node.values, strict=False)}
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
