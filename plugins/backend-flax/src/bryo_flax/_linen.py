"""MoX tracing of Flax Linen models: every Linen method call becomes a `module_call`.

`make_mox` enters `intercept(handler)`, which installs one `flax.linen.intercept_methods`
interceptor. Each Linen method call (but `setup`) is then described to the handler: the
module's class, its scope path (`"ResBlock_0/Dense_0"`, `"dense"` for a module defined in
`setup`, `""` for the module `apply` binds), its dataclass fields as attributes and, for
methods other than `__call__`, `method`. Its state is the variables under its scope (every
collection, submodules' included) and its scope's rng streams, so parameters, batch
statistics and the `rngs={"dropout": key}` given to `apply` are inputs of the node.

The call runs on the module itself, in Flax's interceptor chain, with nothing rebound:
`pure` writes the state it is given into the scope's variable dicts in place (and the
rng streams into the scope), runs the call, reads the variables back as the new state,
and puts the old values back. The scopes of the module's compact submodules are made
during the call and look their variables up through it, so they read the values `pure`
wrote. The variable dicts of immutable collections belong to the caller: the first call
under a root scope swaps them for copies of the trace's own, so the in-place writes
never touch the caller's variables, and the trace's end swaps the caller's back. Mutable
collections come back as new state; rng counters travel in the state as static values,
so `pure` leaves the scope as it found it and `write_back` alone publishes a call's
effects.

A scope keeps a reference to its part of its parent's dicts once it has read a
variable, and scopes that outlive a call (made by `setup`, or by the adoption of a
submodule given as a field: `Outer(inner=nn.Dense(4))`, lists and dicts of them) may
still refer to the caller's dicts. Any scope a call runs in place in, and its parents,
therefore forget, for the call, the references they took before the swap, and look
their variables up from the root again. Arrays kept by `setup` (`self.scale =
self.param(...)`) are read once, though: a module with a `setup` runs as Flax's lifted
transforms run it, on a deep copy bound to a new scope holding the given state, where
`setup` runs again, field submodules are adopted again, and every scope under it is new.
Flax gives a compact module a new scope after each call (`Scope.rewound`: for the root,
a new root sharing its variable dicts), so the trace owns variable dicts, not scopes.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import flax.linen as nn

from ._compat import (
    InterceptorContext,
    RngCounters,
    Scope,
    adopt_state,
    export_state,
    naming,
    root_variables,
    scope_variables,
    set_naming,
    unwrapped_method,
)

Handler = Callable[..., Any]

#: A collection's variables under one scope: names to values, or to nested subtrees.
Tree = dict[str, Any]

_NOT_RECORDED = ("parent", "name")  # the tree position, recorded as the node's name

_UNBOUND = (
    "Linen module {module} was called outside `apply`: an unbound module has no variables, "
    "so its call cannot be recorded. Trace `model.apply` (`make_mox(model.apply)(variables, "
    "x)`), or bind the module first (`model.bind(variables)`)."
)
_NOT_INTERCEPTED = (
    "Linen module {path!r} ({cls}): its method `{method}` cannot be intercepted: {why}. "
    "Give the method a plain `def` in the class (decorators should use `functools.wraps`), "
    "or mark it `nn.nowrap` to leave it out of the MoX."
)

_handler: contextvars.ContextVar[Handler | None] = contextvars.ContextVar(
    "bryo_flax_linen_handler", default=None
)


class _Owned(NamedTuple):
    """A root scope's variables, whose immutable collections are this trace's copies."""

    variables: dict[str, Any]  # `{collection: tree}`, shared by the root and its rewounds
    originals: dict[str, Any]  # the caller's dicts, swapped back when the trace ends


# `id(variables) -> _Owned` for the root variables of this trace.
_owned: contextvars.ContextVar[dict[int, _Owned] | None] = contextvars.ContextVar(
    "bryo_flax_linen_owned", default=None
)
# The copy whose own call `_call_copy` is starting: that call runs, it is not routed again.
_starting: contextvars.ContextVar[nn.Module | None] = contextvars.ContextVar(
    "bryo_flax_linen_starting", default=None
)
_ABSENT = object()  # a scope that had not looked a collection up
_installed = threading.local()  # Flax's interceptor stack is per thread: install once


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Linen method call to `handler` inside the block.

    See the `bryo_mox_interceptor` hook for the handler's contract.
    """
    token = _handler.set(handler)
    owned = _owned.set({}) if _owned.get() is None else None
    depth = getattr(_installed, "depth", 0)
    _installed.depth = depth + 1
    try:
        with contextlib.ExitStack() as stack:
            if depth == 0:
                stack.enter_context(nn.intercept_methods(_intercept))
            yield
    finally:
        _installed.depth = depth
        if owned is not None:
            _give_back(_owned.get() or {})
            _owned.reset(owned)
        _handler.reset(token)


def _intercept(
    next_fun: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    context: InterceptorContext,
) -> Any:
    handler = _handler.get()
    if handler is None or context.method_name == "setup":
        return next_fun(*args, **kwargs)
    if _starting.get() is context.module:
        _starting.set(None)
        return next_fun(*args, **kwargs)
    return _LinenCall(handler, context, next_fun).run(args, kwargs)


def attributes(module: nn.Module, method_name: str) -> dict[str, object]:
    """The dataclass fields MoX records (numbers, strings, None, tuples of them), and
    `method` for a method other than `__call__`."""
    from bryo_mox.interception import static_attributes

    values = object.__getattribute__(module, "__dict__")
    fields = (f.name for f in dataclasses.fields(module) if f.name not in _NOT_RECORDED)
    attrs = static_attributes((name, values[name]) for name in fields if name in values)
    if method_name != "__call__":
        attrs["method"] = method_name
    return attrs


@dataclasses.dataclass(frozen=True)
class _Static:
    """A value carried through MoX as a static leaf (this class is not a pytree)."""

    value: Any


class LinenState(NamedTuple):
    """A Linen call's state, as the MoX handler sees it.

    Attributes:
        variables: `{collection: variables under the module's scope}`, nested dicts as
            in `apply`'s variables (submodules' variables included); their arrays are
            the node's state inputs.
        rngs: the scope's rng streams (`LazyRng`s: the `rngs` given to `apply`, with
            the path folded in later); their keys are state inputs too.
        counters: the scope's rng counters (static).
        naming: the module's autoname cursors and its scope's reserved names (static).
    """

    variables: dict[str, Tree]
    rngs: dict[str, Any]
    counters: _Static
    naming: _Static


def _copy_counters(counters: RngCounters) -> RngCounters:
    return {k: _copy_counters(v) if isinstance(v, dict) else v for k, v in counters.items()}


def _assign_counters(counters: RngCounters, values: RngCounters) -> None:
    """Set `counters` to `values` in place: child scopes hold references to nested dicts."""
    for key in [k for k in counters if k not in values]:
        del counters[key]
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(counters.get(key), dict):
            _assign_counters(counters[key], value)
        else:
            counters[key] = _copy_counters(value) if isinstance(value, dict) else value


def _copy_tree(tree: Mapping[str, Any]) -> Tree:
    """`tree`'s nested dicts copied (mappings become dicts), its values kept."""
    return {k: _copy_tree(v) if isinstance(v, Mapping) else v for k, v in tree.items()}


def _write(tree: Tree, values: Mapping[str, Any]) -> None:
    """Write `values` into `tree` in place, keeping its nested dicts (scopes refer to them)."""
    for key, value in values.items():
        inner = tree.get(key)
        if isinstance(value, Mapping) and isinstance(inner, dict):
            _write(inner, value)
        else:
            tree[key] = _copy_tree(value) if isinstance(value, Mapping) else value


def _restore(tree: Tree, saved: Mapping[str, Any]) -> None:
    """Put `tree` back to `saved` in place. A variable the call added is removed; a dict
    it added is emptied but kept, since a scope made during the call may refer to it and
    `write_back` fills it again."""
    for key in list(tree):
        value = tree[key]
        if key in saved:
            old = saved[key]
            if isinstance(value, dict) and isinstance(old, Mapping):
                _restore(value, old)
            else:
                tree[key] = _copy_tree(old) if isinstance(old, Mapping) else old
        elif isinstance(value, dict):
            _restore(value, {})
        else:
            del tree[key]


def _own(root: Scope, copied: bool = False) -> _Owned:
    """Give `root` copies of its immutable collections (once per trace), so that `pure`
    can write into them without touching the caller's variables (`copied`: they are
    copies already)."""
    owned = _owned.get()
    assert owned is not None, "Linen calls are intercepted only inside `intercept`"
    collections = root_variables(root)
    known = owned.get(id(collections))
    if known is not None and known.variables is collections:
        return known
    originals = (
        {}
        if copied
        else {
            collection: tree
            for collection, tree in collections.items()
            if isinstance(tree, Mapping) and not root.is_mutable_collection(collection)
        }
    )
    for collection, tree in originals.items():
        collections[collection] = _copy_tree(tree)
    owned[id(collections)] = _Owned(collections, originals)
    return owned[id(collections)]


def _give_back(owned: Mapping[int, _Owned]) -> None:
    """Swap the caller's immutable collections back into the roots the trace owned."""
    for variables, originals in owned.values():
        variables.update(originals)


class _Reference(NamedTuple):
    """What a scope held for a collection: its reference into its parent's dict, or
    `_ABSENT` (it had not looked the collection up)."""

    scope: Scope
    collection: str
    reference: Any


def _forget_references(scope: Scope, collections: Iterable[str]) -> list[_Reference]:
    """Make `scope` and its parents (but the root) look `collections` up again from the
    root: references they took before `_own` lead to the caller's dicts. Returns what
    they held, for `_remember_references`."""
    held = []
    while scope.parent is not None:
        cache = scope_variables(scope)
        for collection in collections:
            held.append(_Reference(scope, collection, cache.pop(collection, _ABSENT)))
        scope = scope.parent
    return held


def _remember_references(held: list[_Reference]) -> None:
    """Give the scopes back the references `_forget_references` took away."""
    for scope, collection, reference in held:
        cache = scope_variables(scope)
        if reference is _ABSENT:
            cache.pop(collection, None)
        else:
            cache[collection] = reference


def _subtrees(scope: Scope) -> dict[str, Tree]:
    """`{collection: the live dict of the variables under scope}`, looked up from the
    root (a scope's own references may predate `_own`)."""
    root = scope.root
    path = scope.path[len(root.path) :]
    found = {}
    for collection, tree in root_variables(root).items():
        for name in path:
            tree = tree.get(name) if isinstance(tree, dict) else None
        if isinstance(tree, dict):
            found[collection] = tree
    return found


class _LinenCall:
    """One intercepted Linen method call, described to the MoX handler."""

    def __init__(
        self, handler: Handler, context: InterceptorContext, next_fun: Callable[..., Any]
    ) -> None:
        from bryo_mox import MoxError
        from bryo_mox.interception import module_info

        module = context.module
        scope = module.scope
        if scope is None:
            raise MoxError(_UNBOUND.format(module=_describe(module)))
        self.handler = handler
        self.module = module
        self.method_name = context.method_name
        self.scope: Scope = scope
        self.next_fun = next_fun
        self.path = "/".join(scope.path)
        self.info = module_info(module, self.path, attributes(module, context.method_name))
        self.method: Callable[..., Any] | None = None
        self.swapped: tuple[str, ...] = ()  # the collections `_own` swapped for copies
        if _has_setup(type(module)):
            self.method = unwrapped_method(context)
            if self.method is None:
                raise MoxError(self._not_intercepted("Flax passed no method to re-run"))

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        scope = self.scope
        self.swapped = tuple(_own(scope.root).originals)
        state = LinenState(
            {c: _copy_tree(tree) for c, tree in _subtrees(scope).items()},
            dict(scope.rngs),
            _Static(_copy_counters(scope.rng_counters)),
            _Static(naming(self.module, scope)),
        )
        pure = self._pure if self.method is None else self._pure_copy
        return self.handler(self.info, state, pure, self._write_back, args, kwargs)

    def _pure(self, state: LinenState, *args: Any, **kwargs: Any) -> tuple[LinenState, Any]:
        scope = self.scope
        held = _forget_references(scope, self.swapped)
        live = _subtrees(scope)
        saved = {c: _copy_tree(tree) for c, tree in live.items()}
        rngs, counters = scope.rngs, _copy_counters(scope.rng_counters)
        names = naming(self.module, scope)
        try:
            for collection, values in state.variables.items():
                if collection in live:
                    _write(live[collection], values)
            _assign_counters(scope.rng_counters, state.counters.value)
            set_naming(self.module, scope, state.naming.value)
            scope.rngs = state.rngs
            out = self.next_fun(*args, **kwargs)
            new_state = LinenState(
                {c: _copy_tree(tree) for c, tree in _subtrees(scope).items()},
                state.rngs,
                _Static(_copy_counters(scope.rng_counters)),
                _Static(naming(self.module, scope)),
            )
        finally:
            scope.rngs = rngs
            set_naming(self.module, scope, names)
            _assign_counters(scope.rng_counters, counters)
            for collection, tree in _subtrees(scope).items():
                _restore(tree, saved.get(collection, {}))
            _remember_references(held)
        return new_state, out

    def _pure_copy(self, state: LinenState, *args: Any, **kwargs: Any) -> tuple[LinenState, Any]:
        """`pure` for a module with a `setup`: a deep copy bound to a new scope that
        holds `state` runs the call (its field submodules are copies it adopts, as
        Flax's lifted transforms do); the module's own scope is not touched."""
        from bryo_mox import MoxError

        scope = self.scope
        inner = Scope(
            {c: _copy_tree(tree) for c, tree in state.variables.items()},
            rngs=state.rngs,
            mutable=scope.mutable,
            path=scope.path,
            flags=scope.flags,
        )
        inner.rng_counters = _copy_counters(state.counters.value)
        _own(inner, copied=True)
        copy = self.module.clone(parent=inner, _deep_clone=True)
        adopt_state(copy, export_state(self.module))
        assert self.method is not None
        token = _starting.set(copy)
        try:
            out = self.method(copy, *args, **kwargs)
            if _starting.get() is copy:
                raise MoxError(self._not_intercepted("its call did not reach Flax's interceptors"))
        finally:
            _starting.reset(token)
        variables = {c: _copy_tree(tree) for c, tree in root_variables(inner).items()}
        new_state = LinenState(variables, state.rngs, _Static(inner.rng_counters), state.naming)
        return new_state, out

    def _not_intercepted(self, why: str) -> str:
        cls = type(self.module)
        return _NOT_INTERCEPTED.format(
            path=self.path,
            cls=f"{cls.__module__}.{cls.__qualname__}",
            method=self.method_name,
            why=why,
        )

    def _write_back(self, new_state: LinenState) -> None:
        """Publish a call's effects: mutable collections into the module's scope (unless
        it is gone: the scope of a finished `apply`), rng counters, naming state."""
        scope = self.scope
        if scope.invalid:
            return
        for collection, values in new_state.variables.items():
            if scope.is_mutable_collection(collection):
                for name, value in values.items():
                    scope.put_variable(collection, name, value)
        _assign_counters(scope.rng_counters, new_state.counters.value)
        set_naming(self.module, scope, new_state.naming.value)


def _has_setup(cls: type[nn.Module]) -> bool:
    """Whether a Linen module class (or a base other than `nn.Module`) defines `setup`."""
    return any("setup" in vars(base) for base in cls.__mro__ if base is not nn.Module)


def _describe(module: nn.Module) -> str:
    cls = type(module)
    name = object.__getattribute__(module, "__dict__").get("name")
    named = f"{name!r} " if name else ""
    return f"{named}({cls.__module__}.{cls.__qualname__})"
