"""`Sequential`: call layers (or any callables) one after the other.

Each callable's output is the next one's input: a tuple is spread as positional
arguments, a dict as keyword arguments, anything else is the one argument. `rngs=` given
to the call is passed on to every callable that takes an `rngs` keyword.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from bryo_graph import List
from bryo_rngs import Rngs

from ._module import Module


def takes_keyword(f: Callable[..., object], name: str) -> bool:
    """Whether `f` can be called with the keyword argument `name`."""
    try:
        parameters = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    keyword_kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.name == name and p.kind in keyword_kinds for p in parameters)


class Sequential(Module):
    """Call `fns` in order, each on the previous one's output.

    >>> model = Sequential(Linear(2, 8, rngs=rngs), relu, Linear(8, 1, rngs=rngs))  # doctest: +SKIP
    >>> model(jnp.ones((4, 2))).shape                                            # doctest: +SKIP
    (4, 1)

    The callables are `layers`, an `nnx.List` (modules in it are submodules). With none, a
    call returns its one argument (or the arguments, as a tuple or dict).
    """

    def __init__(self, *fns: Callable[..., object]) -> None:
        self.layers = List(fns)

    def __call__(self, *args: object, rngs: Rngs | None = None, **kwargs: object) -> object:
        if not self.layers:
            if len(args) == 1:
                return args[0]
            return args if args else (kwargs or None)
        output: object = None
        for i, f in enumerate(self.layers):
            if not callable(f):
                raise TypeError(
                    f"Sequential: layers[{i}] is not callable: {type(f).__name__} {f!r:.60}."
                )
            if i > 0:
                args, kwargs = _as_arguments(output)
            if rngs is not None and takes_keyword(f, "rngs"):
                kwargs = {**kwargs, "rngs": rngs}
            output = f(*args, **kwargs)
        return output


def _as_arguments(output: object) -> tuple[tuple, dict]:
    if isinstance(output, tuple):
        return output, {}
    if isinstance(output, dict):
        return (), output
    return (output,), {}
