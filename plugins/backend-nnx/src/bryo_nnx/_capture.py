"""Where `Module.sow` puts values while `capture` runs: a session per capturing call.

`capture(fn, Intermediate)` opens a `Captures` session for the modules of its model
(found by identity, with their paths). While it is active, `Module.sow` on one of them
folds the value into the session (`reduce_fn(previous or init_fn(), value)`) instead of
setting an attribute, and returns whether that Variable type is captured; afterwards the
session becomes one State per captured type, nested by module path as the model is.
Modules outside the session (none open, or a module the capture did not see) sow into
attributes as before. Inside a lifted transform (`scan`, `vmap`) the modules are the
transform's copies, so their `sow` sets attributes, which the transform writes back
(stacked along the axis their `StateAxes` give them); `adopt` then moves the new Variables
of a captured type from the model's modules into the session.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from bryo_graph import Intermediate, State, Variable
from bryo_pytree import Key, Path

_ACTIVE: contextvars.ContextVar[Captures | None] = contextvars.ContextVar(
    "bryo_nnx_captures", default=None
)


class Perturbation(Intermediate):
    """A value `Module.perturb` adds to an intermediate, to take gradients with respect to
    that intermediate (capture the zeros first, then differentiate w.r.t. them)."""


class Captures:
    """The values sown into the modules of one `capture` call.

    Attributes:
        var_types: the Variable types captured (sowing another type returns False).
        paths: `id(module)` -> its path in the captured model.
        values: module path -> Variable type -> name -> the value so far.
    """

    def __init__(
        self,
        modules: Sequence[tuple[Path, object]],
        var_types: tuple[type[Variable], ...],
        init: State | None,
    ) -> None:
        self.var_types = var_types
        self.paths = {id(module): path for path, module in modules}
        self._modules = [module for _, module in modules]  # keeps the ids valid
        self.values: dict[Path, dict[type, dict[Key, Any]]] = {}
        if init is not None:
            self._load(init)

    def _load(self, init: State) -> None:
        """Start from the values of a State `capture` returned (e.g. perturbations)."""
        modules = set(self.paths.values())
        for path, leaf in init.flat_state().items():
            if not path or path[:-1] not in modules or not isinstance(leaf, Variable):
                raise ValueError(
                    f"`capture(init=...)`: {'/'.join(map(str, path))} is not a Variable under "
                    "one of the model's modules; pass a State that `capture` returned for "
                    "this model."
                )
            by_type = self.values.setdefault(path[:-1], {}).setdefault(type(leaf), {})
            by_type[path[-1]] = leaf.get_value()

    def sow(
        self,
        module: object,
        variable_type: type[Variable],
        name: str,
        value: object,
        reduce_fn: Callable[[Any, Any], Any],
        init_fn: Callable[[], Any],
    ) -> bool | None:
        """Fold `value` in; None when `module` is not one of the session's modules."""
        path = self.paths.get(id(module))
        if path is None:
            return None
        known = self.values.get(path, {})
        if variable_type not in self.var_types and variable_type not in known:
            return False
        store = self.values.setdefault(path, {}).setdefault(variable_type, {})
        store[name] = reduce_fn(store[name] if name in store else init_fn(), value)
        return True

    def perturb(
        self, module: object, variable_type: type[Variable], name: str, value: object
    ) -> tuple[bool, object]:
        """`(handled, value + perturbation)`: zeros are captured the first time; not
        handled when `module` is not one of the session's modules."""
        path = self.paths.get(id(module))
        if path is None:
            return False, value
        known = self.values.get(path, {})
        if variable_type not in self.var_types and variable_type not in known:
            return True, value
        store = self.values.setdefault(path, {}).setdefault(variable_type, {})
        if name not in store:
            store[name] = jax.tree.map(jnp.zeros_like, value)
        return True, jax.tree.map(lambda p, v: p + v, store[name], value)

    def adopt(self, modules: Sequence[tuple[Path, object]], before: set[tuple[int, str]]) -> None:
        """Move into the session the Variables of a captured type that the call added to
        `modules` (`before`: their `(id(module), name)` Variable slots before the call):
        values sown inside lifted transforms, which set them on the modules."""
        for path, module in modules:
            for name, value in list(vars(module).items()):
                if (
                    isinstance(value, Variable)
                    and type(value) in self.var_types
                    and (id(module), name) not in before
                ):
                    by_type = self.values.setdefault(path, {}).setdefault(type(value), {})
                    by_type[name] = value.get_value()
                    delattr(module, name)

    def states(self) -> list[State]:
        """One State per captured type: `(*module path, name)` -> a Variable of that type."""
        flats: dict[type, dict[Path, Variable]] = {t: {} for t in self.var_types}
        for path, by_type in self.values.items():
            for var_type, named in by_type.items():
                if var_type in flats:
                    for name, value in named.items():
                        flats[var_type][(*path, name)] = var_type(value)
        return [State.from_flat_path(flats[t]) for t in self.var_types]

    def __enter__(self) -> Captures:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._token)


def variable_slots(modules: Sequence[tuple[Path, object]]) -> set[tuple[int, str]]:
    """`(id(module), name)` of every Variable attribute of `modules` (see `adopt`)."""
    return {
        (id(module), name)
        for _, module in modules
        for name, value in vars(module).items()
        if isinstance(value, Variable)
    }


def active_captures() -> Captures | None:
    """The innermost open `capture` session of this thread, or None."""
    return _ACTIVE.get()
