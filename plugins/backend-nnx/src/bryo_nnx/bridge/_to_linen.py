"""`ToLinen` and `to_linen`: an NNX-style module class as a Linen module.

An NNX-style module creates its Variables in its constructor; a Linen module is
stateless and gets them from its collections on every `apply`. `ToLinen` therefore takes
the class and its arguments, builds the module inside Linen's `init` (with an `Rngs` of
one key per Linen rng stream) and stores its state in the Linen collections (one per
Variable class, see `register_variable_name`; Variables with metadata in an `NNXMeta`
box). On `apply` it builds the module again, loads the collections into it, runs the
method and writes the mutable collections back.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bryo_filters import Not
from bryo_graph import State, Variable, state, to_flat_state, update, variable_name_from_type
from bryo_rngs import Rngs, RngState

from .._module import Module
from ._collections import flatten_mapping, to_linen_var, unflatten_mapping
from ._flax import FrozenDict, linen, meta


def _linen_rngs(module: linen.Module, add_default: bool) -> dict[str, Any]:
    """One new key from each rng stream the Linen scope has (`default` 0 added if asked)."""
    scope = module.scope
    assert scope is not None  # inside a bound method
    keys: dict[str, Any] = {name: module.make_rng(name) for name in scope.rngs}
    if add_default and "default" not in keys:
        keys["default"] = 0
    return keys


def _method_of(module: Module, method: Callable[..., Any] | str | None) -> Callable[..., Any]:
    """The function to call as `method(module, ...)`."""
    if method is None:
        method = "__call__"
    if isinstance(method, str):
        found = getattr(type(module), method, None)
        if not callable(found):
            raise TypeError(
                f"`nnx_method={method!r}` must name a method of {type(module).__name__}; "
                f"{type(module).__name__}.{method} is {found!r}."
            )
        return found
    if not callable(method):
        raise TypeError(
            f"`nnx_method` must be a method of {type(module).__name__} or its name; got {method!r}."
        )
    return method


def _unboxed(value: Any) -> Any:
    return value.unbox() if isinstance(value, meta.AxisMetadata) else value


class ToLinen(linen.Module):
    """An NNX-style module class as a Linen module.

    >>> from bryo import nnx  # doctest: +SKIP
    >>> model = ToLinen(nnx.Linear, args=(32, 64))  # doctest: +SKIP
    >>> x = jnp.ones((1, 32))  # doctest: +SKIP
    >>> y, variables = model.init_with_output(jax.random.key(0), x)  # doctest: +SKIP
    >>> variables["params"]["kernel"].shape  # doctest: +SKIP
    (32, 64)

    Attributes:
        nnx_class: the module class (or any function returning a module).
        args: its positional arguments.
        kwargs: its keyword arguments (`rngs` is added unless `skip_rng`).
        skip_rng: the class takes no `rngs` argument.
        metadata_fn: how a Variable is stored in its Linen collection (default: the value
            alone when it has no metadata, else a metadata box); None stores values alone.
    """

    nnx_class: Callable[..., Module]
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = FrozenDict({})
    skip_rng: bool = False
    metadata_fn: Callable[[Variable], Any] | None = to_linen_var

    def __post_init__(self) -> None:
        if isinstance(self.nnx_class, Module):
            raise TypeError(
                f"`ToLinen` takes the module class and its arguments, not an instance; got "
                f"a {type(self.nnx_class).__name__} instance as `nnx_class`. Write "
                f"`to_linen({type(self.nnx_class).__name__}, *args, **kwargs)`."
            )
        if not callable(self.nnx_class):
            raise TypeError(
                f"`ToLinen`'s `nnx_class` must be an NNX-style module class; got "
                f"{self.nnx_class!r}."
            )
        if isinstance(self.args, str) or not isinstance(self.args, Sequence):
            raise TypeError(
                f"`ToLinen`'s `args` must be a tuple of the module's positional arguments; "
                f"got {self.args!r}. Write `args=({self.args!r},)`."
            )
        if not isinstance(self.kwargs, Mapping):
            raise TypeError(
                f"`ToLinen`'s `kwargs` must be a mapping of keyword arguments; got {self.kwargs!r}."
            )
        super().__post_init__()

    @linen.compact
    def __call__(
        self, *args: Any, nnx_method: Callable[..., Any] | str | None = None, **kwargs: Any
    ) -> Any:
        """Build the module, run `nnx_method` (default `__call__`) on it and keep its
        state in the Linen collections: in `init` the state it was created with, in
        `apply` (loaded from the collections first) the state after the call."""
        initializing = self.is_initializing()
        module_kwargs = dict(self.kwargs)
        if not self.skip_rng:
            module_kwargs["rngs"] = Rngs(**_linen_rngs(self, add_default=not initializing))
        module = self.nnx_class(*self.args, **module_kwargs)
        method = _method_of(module, nnx_method)
        if initializing:  # Linen's init keeps the state the module was created with
            self._store(module)
            return method(module, *args, **kwargs)
        self._load(module)
        out = method(module, *args, **kwargs)
        self._store(module)
        return out

    def __getattr__(self, name: str) -> Any:
        namespace = vars(self)
        if not name.startswith("_") and "nnx_class" in namespace:
            if name in namespace["kwargs"]:
                return namespace["kwargs"][name]
            method = getattr(namespace["nnx_class"], name, None)
            if callable(method):  # a bound method: Linen's `apply(method=name)` rebinds it
                return types.MethodType(_nnx_method_call(method), self)
        return super().__getattr__(name)

    def _load(self, module: Module) -> None:
        """Write the Linen collections' values into `module` (unknown paths: a warning)."""
        known = {path for path, _ in to_flat_state(state(module))}
        pairs, unknown = [], []
        for collection in self.variables.values():
            for path, value in flatten_mapping(collection):
                (pairs if path in known else unknown).append((path, _unboxed(value)))
        if unknown:
            listed = "".join(f"\n  - {'/'.join(map(str, path))}" for path, _ in unknown)
            warnings.warn(
                f"{type(self).__name__}({getattr(self.nnx_class, '__name__', self.nnx_class)}):"
                f" the Linen variables hold paths the module does not have; they are "
                f"ignored:{listed}",
                stacklevel=2,
            )
        if pairs:
            update(module, State(unflatten_mapping(pairs)))

    def _store(self, module: Module) -> None:
        """Put `module`'s state (rng streams aside) in the mutable Linen collections."""
        collections: dict[str, list] = {}
        for path, variable in to_flat_state(state(module, Not(RngState))):
            name = variable_name_from_type(type(variable), allow_register=True)
            collections.setdefault(name, []).append((path, variable))
        for name, pairs in collections.items():
            if not self.is_mutable_collection(name):
                continue
            boxed = [(path, self._boxed(variable)) for path, variable in pairs]
            for key, value in unflatten_mapping(boxed).items():
                self.put_variable(name, key, value)

    def _boxed(self, variable: Variable) -> Any:
        if self.metadata_fn is None:
            return variable.get_value()
        return self.metadata_fn(variable)


def _nnx_method_call(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: ToLinen, *args: Any, **kwargs: Any) -> Any:
        return self.__call__(*args, nnx_method=method, **kwargs)

    call.__name__ = getattr(method, "__name__", "method")
    return call


def to_linen(
    nnx_class: Callable[..., Module],
    *args: Any,
    metadata_fn: Callable[[Variable], Any] | None = to_linen_var,
    name: str | None = None,
    skip_rng: bool = False,
    abstract_init: bool = True,
    **kwargs: Any,
) -> ToLinen:
    """`ToLinen(nnx_class, args=args, kwargs=kwargs, ...)`: an NNX-style module class and
    its arguments as a Linen module.

    >>> model = to_linen(nnx.Linear, 32, 64)  # doctest: +SKIP
    >>> variables = model.init(jax.random.key(0), jnp.ones((1, 32)))  # doctest: +SKIP

    Args:
        nnx_class: the module class.
        *args: its positional arguments.
        metadata_fn: how a Variable is stored in its Linen collection (see `ToLinen`).
        name: the Linen module's name.
        skip_rng: the class takes no `rngs` argument.
        abstract_init: accepted as Flax 0.12 does; the module is built as in Flax (eagerly).
        **kwargs: its keyword arguments.

    Returns:
        The Linen module.
    """
    del abstract_init  # Flax 0.12's `to_linen` takes it and does not use it either
    return ToLinen(
        nnx_class,
        args=args,
        kwargs=FrozenDict(kwargs),
        metadata_fn=metadata_fn,
        skip_rng=skip_rng,
        name=name,
    )
