"""`EMA`: an exponential moving average of a model's Variables, for smoother evaluation.

    ema = EMA(model, decay=0.999)        # a copy of the Variables `only=` selects
    ema.update(model)                    # after each optimizer step (inside `jit` too)
    eval_model = ema.apply_to(model)     # the model's structure over the averages

`ema.params` is a State of new Variables (same types, metadata and sharding as the
model's); `apply_to` builds a model that shares them, so it follows later updates.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp

from bryo_filters import Filter
from bryo_graph import Pytree, State, Variable, data, merge, split, state
from bryo_pytree import Path, path_str

A = TypeVar("A")


def _averaged_copy(path: Path, leaf: object) -> Variable:
    if not isinstance(leaf, Variable):
        raise TypeError(
            f"EMA averages Variables only; the leaf at {path_str(path)} is a "
            f"{type(leaf).__name__}. Select Variables with `only=` (e.g. `only=nnx.Param`)."
        )
    return leaf.copy(jnp.copy(leaf.get_value()))


class EMA(Pytree):
    """An exponential moving average of the Variables of a model (Flax NNX 0.12's `nnx.EMA`).

    Args:
        params: the model (any graph node) whose Variables are averaged.
        decay: the weight of the running average in each update, in `[0, 1]`:
            `average = decay * average + (1 - decay) * new`.
        only: a filter of the Variables to average (default: all of them).
        graph: False reads the model in tree mode (default: the current graph mode).

    Example:
        >>> import jax.numpy as jnp
        >>> from bryo_graph import Dict, Param
        >>> model = Dict(bias=Param(jnp.zeros(2)))
        >>> ema = EMA(model, decay=0.5)
        >>> model["bias"].value = model["bias"].value + 2.0
        >>> ema.update(model)
        >>> print(ema.params["bias"].value)
        [1. 1.]
    """

    def __init__(
        self, params: Any, decay: float, *, only: Filter = ..., graph: bool | None = None
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA `decay` must lie in [0, 1] (e.g. 0.999); got {decay!r}.")
        self.graph = graph
        self.decay = decay
        self.filter = only
        source = state(params, only, graph=graph)
        copies = {path: _averaged_copy(path, leaf) for path, leaf in source.flat_state().items()}
        self.params: State = data(State.from_flat_path(copies))

    def update(self, updates: Any) -> None:
        """Move every average towards the matching Variable of `updates` (a model like the
        one given at construction), in place.

        Raises:
            ValueError: `updates` lacks a path the average has; the message names it.
        """
        new = state(updates, self.filter, graph=self.graph).flat_state()
        averages = self.params.flat_state()
        missing = [path for path in averages if path not in new]
        if missing:  # checked before anything changes
            raise ValueError(
                f"EMA.update: the model has no Variable at {path_str(missing[0])}, which the "
                "average holds. Pass a model with the structure given to `EMA(...)`."
            )
        decay = self.decay
        for path, average in averages.items():
            average[...] = decay * average.get_value() + (1.0 - decay) * new[path].get_value()

    def apply_to(self, model: A) -> A:
        """A new model with `model`'s structure whose averaged Variables are `self.params`'
        (shared, so it follows later updates); the rest of its state is `model`'s."""
        graphdef, model_state = split(model, graph=self.graph)
        return merge(graphdef, model_state, self.params)
