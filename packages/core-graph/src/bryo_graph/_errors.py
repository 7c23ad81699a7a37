"""The error of graph operations, below every module that raises it."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph operation cannot be done as asked; the message names the paths involved."""


class TraceContextError(RuntimeError):
    """A Module, Object or Variable made outside the JAX transform being traced now was
    changed from inside it (Flax's `errors.TraceContextError`): the change would leave a
    tracer of that trace in it, broken once the trace ends. The message names the
    attribute or Variable and the fix."""


MUTATION_FIX = (
    "It was made outside the JAX transform (`jax.jit`, `jax.vmap`, `jax.lax.scan`, "
    "`jax.grad`, ...) being traced now, and the traced function reaches it through its "
    "closure; the write would leave a tracer of this trace in it, broken after the call. "
    "Use bryo's lifted transforms (`nnx.jit`, `nnx.vmap`, `nnx.scan`, `nnx.grad`, ...), "
    "which carry state changes out, or pass the module to the function as an argument "
    "(and return it to keep the changes)."
)
