"""`updated`: the functional `update` for immutable models.

`bryo.update` writes into a model in place, which an Equinox model does not allow: it
raises a `GraphError` naming the paths and pointing here. `updated` returns a new model
with the given values instead, checking every path first, as `update` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from bryo_graph import GraphError, State, merge, split
from bryo_pytree import path_str

T = TypeVar("T")


def updated(model: T, state: State | Mapping, /, *states: State | Mapping) -> T:
    """A copy of `model` holding the values of `states`; `model` itself is unchanged.

    The functional twin of `bryo.update` for immutable models (Equinox modules, tuples,
    `eqx.nn.State`): paths that `states` leave out keep `model`'s values, static fields
    and the structure stay as they are.

    Args:
        model: an Equinox model (or any graph bryo can split).
        state: a State, or nested mapping, of values for some of `model`'s paths;
            `states` add more (later ones win on equal paths).

    Returns:
        A new model of `model`'s structure.

    Raises:
        GraphError: a path of `states` that `model` does not have; nothing is built.

    Example:
        >>> graphdef, params, stats = bryo.split(model, Param, BatchStat)  # doctest: +SKIP
        >>> model = updated(model, new_stats)  # doctest: +SKIP
    """
    graphdef, current = split(model)
    new = State.merge(state, *states)
    known = current.flat_state()
    unknown = [path for path in new.flat_state() if path not in known]
    if unknown:
        shown = ", ".join(path_str(p) for p in unknown[:6])
        more = f" and {len(unknown) - 6} more" if len(unknown) > 6 else ""
        raise GraphError(
            f"`updated` got paths the model does not have: {shown}{more}. Pass a State "
            "split from this model (or from one of the same structure)."
        )
    return merge(graphdef, current, new)
