"""`while_loop` and `fori_loop`: `jax.lax` loops whose carry holds graph nodes.

The carry is any pytree of modules, `Rngs`, Variables, arrays and static values. Each
step sees it rebuilt inside the loop and must return it with the same layout: the same
graph nodes (changed values only), arrays of the same shapes, equal static values.
After the loop the final values are written into the caller's Variables and the carry
comes back holding the caller's own objects (`_state_call`); a carry of immutable nodes
(Equinox models) whose arrays changed comes back as new nodes, as from `jax.lax`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import jax

from ._errors import TransformError
from ._layout import scan_args
from ._simple import tree_mode
from ._state_call import StateCall

T = TypeVar("T")


class _Carry(Generic[T]):
    """The loop carry of one call: `(leaves, arrays)` in, the user's carry out.

    The carry is rebuilt with the layout of `init_val` (`values` checks each step's), so it
    has `init_val`'s type; the casts below say so.
    """

    def __init__(self, name: str, init_val: T, graph: bool | None) -> None:
        self.call = StateCall(name, (init_val,), tree=tree_mode(graph))

    def init(self) -> tuple[list, list]:
        return self.call.leaves(), self.call.arrays

    def value(self, carry: tuple[list, list]) -> tuple[T, Any]:
        """The user's carry rebuilt from the loop's values, and the `Inner` record."""
        (val,), _, inner = self.call.rebuild(*carry)
        return cast(T, val), inner

    def values(self, new_val: object, inner: Any) -> tuple[list, list]:
        """The loop's values of `new_val` (the step's result), checked against the input."""
        call = self.call
        key, roots, arrays = scan_args((new_val,), {})
        if key.layouts != call.key.layouts:
            raise TransformError(
                f"`{call.name}`: the step function must return the carry with the layout it "
                "was given (same containers, graph nodes in the same places, equal static "
                f"values); got a {type(new_val).__name__} laid out differently."
            )
        return call.leaves_after(inner, roots), arrays

    def result(self, carry: tuple[list, list]) -> T:
        """Outside: write the final values and rebuild the carry from the caller's nodes
        (a carry of immutable nodes whose arrays the loop changed: rebuilt from its final
        values, new nodes as `jax.lax` loops make)."""
        leaves, arrays = carry
        call = self.call
        if call.fixed_changed:
            if not call.all_fixed:
                k = min(call.fixed_changed)
                parent = type(call.plan.sources[k].parent).__name__
                raise TransformError(
                    f"`{call.name}`: the step replaced {call.plan.sig.describe_leaf(k)}, an "
                    f"array of an immutable {parent}, in a carry that also holds Variables; "
                    "those are written back into the caller's objects, which cannot take a "
                    f"new {parent}. Loop over the immutable model in a `{call.name}` of its "
                    "own (it comes back rebuilt), or keep it unchanged in this one."
                )
            (val,), _, _ = call.rebuild(leaves, arrays)
            return cast(T, val)
        call.write(leaves)
        roots = iter(call.plan.pair[0])
        return cast(T, call.key.layouts[0].rebuild(roots, iter(arrays)))


def while_loop(
    cond_fun: Callable[[T], Any],
    body_fun: Callable[[T], T],
    init_val: T,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """`jax.lax.while_loop` with modules, `Rngs` and Variables in the carry.

    Args:
        cond_fun: the carry -> a boolean scalar; what it changes is dropped.
        body_fun: the carry -> the next carry, laid out as it was given.
        init_val: the initial carry.
        graph: False (tree mode) refuses a carry that shares a Variable.
        graph_updates: accepted for Flax's signature; the carry's structure may never
            change, so both settings behave alike.

    Returns:
        The final carry, holding the caller's own graph nodes with their final values.

    Example:
        >>> model, y, _ = while_loop(lambda c: c[2] > 0, step, (model, x, 3))  # doctest: +SKIP
    """
    del graph_updates
    carry = _Carry("while_loop", init_val, graph)

    def cond(values: tuple[list, list]) -> Any:
        return cond_fun(carry.value(values)[0])

    def body(values: tuple[list, list]) -> tuple[list, list]:
        val, inner = carry.value(values)
        return carry.values(body_fun(val), inner)

    return carry.result(jax.lax.while_loop(cond, body, carry.init()))


def fori_loop(
    lower: Any,
    upper: Any,
    body_fun: Callable[[Any, T], T],
    init_val: T,
    *,
    unroll: int | bool | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """`jax.lax.fori_loop` with modules, `Rngs` and Variables in the carry.

    Args:
        lower: the first index.
        upper: the index after the last.
        body_fun: `(index, carry)` -> the next carry, laid out as it was given.
        init_val: the initial carry.
        unroll: passed to `jax.lax.fori_loop`.
        graph: False (tree mode) refuses a carry that shares a Variable.
        graph_updates: accepted for Flax's signature (see `while_loop`).

    Returns:
        The final carry, holding the caller's own graph nodes with their final values.
    """
    del graph_updates
    carry = _Carry("fori_loop", init_val, graph)

    def body(i: Any, values: tuple[list, list]) -> tuple[list, list]:
        val, inner = carry.value(values)
        return carry.values(body_fun(i, val), inner)

    out = jax.lax.fori_loop(lower, upper, body, carry.init(), unroll=unroll)
    return carry.result(out)
