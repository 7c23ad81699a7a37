"""The error of graph operations, below every module that raises it."""

from __future__ import annotations

import sys


class GraphError(ValueError):
    """A graph operation cannot be done as asked; the message names the paths involved."""


class TraceContextError(RuntimeError):
    """A Module, Object or Variable made outside the JAX transform being traced now was
    changed from inside it (Flax's `errors.TraceContextError`): the change would leave a
    tracer of that trace in it, broken once the trace ends. The message names the
    attribute or Variable and the fix.

    Once Flax is imported, the error raised is also a `flax.errors.TraceContextError`, so
    `except` clauses written for Flax catch it. (bryo never imports Flax for this: code
    that names Flax's class has imported it already.)
    """

    def __new__(cls, *args: object, **kwargs: object) -> TraceContextError:
        flax_errors = sys.modules.get("flax.errors")
        flax_class = getattr(flax_errors, "TraceContextError", None)
        made = cls
        if isinstance(flax_class, type) and issubclass(flax_class, Exception):
            made = _with_flax_base(cls, flax_class)
        return RuntimeError.__new__(made, *args)

    def __reduce__(self) -> tuple[type, tuple]:
        # Pickled as bryo's own class: the class mixing Flax's in is made at run time.
        return vars(type(self)).get("_bryo_class", type(self)), self.args


_MIX = "_bryo_flax_mix"  # on an error class: (Flax's class, the mix of both), made once


def _with_flax_base(cls: type[TraceContextError], flax_class: type) -> type[TraceContextError]:
    """`cls` with Flax's `TraceContextError` as a second base, named as `cls` (tracebacks
    and `repr` show bryo's class); made once per class and kept on it (no module-level
    cache: a class dropped by its user goes with its mix)."""
    if "_bryo_class" in vars(cls) or issubclass(cls, flax_class):
        return cls
    made = vars(cls).get(_MIX)
    if made is not None and made[0] is flax_class:
        return made[1]
    namespace = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "__init__": cls.__init__,  # bryo's (not Flax's, which appends a link to its docs)
        "_bryo_class": cls,
    }
    mix = type(cls.__name__, (cls, flax_class), namespace)
    setattr(cls, _MIX, (flax_class, mix))
    return mix


MUTATION_FIX = (
    "It was made outside the JAX transform (`jax.jit`, `jax.vmap`, `jax.lax.scan`, "
    "`jax.grad`, ...) being traced now, and the traced function reaches it through its "
    "closure; the write would leave a tracer of this trace in it, broken after the call. "
    "Use bryo's lifted transforms (`nnx.jit`, `nnx.vmap`, `nnx.scan`, `nnx.grad`, ...), "
    "which carry state changes out, or pass the module to the function as an argument "
    "(and return it to keep the changes)."
)
