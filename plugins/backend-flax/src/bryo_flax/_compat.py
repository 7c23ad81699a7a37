"""The Flax internals this backend relies on, in one place.

Linen: a root scope keeps every variable of a bound module tree in the private
`Scope._variables` (`{collection: nested dict}`; a child scope's own `_variables` only
caches references into it). MoX writes a call's traced state into those dicts and puts
the old values back, so it reads them here. A module with a `setup` runs on a copy, as
Flax's lifted transforms run it: the user's method behind the intercepted call (wrapped
by Flax again) and the module's transform-preserved state (`_state`, with `export`) are
private too, and so are the autoname cursors a call advances. Checked against flax
0.12.0 and 0.12.8.

NNX: `nnx.update` checks that a Variable belongs to the current trace in flax 0.12.8
(`Variable._can_update`), not in flax 0.12.0 (`UPDATE_CHECKS_TRACE`); both versions keep
the Variable's trace state, which `in_current_trace` reads.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
from flax import nnx
from flax.core.scope import Scope as Scope
from flax.linen.module import InterceptorContext as InterceptorContext
from flax.linen.module import wrap_method_once

#: `scope.rng_counters`: `{stream: int, (child token, child name): {...}}`, nested.
RngCounters = dict[Any, Any]

#: Whether `nnx.update` refuses a Variable of another trace itself (flax 0.12.8 does;
#: flax 0.12.0 writes without checking, leaking tracers).
UPDATE_CHECKS_TRACE = hasattr(nnx.Variable, "_can_update")


def root_variables(root: Scope) -> dict[str, Any]:
    """The variables of the scope tree under `root`: `{collection: nested dict}`."""
    return root._variables


def scope_variables(scope: Scope) -> dict[str, Any]:
    """The collections `scope` holds: the root's are the variables themselves, a child
    scope's are references into its parent's dicts, taken when it first reads them."""
    return scope._variables


def unwrapped_method(context: InterceptorContext) -> Callable[..., Any] | None:
    """The user's method behind an intercepted call (`orig_method` is
    `functools.partial(method, module)`), with Flax's state-managing wrapper around it so
    that calling it on a copy runs setup and interceptors as the original call did; None
    if Flax passed something else."""
    func = getattr(context.orig_method, "func", None)
    return None if func is None else wrap_method_once(func)


def export_state(module: nn.Module) -> Any:
    """A copy of `module`'s transform-preserved state (setup done, autoname cursors)."""
    return module._state.export()


class Naming(NamedTuple):
    """What a call leaves in a module's naming state: the autoname cursors of its
    `_state` (`Dense_0`, `Dense_1`, ...) and the names its scope reserved."""

    cursor: dict[str, int]
    reservations: dict[str, set[str | None]]


def naming(module: nn.Module, scope: Scope) -> Naming:
    """A copy of the naming state of `module` (bound to `scope`)."""
    reserved = {name: set(cols) for name, cols in scope.reservations.items()}
    return Naming(dict(module._state.autoname_cursor), reserved)


def set_naming(module: nn.Module, scope: Scope, value: Naming) -> None:
    """Give `module` (bound to `scope`) a copy of the naming state `value`."""
    module._state.autoname_cursor = dict(value.cursor)
    reserved = {name: set(cols) for name, cols in value.reservations.items()}
    scope.reservations = collections.defaultdict(set, reserved)


def adopt_state(module: nn.Module, state: Any) -> None:
    """Give a copy bound elsewhere the state exported from its original."""
    object.__setattr__(module, "_state", state)


def in_current_trace(variable: nnx.Variable) -> bool:
    """Whether `variable` was created in the current trace (or both are concrete): the
    `_trace_state` every Variable keeps, in flax 0.12.0 and 0.12.8."""
    return variable._trace_state.is_valid()
