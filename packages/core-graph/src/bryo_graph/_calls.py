"""Calling a method of a graph kept as `(graphdef, state)`: `GraphDef.apply` and `call`.

`graphdef.apply(state)` returns a `MethodCaller`: a proxy on which attribute and item
access choose the method (`.encoder.reset`, `['b'].increment`, nothing for `__call__`)
and a call runs it on a graph merged from the pair, returning the method's output and
the graph's new `(graphdef, state)`. The pair given is never changed, so the whole call is
a pure function (it can run inside `jax.jit`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from bryo_pytree import Key


class Step(NamedTuple):
    """One access on the way to the method: `.name` (`attribute`) or `[key]`."""

    key: Key
    attribute: bool


Run = Callable[[tuple[Step, ...], tuple, dict[str, Any]], tuple[Any, Any]]


class MethodCaller:
    """Picks a method of a graph by attribute and item access, then calls it with `run`."""

    __slots__ = ("_run", "_steps")

    def __init__(self, run: Run, steps: tuple[Step, ...] = ()) -> None:
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "_steps", steps)

    def __getattr__(self, name: str) -> MethodCaller:
        if name.startswith("__"):
            raise AttributeError(name)
        return MethodCaller(self._run, (*self._steps, Step(name, True)))

    def __getitem__(self, key: Key) -> MethodCaller:
        return MethodCaller(self._run, (*self._steps, Step(key, False)))

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return self._run(self._steps, args, kwargs)

    def __repr__(self) -> str:
        return "MethodCaller(" + "".join(_step_text(step) for step in self._steps) + ")"


def _step_text(step: Step) -> str:
    return f".{step.key}" if step.attribute else f"[{step.key!r}]"


def method_of(node: object, steps: tuple[Step, ...]) -> Callable[..., Any]:
    """The callable `steps` lead to from `node`; an error names the step that failed."""
    target = node
    for done, step in enumerate(steps):
        try:
            target = getattr(target, step.key) if step.attribute else target[step.key]  # type: ignore[arg-type,index]  # attribute steps hold names; item steps any key
        except (AttributeError, KeyError, IndexError, TypeError) as error:
            where = "".join(_step_text(s) for s in steps[: done + 1])
            raise AttributeError(
                f"`apply`/`call` cannot reach `{where}` on the {type(node).__name__} merged "
                f"from the given state: {error}. Check the attribute names and keys after "
                "`call(...)`."
            ) from None
    if not callable(target):
        where = "".join(_step_text(s) for s in steps) or "the node"
        raise TypeError(
            f"`apply`/`call` reached `{where}`, a {type(target).__name__}, which is not "
            "callable; name a method (`call(pair).method(...)`)."
        )
    return target
