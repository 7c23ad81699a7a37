"""`TrainState`: the functional training state — graphdef, parameters, optax state and step
in one immutable pytree, for `jax.jit`-ed steps over pure values.

    graphdef, params, counts = split(model, Param, Count)
    ts = TrainState.create(graphdef, params=params, tx=optax.sgd(0.1))
    y, _ = ts.apply('params')(x)
    ts = ts.apply_gradients(grads)

Subclasses add fields (further States, counters) and are pytree dataclasses too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

import jax
import jax.numpy as jnp
import optax

from bryo_graph import GraphDef, State, merge, split
from bryo_pytree import pytree_dataclass, static_field


class _ApplyCaller:
    """`ts.apply(...)`: call the merged module (`(x)`) or one of its methods (`.encode(x)`);
    each call returns `(output, (graphdef, state))`, the state after the call."""

    def __init__(self, graphdef: GraphDef, states: tuple[State, ...], path: tuple[str, ...] = ()):
        self._graphdef, self._states, self._path = graphdef, states, path

    def __getattr__(self, name: str) -> _ApplyCaller:
        if name.startswith("__"):
            raise AttributeError(name)
        return _ApplyCaller(self._graphdef, self._states, (*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, tuple[GraphDef, State]]:
        module = merge(self._graphdef, *self._states)
        method: Callable[..., Any] = module
        for name in self._path:
            method = getattr(method, name)
        out = method(*args, **kwargs)
        return out, split(module)


M = TypeVar("M")


@pytree_dataclass
class TrainState(Generic[M]):
    """Graphdef, parameters, optax state and step: a pytree to thread through `jax.jit`.

    Generic in the model's class, as Flax's: `class TrainState(nnx.TrainState[MLP])`.

    Attributes:
        graphdef: the model's structure (static).
        params: the trained State.
        opt_state: the optax state of `params`.
        step: the number of `apply_gradients` calls.
        tx: the optax transformation (static).
    """

    graphdef: GraphDef = static_field()
    params: State
    opt_state: optax.OptState
    step: jax.Array
    tx: optax.GradientTransformation = static_field()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        pytree_dataclass(cls)  # a subclass's own fields join the dataclass and the pytree

    @classmethod
    def create(
        cls,
        graphdef: GraphDef,
        *,
        params: State,
        tx: optax.GradientTransformation,
        step: int = 0,
        **kwargs: Any,
    ) -> Self:
        """A new state: `tx.init(params)`, step `step`; `kwargs` fill a subclass's fields."""
        return cls(
            graphdef=graphdef,
            params=params,
            opt_state=tx.init(params),
            step=jnp.asarray(step),
            tx=tx,
            **kwargs,
        )

    def apply(self, state: State | str, *states: State | str) -> _ApplyCaller:
        """Call the model merged from `graphdef` and the given States (or field names)."""
        resolved = []
        for item in (state, *states):
            if isinstance(item, str):
                value = getattr(self, item)
                if not isinstance(value, State):
                    raise TypeError(
                        f"{type(self).__name__}.apply: the field {item!r} holds a "
                        f"{type(value).__name__}, not a State."
                    )
                item = value
            resolved.append(item)
        return _ApplyCaller(self.graphdef, tuple(resolved))

    def apply_gradients(self, grads: State, **kwargs: Any) -> Self:
        """The state after one optax step with `grads`; `kwargs` replace other fields."""
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(params=params, opt_state=opt_state, step=self.step + 1, **kwargs)

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` to its fields."""
        return dataclasses.replace(self, **changes)
