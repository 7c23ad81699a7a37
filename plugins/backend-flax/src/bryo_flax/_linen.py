"""MoX tracing of Flax Linen models: every Linen method call becomes a `module_call`.

`make_mox` enters `intercept(handler)`, which installs one `flax.linen.intercept_methods`
interceptor. Each Linen method call (but `setup`) is then described to the handler: the
module's class, its scope path (`"ResBlock_0/Dense_0"`, `"dense"` for a module defined in
`setup`, `""` for the module `apply` binds), its dataclass fields as attributes and, for
methods other than `__call__`, `method`. Its state is what Flax's lifted transforms carry
across a transform boundary: the variables of its scope (every collection) and its rng
streams, so parameters, batch statistics and the `rngs={"dropout": key}` given to `apply`
are inputs of the node. The call runs on a copy of the module rebound to scopes built from
that state (`flax.core.lift.pack`), the way `nn.jit` runs it. Mutable collections come back
as new state; rng counters and the module's naming state travel in the state as static
values, so the pure function leaves the module as it found it and `write_back` alone
publishes a call's effects.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import flax.linen as nn

from ._compat import (
    InterceptorContext,
    RngCounters,
    adopt_state,
    current_state,
    export_state,
    get_module_scopes,
    pack,
    packed_scopes,
    reimport_state,
    set_module_scopes,
    unwrapped_method,
)

Handler = Callable[..., Any]

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
# The rebound copy whose own call `pure` is starting: that call runs, it is not routed again.
_starting: contextvars.ContextVar[nn.Module | None] = contextvars.ContextVar(
    "bryo_flax_linen_starting", default=None
)
_installed = threading.local()  # Flax's interceptor stack is per thread: install once


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Linen method call to `handler` inside the block.

    See the `bryo_mox_interceptor` hook for the handler's contract.
    """
    token = _handler.set(handler)
    depth = getattr(_installed, "depth", 0)
    _installed.depth = depth + 1
    try:
        with contextlib.ExitStack() as stack:
            if depth == 0:
                stack.enter_context(nn.intercept_methods(_intercept))
            yield
    finally:
        _installed.depth = depth
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
    return _LinenCall(handler, context).run(args, kwargs)


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
        variables: the variable groups of `flax.core.lift.pack` (every collection of the
            module's scopes); their arrays are the node's state inputs.
        rngs: the rng groups (`LazyRng`s: the `rngs` given to `apply`, with the path
            folded in later); their keys are state inputs too.
        counters: the scopes' rng counters (static).
        naming: the module's transform-preserved state: setup done, autoname cursors
            (static).
    """

    variables: Any
    rngs: Any
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


def _merge_groups(inputs: Any, outputs: Any) -> tuple:
    """The variable groups after a call: the inputs with the mutated collections replaced,
    so the state keeps its structure (`pack`'s repack returns mutable collections only)."""
    return tuple(
        tuple({**ins, **outs} for ins, outs in zip(group_in, group_out, strict=True))
        for group_in, group_out in zip(inputs, outputs, strict=True)
    )


class _LinenCall:
    """One intercepted Linen method call, described to the MoX handler."""

    def __init__(self, handler: Handler, context: InterceptorContext) -> None:
        from bryo_mox import MoxError
        from bryo_mox.interception import module_info

        module = context.module
        if module.scope is None:
            raise MoxError(_UNBOUND.format(module=_describe(module)))
        self.handler = handler
        self.module = module
        self.method_name = context.method_name
        self.path = "/".join(module.scope.path)
        method = unwrapped_method(context)
        if method is None:
            raise MoxError(self._not_intercepted("Flax passed no method to re-run"))
        self.method = method
        self.info = module_info(module, self.path, attributes(module, self.method_name))
        self.scopes: list[Any] = []
        self.written: Any = None

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        scopes, args, kwargs = get_module_scopes(self.module, args, kwargs)
        self.scopes = packed_scopes(scopes)
        return pack(self._packed, (True,), (True,), (True,), enable_kwargs=True)(
            scopes, *args, **kwargs
        )

    def _packed(
        self,
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        def pure(state: LinenState, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
            live = [scope.rng_counters for scope in self.scopes]
            before = [_copy_counters(c) for c in live]
            try:
                for counters, values in zip(live, state.counters.value, strict=True):
                    _assign_counters(counters, values)
                inner = scope_fn(state.variables, state.rngs)
                out, naming = self._call_rebound(inner, state.naming.value, call_args, call_kwargs)
                variables = _merge_groups(state.variables, repack_fn(inner))
                counters_after = [_copy_counters(c) for c in live]
            finally:
                for counters, values in zip(live, before, strict=True):
                    _assign_counters(counters, values)
            new_state = LinenState(variables, state.rngs, _Static(counters_after), _Static(naming))
            return new_state, out

        state = LinenState(
            variable_groups,
            rng_groups,
            _Static([_copy_counters(scope.rng_counters) for scope in self.scopes]),
            _Static(export_state(self.module)),
        )
        out = self.handler(self.info, state, pure, self._write_back, args, kwargs)
        return out, self.written

    def _call_rebound(
        self, scopes: Any, naming: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """Run the method on a copy of the module bound to `scopes`; the output and the
        copy's naming state after the call."""
        from bryo_mox import MoxError

        rebound, args, kwargs = set_module_scopes(self.module, args, dict(kwargs), scopes)
        adopt_state(rebound, naming.export())
        token = _starting.set(rebound)
        try:
            out = self.method(rebound, *args, **kwargs)
            if _starting.get() is rebound:
                raise MoxError(self._not_intercepted("its call did not reach Flax's interceptors"))
        finally:
            _starting.reset(token)
        return out, current_state(rebound)

    def _write_back(self, new_state: LinenState) -> None:
        """Publish a call's effects: mutable collections into the module's scopes (unless
        they are gone: the scopes of a finished `apply`), rng counters, naming state."""
        self.written = new_state.variables
        for group in new_state.variables:
            for scope, variables in zip(self.scopes, group, strict=True):
                _publish(scope, variables)
        for scope, counters in zip(self.scopes, new_state.counters.value, strict=True):
            _assign_counters(scope.rng_counters, counters)
        reimport_state(self.module, new_state.naming.value)

    def _not_intercepted(self, why: str) -> str:
        cls = type(self.module)
        return _NOT_INTERCEPTED.format(
            path=self.path,
            cls=f"{cls.__module__}.{cls.__qualname__}",
            method=self.method_name,
            why=why,
        )


def _publish(scope: Any, variables: Mapping[str, Any]) -> None:
    if scope.invalid:
        return
    for collection, values in variables.items():
        if scope.is_mutable_collection(collection):
            for name, value in values.items():
                scope.put_variable(collection, name, value)


def _describe(module: nn.Module) -> str:
    cls = type(module)
    name = object.__getattribute__(module, "__dict__").get("name")
    named = f"{name!r} " if name else ""
    return f"{named}({cls.__module__}.{cls.__qualname__})"
