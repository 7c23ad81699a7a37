"""`Module`: the NNX-style module, a mutable object whose attributes are its state.

Subclass it and assign `Variable`s, other Modules, lists and dicts of them, and static
values in `__init__`; call it like a function. It is a graph node (through the
`bryo_graph_node_types` hook), so `split`, `merge`, `state` and `update` work on it,
shared submodules and cycles included.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from bryo_filters import Filter, to_predicate
from bryo_graph import Object, Variable, iter_children, iter_graph
from bryo_pytree import Key, Path

from ._capture import Perturbation, active_captures
from ._intercept import wrap_call

A = TypeVar("A")


class Module(Object):
    """Base class of NNX-style modules.

    >>> class Foo(Module):
    ...     def __init__(self):
    ...         self.a = Param(0)
    """

    def __init_subclass__(cls, *, pytree: bool = True, **kwargs: object) -> None:
        super().__init_subclass__(pytree=pytree, **kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None:  # seen by make_mox while it traces (bryo-mox-ir)
            cls.__call__ = wrap_call(call)

    def sow(
        self,
        variable_type: type[Variable],
        name: str,
        value: object,
        reduce_fn: Callable[[Any, Any], object] = lambda sown, new: (*sown, new),
        init_fn: Callable[[], object] = tuple,
    ) -> bool:
        """Keep `value` as the `variable_type` Variable `name` of this module.

        Inside `capture(fn, variable_type)` the value goes to the capture (the module is
        left unchanged) and `sow` returns whether `variable_type` is captured there.
        Otherwise it is kept on the module: the first value is `reduce_fn(init_fn(),
        value)`, later ones are folded in with `reduce_fn`. By default the Variable holds
        the tuple of every value sown, one per call (`MultiHeadAttention(...)(x,
        sow_weights=True)` sows its attention weights as `Intermediate`
        'attention_weights'). Take them out with `nnx.pop(model, Intermediate)`.

        Args:
            variable_type: the Variable type (e.g. `Intermediate`).
            name: the attribute (or captured entry) name.
            value: the value to keep.
            reduce_fn: `(kept so far, value) -> kept`.
            init_fn: `() -> kept` before the first value.

        Returns:
            Whether the value was kept.

        Raises:
            ValueError: `name` is an attribute that is not a `variable_type` Variable.
        """
        if not (isinstance(variable_type, type) and issubclass(variable_type, Variable)):
            raise TypeError(
                f"`sow` takes a Variable type (e.g. `nnx.Intermediate`) first; got "
                f"{variable_type!r}."
            )
        captures = active_captures()
        if captures is not None:
            kept = captures.sow(self, variable_type, name, value, reduce_fn, init_fn)
            if kept is not None:
                return kept
        existing = getattr(self, name, None)
        if existing is None:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        elif not isinstance(existing, Variable):
            raise ValueError(
                f"{type(self).__name__}.sow: expected {name!r} to be a Variable, got "
                f"{type(existing).__name__}; sow under another name."
            )
        elif type(existing) is not variable_type:
            raise ValueError(
                f"{type(self).__name__}.sow: expected {name!r} to be of type "
                f"{variable_type.__name__!r}, got {type(existing).__name__!r}; sow under "
                "another name, or with the Variable type it has."
            )
        else:
            existing.set_value(reduce_fn(existing.get_value(), value))
        return True

    def perturb(self, name: str, value: A, variable_type: type[Variable] = Perturbation) -> A:
        """`value` plus the perturbation `name` (zeros at first): differentiate w.r.t. the
        perturbations to get the gradient of the loss w.r.t. this intermediate value.

        Inside `capture(fn, Perturbation)` the zeros are captured (the module is left
        unchanged); run the model again under `capture(..., init=perturbations)` inside
        `grad` and differentiate w.r.t. `perturbations`. Outside a capture the
        perturbation is kept on the module as the `variable_type` Variable `name`.

        Args:
            name: the perturbation's name.
            value: the intermediate value (use the returned one afterwards).
            variable_type: the Variable type of the perturbation.

        Returns:
            `value` plus the perturbation.

        Raises:
            ValueError: `name` is an attribute that is not a `variable_type` Variable.
        """
        captures = active_captures()
        if captures is not None:
            handled, out = captures.perturb(self, variable_type, name, value)
            if handled:
                return out  # type: ignore[return-value]  # value plus a perturbation of its structure: still an A
        existing = getattr(self, name, None)
        if existing is None:
            existing = variable_type(jax.tree.map(jnp.zeros_like, value))
            setattr(self, name, existing)
        elif not isinstance(existing, variable_type):
            raise ValueError(
                f"{type(self).__name__}.perturb: expected {name!r} to be of type "
                f"{variable_type.__name__!r}, got {type(existing).__name__!r}."
            )
        return jax.tree.map(lambda p, v: p + v, existing.get_value(), value)

    def iter_modules(self) -> Iterator[tuple[Path, Module]]:
        """Every Module in this one's graph (itself included) with its path, children first.

        Deprecated, as in Flax NNX 0.12 (it warns): use the function `nnx.iter_modules(m)`.
        """
        warnings.warn(
            "The 'm.iter_modules()' method is deprecated; use the 'nnx.iter_modules(m)' "
            "function instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        for path, value in iter_graph(self):
            if isinstance(value, Module):
                yield path, value

    def iter_children(self) -> Iterator[tuple[Key, Module]]:
        """`(attribute, module)` for each direct child that is a Module.

        Deprecated, as in Flax NNX 0.12 (it warns): use the function
        `nnx.iter_children(m)` (every child graph node) or
        `bryo_nnx.iter_module_children(m)` (the Modules only, as this method).
        """
        warnings.warn(
            "The 'm.iter_children()' method is deprecated; use the 'nnx.iter_children(m)' "
            "function instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        for key, child in iter_children(self):
            if isinstance(child, Module):
                yield key, child

    def set_attributes(
        self,
        *filters: Filter,
        raise_if_not_found: bool = True,
        graph: bool | None = None,
        **attributes: object,
    ) -> None:
        """Set `attributes` on every module of this one's graph (itself included) that
        has them, e.g. `deterministic=True`; with `filters`, only on the modules that
        match one (`model.set_attributes(Dropout, deterministic=True)`).

        Args:
            *filters: filters of `(path, module)` (types, path predicates, ...).
            raise_if_not_found: raise when some attribute exists on no selected module.
            graph: False walks the modules in tree mode.
            **attributes: the attributes to set.

        Raises:
            ValueError: with `raise_if_not_found`, naming the attributes found nowhere.
        """
        predicates = [to_predicate(f) for f in filters] or [lambda path, node: True]
        found: set[str] = set()
        for path, module in iter_graph(self, graph=graph):
            if not isinstance(module, Module) or not any(p(path, module) for p in predicates):
                continue
            for name, value in attributes.items():
                if hasattr(module, name):
                    setattr(module, name, value)
                    found.add(name)
        missing = set(attributes) - found
        if missing and raise_if_not_found:
            raise ValueError(
                "Could not find at least one instance of the following attributes: "
                f"{sorted(missing)} (no selected module of {type(self).__name__} has them); "
                "check the names, or pass `raise_if_not_found=False` to ignore them."
            )

    def train(self, **attributes: Any) -> None:
        """Training mode: `deterministic=False`, `use_running_average=False` where present."""
        self.set_attributes(
            deterministic=False, use_running_average=False, **attributes, raise_if_not_found=False
        )

    def eval(self, **attributes: Any) -> None:
        """Evaluation mode: `deterministic=True`, `use_running_average=True` where present."""
        self.set_attributes(
            deterministic=True, use_running_average=True, **attributes, raise_if_not_found=False
        )
