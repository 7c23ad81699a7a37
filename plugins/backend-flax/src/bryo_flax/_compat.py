"""The Flax internals this backend relies on, in one place.

Flax's own lifted transforms (`nn.jit`, `nn.remat`, `nn.scan`) run a bound Linen method
as a function of its variables and rngs with `flax.core.lift.pack`, after taking the
module's scopes apart with `get_module_scopes` and rebinding a copy with
`set_module_scopes`; MoX does the same for each module call. These names are not
re-exported by `flax.linen`, and the module's transform-preserved state (`_state`, with
`export`/`reimport`) is private, so every use is here. Checked against flax 0.12; the
same names and signatures exist since flax 0.7.

NNX: `nnx.update` checks that a Variable belongs to the current trace in flax 0.12.8
(`Variable._can_update`), not in flax 0.12.0; `check_can_update` makes the check on
versions without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import flax.linen as nn
from flax import errors, nnx
from flax.core.lift import _dedup_scopes
from flax.core.lift import pack as pack
from flax.core.scope import Scope
from flax.linen.module import InterceptorContext as InterceptorContext
from flax.linen.module import wrap_method_once
from flax.linen.transforms import get_module_scopes as get_module_scopes
from flax.linen.transforms import set_module_scopes as set_module_scopes

#: `scope.rng_counters`: `{stream: int, (child token, child name): {...}}`, nested.
RngCounters = dict[Any, Any]

#: Whether `nnx.update` refuses a Variable of another trace itself (flax 0.12.8 does;
#: flax 0.12.0 writes without checking, leaking tracers).
UPDATE_CHECKS_TRACE = hasattr(nnx.Variable, "_can_update")


def unwrapped_method(context: InterceptorContext) -> Callable[..., Any] | None:
    """The user's method behind an intercepted call (`orig_method` is
    `functools.partial(method, module)`), with Flax's state-managing wrapper around it so
    that calling it on a rebound copy runs setup, compact naming and interceptors as the
    original call did; None if Flax passed something else."""
    func = getattr(context.orig_method, "func", None)
    return None if func is None else wrap_method_once(func)


def packed_scopes(scopes: list[Scope]) -> list[Scope]:
    """The scopes `pack` makes variable groups for, in its order: those of `scopes` that
    are not inside another one of them."""
    return list(_dedup_scopes(scopes)[0])


def export_state(module: nn.Module) -> Any:
    """A copy of `module`'s transform-preserved state (setup done, autoname cursors)."""
    return module._state.export()


def adopt_state(module: nn.Module, state: Any) -> None:
    """Give a rebound copy the state exported from its original."""
    object.__setattr__(module, "_state", state)


def current_state(module: nn.Module) -> Any:
    """`module`'s transform-preserved state object itself."""
    return module._state


def reimport_state(module: nn.Module, state: Any) -> None:
    """Carry the state a call left on a rebound copy back to the original module."""
    module._state.reimport(state)


def check_can_update(
    module: object,
    paths: set[tuple[Any, ...]],
    walk: Callable[[object], Iterable[tuple[tuple[Any, ...], object]]],
) -> None:
    """Raise Flax's `TraceContextError` if a Variable of `module` at one of `paths`
    belongs to another trace than the current one (a module created outside a traced
    function, mutated inside it), as flax 0.12.8's `nnx.update` does itself.

    A no-op where `nnx.update` checks (`UPDATE_CHECKS_TRACE`): walking the module graph
    for every call would be paid twice. On flax 0.12.0 the check is made here from the
    Variable's `_trace_state`, which both versions keep.
    """
    if UPDATE_CHECKS_TRACE:
        return
    for path, node in walk(module):
        if path in paths and isinstance(node, nnx.Variable):
            if not node._trace_state.is_valid():
                raise errors.TraceContextError(
                    f"Cannot mutate {type(node).__name__} from a different trace level"
                )
