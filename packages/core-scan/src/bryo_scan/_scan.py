"""Curried `scan`, `fold` and `map` over a positional or named axis.

`scan(f, axis, remat=...)(init, *xs)` resolves `axis` through the plugins, moves that axis
of every scanned input to the front, runs `jax.lax.scan` over plain arrays (a nested pair
of scans for `remat="nested"`), and wraps the stacked outputs back into the backend's
types (a NamedArray output gains the scanned axis in front). Which inputs are scanned is
Haliax's rule, `is_scanned`: NamedArrays with the axis and arrays with at least one
dimension by default; everything else reaches every step unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
from jax import lax

from ._hooks import resolve_axis
from ._policy import ScanCheckpointPolicy, tree_bytes
from ._trees import ArgNames, IsScanned, OutputStacker, Rules, scan_predicate, unbind_inputs
from ._types import ScanOutputError

Carry = TypeVar("Carry")
Remat = bool | str | ScanCheckpointPolicy
Body = Callable[[Any, list[jax.Array]], tuple[Any, list[jax.Array]]]


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
    step_bytes = tree_bytes(xs) // length if length else 0
    outer_blocks = policy.outer_blocks(length, tree_bytes(init), step_bytes)
    if outer_blocks is None:
        return lax.scan(block, init, xs, length=length, reverse=reverse, unroll=unroll)
    inner = length // outer_blocks

    def outer(carry: Any, chunk: list[jax.Array]) -> tuple[Any, list[jax.Array]]:
        return lax.scan(block, carry, chunk, length=inner, reverse=reverse, unroll=unroll)

    outer = jax.checkpoint(outer, prevent_cse=policy.prevent_cse)
    grouped = [x.reshape((outer_blocks, inner, *x.shape[1:])) for x in xs]
    carry, ys = lax.scan(outer, init, grouped, length=outer_blocks, reverse=reverse)
    return carry, [y.reshape((length, *y.shape[2:])) for y in ys]


def split_carry_output(result: object, f: Callable, what: str = "`f`") -> tuple[Any, Any]:
    """`result` as `(carry, output)`, or a `ScanOutputError` saying to use `fold`."""
    if not isinstance(result, tuple | list) or len(result) != 2:
        name = getattr(f, "__qualname__", None) or repr(f)
        raise ScanOutputError(
            f"{what} ({name}) must return a pair (carry, output) to be scanned; it returned "
            f"{type(result).__name__}. Use `fold` for functions that return only the carry."
        )
    return result[0], result[1]


def scan_arguments(
    f: Callable[..., tuple[Carry, Any]],
    axis: object,
    init: Carry,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    policy: ScanCheckpointPolicy,
    rules: Rules,
    names: ArgNames,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> tuple[Carry, Any]:
    """Scan `f(carry, *args, **kwargs) -> (carry, y)` over the leaves `rules` pick.

    The engine behind `scan` and `Stacked`: `rules` is a predicate or a prefix of
    `(args, kwargs)` holding predicates (see `unbind_inputs`), `names` names the
    arguments in error messages.
    """
    info = resolve_axis(axis)
    inputs = unbind_inputs(args, kwargs, info, rules=rules, names=names)
    length = inputs.steps(info, "scan")
    outputs = OutputStacker(static_nonarrays=False)

    def body(carry: Carry, slices: list[jax.Array]) -> tuple[Carry, list[jax.Array]]:
        step = inputs.rebuild(slices)
        carry, y = split_carry_output(f(carry, *step.args, **step.kwargs), f)
        return carry, outputs.flatten(y)

    carry, ys = checkpointed_scan(body, init, inputs.arrays, length, policy, reverse, unroll)
    return carry, outputs.unflatten(ys, info)


def _scanner(
    step: Callable[..., tuple[Any, Any]],
    user_fn: Callable,
    axis: object,
    *,
    remat: Remat,
    reverse: bool,
    unroll: int | bool,
    rules: Rules,
    skip: int,
) -> Callable[[Any, tuple, dict[str, Any]], tuple[Any, Any]]:
    """`run(init, args, kwargs)` scanning `step`; errors name `user_fn`'s parameters."""
    policy = ScanCheckpointPolicy.from_remat(remat)

    def run(init: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        names = ArgNames.of(user_fn, skip)
        return scan_arguments(
            step,
            axis,
            init,
            args,
            kwargs,
            policy=policy,
            rules=rules,
            names=names,
            reverse=reverse,
            unroll=unroll,
        )

    return run


def scan(
    f: Callable[..., tuple[Carry, Any]],
    axis: object,
    *,
    remat: Remat = False,
    reverse: bool = False,
    unroll: int | bool = 1,
    is_scanned: IsScanned = None,
) -> Callable[..., tuple[Carry, Any]]:
    """Curried scan: `scan(f, axis)(init, *xs, **kwxs)` -> `(carry, stacked outputs)`.

    Args:
        f: `f(carry, *x, **kwx) -> (carry, y)`, called with one slice of each scanned input.
        axis: the axis to scan: an int (plain arrays' positional axis), or an axis name
            or `Axis` (named backend); plain arrays are then scanned over their first axis.
        remat: checkpoint policy: False (default), True, "full", "nested", "offload",
            "save_all", "recompute" or a `ScanCheckpointPolicy`.
        reverse: scan from the last element to the first (outputs stay in order).
        unroll: `jax.lax.scan`'s unroll.
        is_scanned: which array leaves of the inputs are scanned: a predicate
            `leaf -> bool`, True (all), False (none), or None: NamedArrays that have the
            axis and arrays with at least one dimension. NamedArrays without the axis,
            0-d arrays and non-array leaves always reach every step unchanged.

    Returns:
        A function `(init, *xs, **kwxs) -> (carry, ys)`. Inputs may be None (no inputs)
        when the axis carries its size. Outputs are stacked on a new leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> carry, ys = scan(lambda c, x: (c + x, c), 0)(0.0, jnp.arange(4.0))
        >>> float(carry), ys.tolist()
        (6.0, [0.0, 0.0, 1.0, 3.0])
    """
    rules = scan_predicate(is_scanned)
    run = _scanner(f, f, axis, remat=remat, reverse=reverse, unroll=unroll, rules=rules, skip=1)

    @functools.wraps(f)
    def scanned(init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        return run(init, args, kwargs)

    return scanned


def fold(
    f: Callable[..., Carry],
    axis: object,
    *,
    remat: Remat = False,
    reverse: bool = False,
    unroll: int | bool = 1,
    is_scanned: IsScanned = None,
) -> Callable[..., Carry]:
    """Curried fold: `fold(f, axis)(init, *xs)` -> the final carry.

    Like `scan` (same arguments) for a function `f(carry, *x) -> carry` that has no
    per-step output.

    Example:
        >>> import jax.numpy as jnp
        >>> float(fold(lambda c, x: c + x, 0)(0.0, jnp.arange(4.0)))
        6.0
    """

    def step(carry: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, None]:
        return f(carry, *args, **kwargs), None

    rules = scan_predicate(is_scanned)
    run = _scanner(step, f, axis, remat=remat, reverse=reverse, unroll=unroll, rules=rules, skip=1)

    @functools.wraps(f)
    def folded(init: Carry, *args: Any, **kwargs: Any) -> Carry:
        return run(init, args, kwargs)[0]

    return folded


def map(
    f: Callable[..., Any],
    axis: object,
    *,
    remat: Remat = False,
    reverse: bool = False,
    unroll: int | bool = 1,
    is_mapped: IsScanned = None,
) -> Callable[..., Any]:
    """Curried sequential map: `map(f, axis)(*xs)` applies `f` to each slice in turn.

    Uses less memory than `vmap` but runs one slice at a time (like `jax.lax.map`).
    `is_mapped` picks the mapped inputs, as `is_scanned` does for `scan`.

    Example:
        >>> import jax.numpy as jnp
        >>> map(lambda x: x + 1, 0)(jnp.arange(3)).tolist()
        [1, 2, 3]
    """

    def step(carry: None, *args: Any, **kwargs: Any) -> tuple[None, Any]:
        return None, f(*args, **kwargs)

    rules = scan_predicate(is_mapped, "is_mapped")
    run = _scanner(step, f, axis, remat=remat, reverse=reverse, unroll=unroll, rules=rules, skip=0)

    @functools.wraps(f)
    def mapped(*args: Any, **kwargs: Any) -> Any:
        return run(None, args, kwargs)[1]

    return mapped
