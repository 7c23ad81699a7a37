"""`Optimizer`: an optax transformation applied in place to the Variables a filter selects.

    >>> optimizer = Optimizer(model, optax.adam(1e-3), wrt=Param)   # doctest: +SKIP
    >>> grads = grad(loss_fn)(model)                                 # doctest: +SKIP
    >>> optimizer.update(model, grads)                               # doctest: +SKIP

The optimizer is a graph node itself: its `step` and every array of the optax state are
`OptState` Variables (`OptVariable` for the ones shaped like a parameter, with that
parameter's metadata, so sharding annotations carry over; `OptArray` for the rest), laid
out under `opt_state` in optax's own structure, as in Flax: Adam's is a tuple whose first
item is optax's `ScaleByAdamState`, holding States like the model's
(`opt_state[0].mu['kernel']`, or `opt_state[0][1].layers[0]['kernel']` for a
`Sequential`). So `split`, `merge`, `jit` and checkpointing treat model and optimizer alike.
`ModelAndOptimizer` keeps the model too, for the older one-argument `update(grads)`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import optax

from bryo_filters import Filter
from bryo_graph import Object, Param, State, Variable, VariableState, data, state, update

M = TypeVar("M")

_VARIABLE_TYPES = tuple(t for t in (Variable, VariableState) if isinstance(t, type))
_MISSING: Any = object()

WRT_REQUIRED = (
    "`Optimizer` needs `wrt=`, the filter of the Variables it updates (e.g. `wrt=nnx.Param`, "
    "the filter your `grad` differentiates), as in Flax 0.11 and later. For the older "
    "behaviour (the model kept inside, `update(grads)`), use `nnx.ModelAndOptimizer`."
)
GRADS_REQUIRED = (
    "`Optimizer.update` takes the model and the gradients: `optimizer.update(model, grads)` "
    "(Flax 0.11 and later). To call `update(grads)`, use `nnx.ModelAndOptimizer`, which keeps "
    "the model."
)


class OptState(Variable):
    """Any optimizer state (the step count, optax's arrays)."""

    __slots__ = ()


class OptArray(OptState):
    """Optimizer state that is not shaped after a parameter (e.g. Adam's `count`)."""

    __slots__ = ()


class OptVariable(OptState):
    """Optimizer state kept per parameter (e.g. Adam's `mu`), with the parameter's metadata."""

    __slots__ = ()


def _is_variable(x: object) -> bool:
    return isinstance(x, _VARIABLE_TYPES)


def _pure(tree: Any) -> Any:
    """`tree` with each Variable replaced by its value."""
    return jax.tree.map(lambda x: x.value if _is_variable(x) else x, tree, is_leaf=_is_variable)


def _to_opt_state(leaf: object) -> OptState:
    if not _is_variable(leaf):
        return OptArray(leaf)
    metadata = dict(leaf.metadata)  # type: ignore[attr-defined]  # _is_variable(leaf) checked above
    if "optimizer_sharding" in metadata:  # Flax's annotation for a differently sharded state
        for key in ("sharding", "sharding_names"):  # the older spellings of `out_sharding`
            metadata.pop(key, None)
        metadata["out_sharding"] = metadata.pop("optimizer_sharding")
    return OptVariable(leaf.value, **metadata)  # type: ignore[attr-defined]  # _is_variable(leaf) checked above


def to_opt_state(tree: Any) -> Any:
    """`tree` (an optax state) with each leaf in an `OptState` Variable, in optax's own
    structure: a Variable (of the State optax was given) becomes an `OptVariable` with its
    metadata, any other array an `OptArray` (Flax's `nnx.training.optimizer.to_opt_state`)."""
    return jax.tree.map(_to_opt_state, tree, is_leaf=_is_variable)


def _variables_of(node: object, wrt: Filter) -> State:
    """The Variables of `node` (a model, or a State of gradients) that `wrt` selects."""
    if isinstance(node, State):
        return node.filter(wrt)
    return state(node, wrt)


class Optimizer(Object, Generic[M]):
    """An optax transformation and its state for the Variables of a model `wrt` selects.

    Args:
        model: the model (any bryo graph node) whose Variables will be updated.
        tx: the optax transformation.
        wrt: the filter of the Variables to update (`Param`, `LoRAParam`, ...): the same
            one the gradients are taken with.

    Attributes:
        step: the number of updates, an `OptState` (`uint32`).
        tx: the optax transformation.
        opt_state: the optax state, as `OptState` Variables in optax's structure.
        wrt: the filter.
    """

    def __init__(self, model: M, tx: optax.GradientTransformation, *, wrt: Filter = _MISSING):
        if wrt is _MISSING:
            raise TypeError(WRT_REQUIRED)
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        self.tx = tx
        self.wrt = wrt
        self.opt_state = data(to_opt_state(tx.init(_variables_of(model, wrt))))

    def __getattr__(self, name: str) -> Any:
        if name == "model":
            raise AttributeError(
                f"{type(self).__name__} keeps no `model` (Flax 0.11 and later); pass the model "
                "to `update(model, grads)`, or use `nnx.ModelAndOptimizer` to keep it."
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _pure_opt_state(self) -> Any:
        return _pure(self.opt_state)

    def _write_opt_state(self, opt_state: Any) -> None:
        slots, treedef = jax.tree.flatten(self.opt_state, is_leaf=_is_variable)
        for slot, value in zip(slots, treedef.flatten_up_to(opt_state), strict=True):
            slot[...] = value

    def update(self, model: M, grads: Any = _MISSING, /, **kwargs: Any) -> optax.Updates:
        """Apply one optax step: update the state and the model's `wrt` Variables in place.

        Args:
            model: the model the optimizer was built for.
            grads: the gradients (a State, or a model of gradients), e.g. from `nnx.grad`.
            **kwargs: extra arguments of `tx.update` (`value`, `grad`, `value_fn` for
                `optax.scale_by_backtracking_linesearch` and `optax.lbfgs`).

        Returns:
            The updates optax computed, shaped like the selected parameters.
        """
        if grads is _MISSING:
            raise TypeError(GRADS_REQUIRED)
        params = _pure(_variables_of(model, self.wrt))
        grad_values = _pure(_variables_of(grads, self.wrt))
        updates, new_opt_state = self.tx.update(
            grad_values, self._pure_opt_state(), params, **_pure(kwargs)
        )
        new_params: State = optax.apply_updates(params, updates)  # type: ignore[assignment]  # optax types it `Params`; it keeps params' structure, a State
        update(model, new_params)
        self._write_opt_state(new_opt_state)
        self.step[...] += 1
        return updates


class ModelAndOptimizer(Optimizer[M]):
    """An `Optimizer` that keeps its model: `update(grads)` (Flax's older API).

    Args:
        model: the model, kept as `model`.
        tx: the optax transformation.
        wrt: the filter of the Variables to update (default `Param`).
    """

    def __init__(self, model: M, tx: optax.GradientTransformation, *, wrt: Filter = Param):
        super().__init__(model, tx, wrt=wrt)
        self.model = model

    def update(self, grads: Any, /, **kwargs: Any) -> optax.Updates:
        """Apply one optax step to `model` with `grads` (see `Optimizer.update`)."""
        return super().update(self.model, grads, **kwargs)
