"""`cond` and `switch`: `jax.lax.cond`/`jax.lax.switch` over functions of graph nodes.

Each branch gets the operands rebuilt inside the primitive; Variable values it changes
are written back into the caller's Variables afterwards (the branch not taken leaves
them as they were). Branches must keep the operands' structure (`_state_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from ._simple import tree_mode
from ._state_call import StateCall

A = TypeVar("A")


def cond(
    pred: Any,
    true_fun: Callable[..., A],
    false_fun: Callable[..., A],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """Apply `true_fun(*operands)` if `pred` else `false_fun(*operands)`, as
    `jax.lax.cond`, with modules, `Rngs` and Variables among the operands.

    Args:
        pred: a boolean scalar (traced or not).
        true_fun: the branch taken when `pred` is true.
        false_fun: the branch taken otherwise.
        *operands: the branches' arguments.
        graph: False (tree mode) refuses operands that share a Variable.
        graph_updates: accepted for Flax's signature; branches may never change the
            operands' structure, so both settings behave alike.

    Returns:
        The branch's output (arrays; graph nodes of the operands come back as the
        caller's objects).

    Example:
        >>> bump = lambda m: m.count.set_value(m.count + 1)  # doctest: +SKIP
        >>> cond(x > 0, bump, lambda m: None, model)  # doctest: +SKIP
    """
    del graph_updates
    call = StateCall("cond", operands, tree=tree_mode(graph))
    leaves, out = jax.lax.cond(
        pred, call.branch(true_fun), call.branch(false_fun), call.leaves(), call.arrays
    )
    call.write(leaves)
    return call.unwrap_output(out)  # type: ignore[return-value]  # the branches' output, rebuilt: the caller's type A


def switch(
    index: Any,
    branches: Sequence[Callable[..., A]],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """Apply `branches[index](*operands)`, as `jax.lax.switch` (an index out of range is
    clamped), with modules, `Rngs` and Variables among the operands.

    Args:
        index: an integer scalar (traced or not).
        branches: the functions to choose from.
        *operands: the branches' arguments.
        graph: False (tree mode) refuses operands that share a Variable.
        graph_updates: accepted for Flax's signature (see `cond`).

    Returns:
        The chosen branch's output.
    """
    del graph_updates
    if not branches:
        raise ValueError("`switch` needs at least one branch; got an empty sequence.")
    call = StateCall("switch", operands, tree=tree_mode(graph))
    leaves, out = jax.lax.switch(
        index, [call.branch(f) for f in branches], call.leaves(), call.arrays
    )
    call.write(leaves)
    return call.unwrap_output(out)  # type: ignore[return-value]  # the branches' output, rebuilt: the caller's type A
