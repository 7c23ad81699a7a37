"""Curried `scan`, `fold` and `map` over a positional or named axis.

`scan(f, axis, remat=...)(init, *xs)` resolves `axis` through the plugins, moves that axis
of every scanned input to the front, runs `jax.lax.scan` over plain arrays (a nested pair
of scans for `remat="nested"`), and wraps the stacked outputs back into the backend's
types (a NamedArray output gains the scanned axis in front).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
from jax import lax

from ._hooks import resolve_axis
from ._policy import ScanCheckpointPolicy
from ._trees import OutputStacker, Unbound, unbind_tree
from ._types import AxisInfo, PyTree, ScanAxisError

Carry = TypeVar("Carry")
Remat = bool | str | ScanCheckpointPolicy
Body = Callable[[Any, list[jax.Array]], tuple[Any, list[jax.Array]]]


def _pack(args: tuple, kwargs: dict) -> tuple[PyTree, str, Callable[[PyTree], tuple]]:
    """The scanned inputs as one tree (with the name errors use) and the way back."""
    if len(args) == 1 and not kwargs:
        return args[0], "xs", lambda tree: ((tree,), {})
    return (args, kwargs), "xs", lambda tree: tree


def _length(inputs: Unbound, axis: AxisInfo) -> int:
    if inputs.length is not None:
        return inputs.length
    if axis.size is not None:
        return axis.size
    hint = (
        f"Pass an axis that carries its size, e.g. Axis({axis.name!r}, 100) instead of "
        f"{axis.name!r}, or declare the size with bryo_named's `axis_sizes({axis.name}=100)`."
        if axis.name is not None
        else "Pass a named axis with a size, e.g. Axis('Time', 100)."
    )
    raise ScanAxisError(
        f"cannot tell how many steps to take over {axis}: `xs` holds no arrays "
        f"(it is None or static). {hint}"
    )


def checkpointed_scan(
    body: Body,
    init: Any,
    xs: list[jax.Array],
    length: int,
    policy: ScanCheckpointPolicy,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> tuple[Any, list[jax.Array]]:
    """`jax.lax.scan` of `body` checkpointed by `policy`: one scan, or for a nested policy
    an outer scan of inner ones. The engine under `scan`, `fold`, `Stacked` and the
    graph-level scan of `bryo_transforms`.

    Args:
        body: `(carry, [x slices]) -> (carry, [y slices])`.
        init: the initial carry.
        xs: the arrays scanned over their leading axis.
        length: the number of steps.
        policy: the checkpoint policy (`ScanCheckpointPolicy.from_remat(remat)`).
        reverse, unroll: as for `jax.lax.scan`.

    Returns:
        `(final carry, [stacked ys])`.
    """
    block = policy.checkpoint(body)
    outer_blocks = policy.outer_blocks(length)
    if outer_blocks is None:
        return lax.scan(block, init, xs, length=length, reverse=reverse, unroll=unroll)
    inner = length // outer_blocks

    def outer(carry: Any, chunk: list[jax.Array]) -> tuple[Any, list[jax.Array]]:
        return lax.scan(block, carry, chunk, length=inner, reverse=reverse, unroll=unroll)

    outer = jax.checkpoint(outer, prevent_cse=policy.prevent_cse)
    grouped = [x.reshape((outer_blocks, inner, *x.shape[1:])) for x in xs]
    carry, ys = lax.scan(outer, init, grouped, length=outer_blocks, reverse=reverse)
    return carry, [y.reshape((length, *y.shape[2:])) for y in ys]


def _split_carry_output(result: object, f: Callable) -> tuple[Any, Any]:
    if not isinstance(result, tuple) or len(result) != 2:
        name = getattr(f, "__name__", repr(f))
        raise TypeError(
            f"`f` ({name}) must return a pair (carry, output) for `scan`; it returned "
            f"{type(result).__name__}. Use `fold` for functions that return only the carry."
        )
    return result


def scan(
    f: Callable[..., tuple[Carry, Any]],
    axis: object,
    *,
    remat: Remat = False,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> Callable[..., tuple[Carry, Any]]:
    """Curried scan: `scan(f, axis)(init, *xs)` -> `(carry, stacked outputs)`.

    Args:
        f: `f(carry, *x) -> (carry, y)`, called with one slice of each input.
        axis: the axis to scan: an int (plain arrays' positional axis), or an axis name
            or `Axis` (named backend); plain arrays are then scanned over their first axis.
        remat: checkpoint policy: False (default), True, "full", "nested", "offload",
            "save_all" or a `ScanCheckpointPolicy`.
        reverse: scan from the last element to the first (outputs stay in order).
        unroll: `jax.lax.scan`'s unroll.

    Returns:
        A function `(init, *xs, **kwxs) -> (carry, ys)`. `xs` may be None (no inputs)
        when the axis carries its size. Outputs are stacked on a new leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> carry, ys = scan(lambda c, x: (c + x, c), 0)(0.0, jnp.arange(4.0))
        >>> float(carry), ys.tolist()
        (6.0, [0.0, 0.0, 1.0, 3.0])
    """
    policy = ScanCheckpointPolicy.from_remat(remat)

    @functools.wraps(f)
    def scanned(init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        info = resolve_axis(axis)
        tree, what, unpack = _pack(args, kwargs)
        inputs = unbind_tree(tree, info, what=what)
        length = _length(inputs, info)
        outputs = OutputStacker(static_nonarrays=False)

        def body(carry: Carry, slices: list[jax.Array]) -> tuple[Carry, list[jax.Array]]:
            step_args, step_kwargs = unpack(inputs.rebuild(slices))
            carry, y = _split_carry_output(f(carry, *step_args, **step_kwargs), f)
            return carry, outputs.flatten(y)

        carry, ys = checkpointed_scan(body, init, inputs.arrays, length, policy, reverse, unroll)
        return carry, outputs.unflatten(ys, info)

    return scanned


def fold(
    f: Callable[..., Carry],
    axis: object,
    *,
    remat: Remat = False,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> Callable[..., Carry]:
    """Curried fold: `fold(f, axis)(init, *xs)` -> the final carry.

    Like `scan` for a function `f(carry, *x) -> carry` that has no per-step output.

    Example:
        >>> import jax.numpy as jnp
        >>> float(fold(lambda c, x: c + x, 0)(0.0, jnp.arange(4.0)))
        6.0
    """
    scanned = scan(
        lambda carry, *a, **k: (f(carry, *a, **k), None),
        axis,
        remat=remat,
        reverse=reverse,
        unroll=unroll,
    )

    @functools.wraps(f)
    def folded(init: Carry, *args: Any, **kwargs: Any) -> Carry:
        return scanned(init, *args, **kwargs)[0]

    return folded


def map(f: Callable[..., Any], axis: object, *, remat: Remat = False) -> Callable[..., Any]:
    """Curried sequential map: `map(f, axis)(*xs)` applies `f` to each slice in turn.

    Uses less memory than `vmap` but runs one slice at a time (like `jax.lax.map`).

    Example:
        >>> import jax.numpy as jnp
        >>> map(lambda x: x + 1, 0)(jnp.arange(3)).tolist()
        [1, 2, 3]
    """
    scanned = scan(lambda _, *a, **k: (None, f(*a, **k)), axis, remat=remat)

    @functools.wraps(f)
    def mapped(*args: Any, **kwargs: Any) -> Any:
        return scanned(None, *args, **kwargs)[1]

    return mapped
