"""A toy module system and its MoX backend plugin, for tests and examples.

Real backends (bryo-backend-nnx, bryo-backend-equinox) implement the same hook; this one
is tiny on purpose: mutable `Module`s whose array attributes are their state, registered
as pytrees. Register `ToyBackend()` on a plugin manager to let `make_mox` see calls:

    >>> pm.register(ToyBackend())                      # doctest: +SKIP
    >>> mox = make_mox(lambda m, x: m(x))(model, x)    # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any, Self

import jax
import jax.numpy as jnp
import numpy as np

from bryo_plugins import hookimpl

from ._hooks import CallHandler
from ._ir import ModuleInfo

_handler: contextvars.ContextVar[CallHandler | None] = contextvars.ContextVar(
    "toy_handler", default=None
)
_path: contextvars.ContextVar[tuple[Module, str] | None] = contextvars.ContextVar(
    "toy_path", default=None
)


def _is_state(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, Module)) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, Module) for v in value)
    )


class Module:
    """A mutable module: array and submodule attributes are state, the rest static."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        jax.tree_util.register_pytree_with_keys(
            cls, cls._flatten_with_keys, cls._unflatten, cls._flatten
        )

    def _split(self) -> tuple[list[str], tuple[tuple[str, Any], ...]]:
        keys = [k for k, v in vars(self).items() if _is_state(v)]
        static = tuple((k, v) for k, v in vars(self).items() if not _is_state(v))
        return keys, static

    def _flatten(self) -> tuple[list[Any], Any]:
        keys, static = self._split()
        return [getattr(self, k) for k in keys], (tuple(keys), static)

    def _flatten_with_keys(self) -> tuple[list[Any], Any]:
        keys, static = self._split()
        children = [(jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in keys]
        return children, (tuple(keys), static)

    @classmethod
    def _unflatten(cls, aux: Any, children: Iterable[Any]) -> Self:
        keys, static = aux
        obj = object.__new__(cls)
        vars(obj).update(static)
        vars(obj).update(zip(keys, children, strict=False))
        return obj

    def static_attrs(self) -> dict[str, Any]:
        """Static attributes reported to MoX."""
        return {k: v for k, v in self._split()[1] if isinstance(v, (int, float, str, bool))}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        parent = _path.get()
        name = _child_name(parent, self)
        handler = _handler.get()
        if handler is None:
            return self._run(name, args, kwargs)
        leaves, treedef = jax.tree_util.tree_flatten(self)

        def pure(state: list[Any], *a: Any, **kw: Any) -> tuple[list[Any], Any]:
            saved = jax.tree_util.tree_leaves(self)
            _assign(self, treedef, state)
            try:
                out = self._run(name, a, kw)
                return jax.tree_util.tree_leaves(self), out
            finally:
                _assign(self, treedef, saved)

        info = ModuleInfo(
            f"{type(self).__module__}.{type(self).__qualname__}", name, self.static_attrs()
        )
        return handler(info, leaves, pure, lambda s: _assign(self, treedef, s), args, kwargs)

    def _run(self, name: str, args: Any, kwargs: Any) -> Any:
        token = _path.set((self, name))
        try:
            return self.forward(*args, **kwargs)
        finally:
            _path.reset(token)


def _child_name(parent: tuple[Module, str] | None, child: Module) -> str:
    if parent is None:
        return ""
    module, prefix = parent
    for key, value in vars(module).items():
        if value is child:
            return f"{prefix}/{key}".lstrip("/")
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if item is child:
                    return f"{prefix}/{key}/{i}".lstrip("/")
    return f"{prefix}/{type(child).__name__}".lstrip("/")


def _assign(module: Module, treedef: Any, leaves: list[Any]) -> None:
    """Write `leaves` into `module` in place (submodules included)."""
    fresh = treedef.unflatten(leaves)
    _copy_into(module, fresh)


def _copy_into(dst: Module, src: Module) -> None:
    for key, value in vars(src).items():
        current = getattr(dst, key)
        if isinstance(current, Module):
            _copy_into(current, value)
        elif isinstance(current, (list, tuple)) and any(isinstance(v, Module) for v in current):
            for d, s in zip(current, value, strict=False):
                _copy_into(d, s)
        else:
            setattr(dst, key, value)


class Linear(Module):
    """`x @ w + b`, with static `in_features` and `features`."""

    def __init__(self, in_features: int, features: int, *, key: jax.Array) -> None:
        self.in_features, self.features = in_features, features
        self.w = jax.random.normal(key, (in_features, features)) / np.sqrt(in_features)
        self.b = jnp.zeros((features,))

    def forward(self, x: jax.Array) -> jax.Array:
        y = x @ self.w
        return y + jax.lax.broadcast_to_rank(self.b, y.ndim)  # rank-clean (strict JAX)


class ResBlock(Module):
    """The seed's ResBlock: `x + Linear(x)`."""

    def __init__(self, features: int, *, key: jax.Array) -> None:
        self.dense = Linear(features, features, key=key)

    def forward(self, x: jax.Array) -> jax.Array:
        return x + self.dense(x)


class MLP(Module):
    """Linear layers with an activation (ReLU by default) between them."""

    def __init__(self, sizes: tuple[int, ...], *, key: jax.Array) -> None:
        keys = jax.random.split(key, len(sizes) - 1)
        self.layers = [Linear(a, b, key=k) for a, b, k in zip(sizes, sizes[1:], keys, strict=False)]

    def forward(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


class Counter(Module):
    """Counts its calls in a state array: a module that mutates itself when called."""

    def __init__(self) -> None:
        self.count = jnp.zeros((), jnp.int32)

    def forward(self, x: jax.Array) -> jax.Array:
        self.count = self.count + 1
        return x * 2.0


class LoRA(Module):
    """A low-rank adapter around a Linear: `base(x) + x @ a @ b`."""

    def __init__(self, base: Linear, rank: int, *, key: jax.Array) -> None:
        # The adapter's own parameters come first in the pytree, the base layer's after:
        # `make_mox(lambda lora, x: lora(x))` then takes `(a, b, w, bias, x)`, which is
        # what `sub(..., with_state=True)` expects (new params, the Linear's state, args).
        self.a = jax.random.normal(key, (base.in_features, rank)) * 0.1
        self.b = jnp.zeros((rank, base.features))
        self.base = base

    def forward(self, x: jax.Array) -> jax.Array:
        return self.base(x) + x @ self.a @ self.b


@contextlib.contextmanager
def _intercept(handler: CallHandler) -> Iterator[None]:
    token = _handler.set(handler)
    try:
        yield
    finally:
        _handler.reset(token)


class ToyBackend:
    """The toy backend's MoX plugin: register an instance on the plugin manager."""

    @hookimpl
    def bryo_mox_interceptor(self) -> Any:
        return _intercept


def document_signature(mox: Any) -> list[tuple[Any, ...]]:
    """Structure, attributes, wiring and types of a MoX as comparable tuples.

    Variables are named in order of appearance, so equal signatures mean equal wiring.
    """
    from .document import encode_attr, to_document

    rows: list[tuple[Any, ...]] = []

    def port(p: Any) -> tuple[Any, ...]:
        return (p.name, p.type, p.value, p.bind)

    def walk(doc: Any, depth: int) -> None:
        # as files write them: a numpy int param (`jnp.split`'s sizes) reads back an int
        attrs = tuple(sorted((k, encode_attr(v, strict=False)) for k, v in doc.attrs.items()))
        rows.append(
            (
                depth,
                doc.tag,
                attrs,
                tuple(map(port, doc.inputs)),
                tuple(map(port, doc.outputs)),
                tuple(map(port, doc.results)),
                tuple((c.name, c.type) for c in doc.consts),
            )
        )
        for child in doc.children:
            walk(child, depth + 1)

    walk(to_document(mox, strict=False, rules=False), 0)
    return rows


def assert_round_trip(mox: Any, format: str, *args: Any) -> Any:
    """Check `loads(dumps(mox))`: same signature, and the same result on `args`, which
    the loaded MoX takes as the traced one does (a model, its state, inputs), returning
    a result of the same structure.

    Returns the loaded MoX.
    """
    from ._eval import eval_mox
    from ._serialize import dumps, loads

    back = loads(dumps(mox, format=format), format=format)
    assert document_signature(back) == document_signature(mox)
    expected = eval_mox(mox, *args)
    if back.in_tree is None and back.in_spec is None:  # a structure no file records
        extra = [args[-1]] if mox.extra_params else []
        plain = args[:-1] if mox.extra_params else args
        got = eval_mox(back, *jax.tree_util.tree_leaves(plain), *extra)
    else:
        got = eval_mox(back, *args)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for a, b in zip(
        jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected), strict=True
    ):
        np.testing.assert_allclose(_comparable(a), _comparable(b), rtol=1e-6, atol=1e-6)
    return back


def _comparable(value: Any) -> Any:
    """Arrays as numpy values; PRNG key arrays as their key data."""
    from ._types import is_key_dtype

    if is_key_dtype(getattr(value, "dtype", None)):
        return np.asarray(jax.random.key_data(value))
    return value
