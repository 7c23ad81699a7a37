"""What differs between the JAX versions bryo_mox supports (0.7 through the newest).

Everything else in bryo_mox uses one spelling. Each shim names the versions it exists for;
delete it when the supported floor passes them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.core
from jax.extend import core as jex

#: jax's `new_jaxpr_eqn`: in `jax.extend.core` from jax 0.10; only `jax.core` has it in
#: 0.7 to 0.9.
_new_jaxpr_eqn: Any = getattr(jex, "new_jaxpr_eqn", None) or jax.core.new_jaxpr_eqn
_JaxprEqn: Any = jex.JaxprEqn


def new_jaxpr_eqn(
    invars: Any, outvars: Any, primitive: Any, params: Any, effects: Any, source_info: Any, ctx: Any
) -> Any:
    """jax's `new_jaxpr_eqn`; an equation without effects, whose source info and context
    are given, is made directly (jax's would return the same: it has no input effects to
    resolve). The loader makes one per equation of a file."""
    if not effects and source_info is not None and ctx is not None:
        return _JaxprEqn(invars, outvars, primitive, params, effects, source_info, ctx)
    return _new_jaxpr_eqn(invars, outvars, primitive, params, effects, source_info, ctx)


#: `find_top_trace(xs)`: the trace now current (jax ignores `xs` since 0.4.36): in
#: `jax.extend.core` in jax 0.10 (where `jax.core`'s warns); only `jax.core` has it in 0.7.
find_top_trace: Callable[[Any], Any] = (
    getattr(jex, "find_top_trace", None) or jax.core.find_top_trace
)

#: `DebugInfo(traced_for, func_src_info, arg_names, result_paths)`: in `jax.extend.core`
#: from jax 0.10; only `jax.core` has it in 0.7 to 0.9.
DebugInfo: Any = getattr(jex, "DebugInfo", None) or jax.core.DebugInfo

#: `DropVar(aval)`, an output nothing reads: in `jax.extend.core` from jax 0.10; only
#: `jax.core` has it in 0.7 to 0.9.
DropVar: Any = getattr(jex, "DropVar", None) or jax.core.DropVar

#: `check_jaxpr(jaxpr)` type-checks a jaxpr (every equation's inputs and outputs,
#: sub-jaxprs included): exported by `jax.extend.core` in jax 0.10; where a jax lacks it,
#: `loads` skips this check of rebuilt higher-order equations (the loader's own checks of
#: every declared type still run).
check_jaxpr: Callable[[Any], None] | None = getattr(jex, "check_jaxpr", None)
#: What `check_jaxpr` raises (`jax.extend.core.JaxprTypeError` where it is exported).
JaxprTypeError: type[Exception] = getattr(jex, "JaxprTypeError", TypeError)


def _public_binders() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """`name -> (function, arguments)`: a public function that binds each primitive
    `jax.extend.core.primitives` lacks in some supported version, and arguments to trace it
    on (a jax without the primitive binds others: the name is then not found)."""
    x = jax.ShapeDtypeStruct((2, 2), "float32")
    return {
        "remat2": (jax.checkpoint(lambda v: v), (0.0,)),  # `remat_p` from jax 0.8
        "split": (lambda v: jax.lax.split(v, (1, 1)), (x,)),
        "stack": (lambda v: jax.numpy.stack([v, v]), (x,)),
        "tile": (lambda v: jax.numpy.tile(v, (2, 1)), (x,)),
        "scatter-sub": (lambda v: v.at[0].subtract(1.0), (x,)),
        "optimization_barrier": (jax.lax.optimization_barrier, (x,)),
        "platform_index": (
            lambda v: jax.lax.platform_dependent(v, cpu=jax.numpy.sin, default=jax.numpy.cos),
            (x,),
        ),
        "random_clone": (jax.random.clone, (jax.random.key(0),)),
        "ragged_dot_general": (
            lambda v: jax.lax.ragged_dot(v, v[None], jax.numpy.array([2], "int32")),
            (x,),
        ),
    }


@functools.cache
def missing_primitives() -> dict[str, jex.Primitive]:
    """Primitives of this jax that `jax.extend.core.primitives` lacks, by name, found by
    tracing the public functions that bind them (`_public_binders`): `remat2`
    (`jax.checkpoint`, exported as `remat_p` from jax 0.8), `split` (`jax.lax.split`,
    `jnp.split`), `stack`, `tile`, `scatter-sub`, `optimization_barrier`,
    `platform_index` (`jax.lax.platform_dependent`), `random_clone`,
    `ragged_dot_general` (`jax.lax.ragged_dot`).
    """
    exported = {v.name for v in vars(jex.primitives).values() if isinstance(v, jex.Primitive)}
    found: dict[str, jex.Primitive] = {}
    for name, (fun, args) in _public_binders().items():
        if name in exported:
            continue
        eqns = jax.make_jaxpr(fun)(*args).jaxpr.eqns
        primitives = [eqn.primitive for eqn in eqns if eqn.primitive.name == name]
        if primitives:  # this jax binds another primitive there (an older spelling)
            found[name] = primitives[0]
    return found


def _jax_trace_context() -> Callable[[], Hashable] | None:
    try:
        config = importlib.import_module("jax._src.config")
    except ImportError:
        return None
    found = getattr(config, "trace_context", None)
    return found if callable(found) else None


#: `trace_context()`: the jax configuration that tracing depends on (x64, default
#: precision, dtype promotion, the abstract mesh, the axis environment, ...) as a hashable
#: value; jax keys its own trace caches by it. Private to jax (`jax._src.config`, in every
#: supported version); `None` where a jax lacks it, and then `loads` keeps what it traced
#: for one file only (`_load.TRACES`).
trace_context: Callable[[], Hashable] | None = _jax_trace_context()
