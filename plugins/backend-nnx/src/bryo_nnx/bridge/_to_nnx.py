"""`ToNNX`: a Linen module as an NNX-style module, created by `lazy_init`.

A Linen module needs a sample input to create its variables, an NNX-style module owns
them from its constructor on. `ToNNX(linen_module, rngs=...)` holds the Linen module and
its own fork of `rngs`; `lazy_init(model, *args)` runs `model(*args)` with every module of
the model's graph marked as initializing, so each `ToNNX` inside runs Linen's `init` and
keeps the variables as its attributes (a collection's top-level names become attributes;
deeper Linen scopes become `Dict`s). Later calls run Linen's `apply` on them and write
back the collections made mutable. The initializing mark is a static attribute, so it
travels through `split`/`merge` and the lifted transforms (`nnx.vmap` over a `ToNNX`
initializes one copy per index).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax

from bryo_graph import Dict, Variable, iter_graph
from bryo_rngs import Rngs

from .._module import Module
from ._collections import (
    flatten_mapping,
    linen_vars_to_nnx_attrs,
    nnx_attrs_to_linen_vars,
)
from ._flax import current_linen_module, linen

F = TypeVar("F", bound=Callable[..., Any])

# A static attribute, so that split/merge and the lifted transforms carry it to copies.
_INITIALIZING = "_bridge__initializing"
_OWN = "to_nnx__"  # ToNNX's own attributes: the rest are the Linen variables


def initializing(module: Module) -> bool:
    """Whether `module` runs inside `lazy_init` (a `ToNNX` then runs Linen's `init`)."""
    return vars(module).get(_INITIALIZING, False)


def _modules_of(root: Module) -> list[Module]:
    return [node for _, node in iter_graph(root, graph=True) if isinstance(node, Module)]


def lazy_init(fn: F, *args: Any, **kwargs: Any) -> F:
    """Create the variables of the `ToNNX` modules in a model by running it once.

    Like Linen's `model.init(key, x)`: `lazy_init(model, x)` calls `model(x)` with the
    model's modules marked as initializing, and returns the model.

    >>> from flax import linen as nn  # doctest: +SKIP
    >>> model = lazy_init(ToNNX(nn.Dense(3), rngs=nnx.Rngs(0)), jnp.ones((1, 2)))  # doctest: +SKIP
    >>> model.kernel.shape  # doctest: +SKIP
    (2, 3)

    Args:
        fn: the module, or a method of it (`model.encode`).
        *args: the sample inputs.
        **kwargs: the keyword inputs.

    Returns:
        `fn`.

    Raises:
        ValueError: `fn` is neither a module nor a method of one.
    """
    given = fn
    if isinstance(fn, Module):
        root = fn
    else:
        owner = getattr(fn, "__self__", None)
        if not isinstance(owner, Module):
            raise ValueError(
                f"`lazy_init` takes an NNX-style module or a method of one as `fn`; got "
                f"{fn!r}. Write `lazy_init(model, *sample_inputs)`."
            )
        root = owner
    marked = [node for node in _modules_of(root) if not initializing(node)]
    for node in marked:
        setattr(node, _INITIALIZING, True)
    try:
        fn(*args, **kwargs)
    finally:
        for node in _modules_of(root):
            if _INITIALIZING in vars(node):
                delattr(node, _INITIALIZING)
        for node in marked:  # those no longer in the graph
            if _INITIALIZING in vars(node):
                delattr(node, _INITIALIZING)
    return given


def _own_rngs(rngs: object) -> Rngs | None:
    if rngs is None:
        return None
    if isinstance(rngs, Rngs):
        return rngs.fork()
    if isinstance(rngs, jax.Array):
        return Rngs(params=rngs)
    raise TypeError(
        f"`ToNNX(module, rngs=...)` takes an `nnx.Rngs`, a key or None as `rngs`; got "
        f"{type(rngs).__name__}. Write `rngs=nnx.Rngs(0)` (or `nnx.Rngs(params=0, dropout=1)`)."
    )


def _linen_rngs(rngs: object) -> dict[str, jax.Array]:
    """One key per stream, as Linen takes them (`default` serves as `params`)."""
    if rngs is None:
        keys = {}
    elif isinstance(rngs, Rngs):
        keys = {name: stream() for name, stream in rngs.items()}
    elif isinstance(rngs, jax.Array):
        keys = {"params": rngs}
    else:
        raise TypeError(
            f"A `ToNNX` call takes an `nnx.Rngs`, a key or None as `rngs`; got "
            f"{type(rngs).__name__}."
        )
    if "params" not in keys and "default" in keys:
        keys["params"] = keys.pop("default")
    return keys


class ToNNX(Module):
    """A Linen module as an NNX-style module.

    Create its variables with `lazy_init` (Linen needs a sample input); after that it
    is an ordinary module: `split`, `state`, `nnx.jit`, `nnx.grad`, optimizers. Linen's
    collections become Variables (`params` -> `Param`, `batch_stats` -> `BatchStat`,
    others by `register_variable_name`, or a new Variable class named after the
    collection); Linen metadata boxes (`nn.with_partitioning`) become Variable metadata.
    The methods of the Linen class are methods here too (`model.encode(x)`).

    >>> from flax import linen as nn  # doctest: +SKIP
    >>> model = ToNNX(nn.Dense(64), rngs=nnx.Rngs(0)).lazy_init(jnp.ones((1, 32)))  # doctest: +SKIP
    >>> model.kernel.shape  # doctest: +SKIP
    (32, 64)

    Args:
        module: the Linen module (an instance).
        rngs: the rng streams Linen gets (`params`, `dropout`, ...): an `nnx.Rngs` (this
            module keeps a fork of it), a key (the `params` stream), or None.
    """

    def __init__(self, module: linen.Module, rngs: Rngs | jax.Array | None = None) -> None:
        if not isinstance(module, linen.Module):
            hint = (
                " (a class: pass an instance, e.g. `nn.Dense(3)`)"
                if isinstance(module, type)
                else ""
            )
            raise TypeError(
                f"`ToNNX(module, ...)` wraps a Flax Linen module instance as `module`; got "
                f"{module!r}{hint}. For an NNX-style module use it directly."
            )
        self.to_nnx__module = module
        self.to_nnx__rngs = _own_rngs(rngs)

    def lazy_init(self, *args: Any, **kwargs: Any) -> ToNNX:
        """`lazy_init(self, *args, **kwargs)`: create the Linen variables; returns self."""
        return lazy_init(self, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        namespace = vars(self)
        module = namespace.get("to_nnx__module")
        if module is not None and not name.startswith("_"):
            method = getattr(type(module), name, None)
            if callable(method):
                return types.MethodType(_linen_method(method), self)
        created = any(not k.startswith(("_", _OWN)) for k in namespace)
        hint = "" if created or module is None else " (call `lazy_init(model, *inputs)` first)"
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}{hint}")

    def __call__(
        self,
        *args: Any,
        rngs: Rngs | jax.Array | None = None,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run the Linen module: Linen's `init` inside `lazy_init`, its `apply` after.

        Args:
            *args: the Linen module's arguments.
            rngs: rng streams for this call (default: the module's own, which advance).
            method: the Linen method to run (a function or its name); default `__call__`.
            mutable: the Linen collections the call may change (`True`, a name, a list);
                default: those of the calling Linen module, else none. Changes are
                written back to this module's Variables.
            **kwargs: the Linen module's keyword arguments.

        Returns:
            The Linen method's output.
        """
        keys = _linen_rngs(self.to_nnx__rngs if rngs is None else rngs)
        linen_module = self.to_nnx__module
        if initializing(self):
            out, updates = linen_module.init_with_output(keys, *args, method=method, **kwargs)
        else:
            if mutable is None:
                caller = current_linen_module()
                mutable = caller.scope.mutable if caller is not None and caller.scope else False
            variables = nnx_attrs_to_linen_vars(self._linen_variables())
            out = linen_module.apply(
                variables, *args, rngs=keys, method=method, mutable=mutable, **kwargs
            )
            out, updates = out if mutable is not False else (out, None)
        if updates:
            self._write(linen_vars_to_nnx_attrs(updates))
        return out

    def _linen_variables(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith(("_", _OWN))}

    def _write(self, attrs: Mapping[str, Any]) -> None:
        """Store new Variables: a Variable already at a path of the same class takes the
        new value and metadata in place (references to it stay valid)."""
        for path, new in flatten_mapping(attrs):
            parent: Any = self
            for key in path[:-1]:
                child = _get(parent, key)
                if not isinstance(child, Mapping):
                    child = Dict()
                    _put(parent, key, child)
                parent = child
            existing = _get(parent, path[-1])
            if type(existing) is type(new):
                existing.set_raw_value(new.get_raw_value())
                if existing.metadata != new.metadata:
                    existing.set_metadata(new.metadata)
            else:
                _put(parent, path[-1], new)


def _get(parent: Any, key: Any) -> Any:
    if isinstance(parent, Module):
        return vars(parent).get(key)
    return parent.get(key)


def _put(parent: Any, key: Any, value: Variable | Dict) -> None:
    if isinstance(parent, Module):
        setattr(parent, key, value)
    else:
        parent[key] = value


def _linen_method(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: ToNNX, *args: Any, **kwargs: Any) -> Any:
        return ToNNX.__call__(self, *args, method=method, **kwargs)

    call.__name__ = getattr(method, "__name__", "method")
    call.__doc__ = getattr(method, "__doc__", None)
    return call
