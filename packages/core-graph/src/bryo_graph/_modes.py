"""Graph mode or tree mode: the defaults of the `graph=` and `graph_updates=` keywords.

As in Flax NNX 0.12, the graph functions and transforms take `graph=`: `True` (graph
mode, the default) walks modules as graphs, with shared references and cycles; `False`
(tree mode) treats them as the JAX pytrees they also are. The transforms also take
`graph_updates=`: whether state changed inside flows back into the caller's objects.
`set_graph_mode(False)` / `set_graph_updates(False)` change the defaults of the current
thread: called plainly they set it, used in a `with` block they set it for the block, and
used as a decorator for every call of the decorated function.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Defaults(threading.local):
    def __init__(self) -> None:
        self.stacks: dict[str, list[bool]] = {"graph": [], "graph_updates": []}


_defaults = _Defaults()


class _Setting:
    """Set one default for the current thread; also a context manager and a decorator."""

    name = ""

    def __init__(self, value: bool, /) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"`set_{self.name}` takes True or False; got {value!r}.")
        stack = _defaults.stacks[self.name]
        self._previous = stack[-1] if stack else None
        if stack:
            stack[-1] = value
        else:
            stack.append(value)
        self._value = value

    def __enter__(self) -> _Setting:
        stack = _defaults.stacks[self.name]
        if self._previous is not None:
            stack.insert(-1, self._previous)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _defaults.stacks[self.name].pop()

    def __call__(self, f: F) -> F:
        stack = _defaults.stacks[self.name]
        stack.pop()  # undo the setting: the decorator applies it per call only
        if self._previous is not None:
            stack.append(self._previous)
        value = self._value

        @functools.wraps(f)
        def with_setting(*args: Any, **kwargs: Any) -> Any:
            _defaults.stacks[self.name].append(value)
            try:
                return f(*args, **kwargs)
            finally:
                _defaults.stacks[self.name].pop()

        return with_setting  # type: ignore[return-value]  # wraps(f): same signature

    @classmethod
    def current_value(cls) -> bool:
        stack = _defaults.stacks[cls.name]
        return stack[-1] if stack else True

    def __repr__(self) -> str:
        return f"set_{self.name}({self._value})"


class set_graph_mode(_Setting):
    """Set the default of `graph=` (True: graph mode, False: tree mode) for this thread.

    >>> with set_graph_mode(False):        # doctest: +SKIP
    ...     graphdef, state = split(model)  # tree mode
    """

    name = "graph"


class set_graph_updates(_Setting):
    """Set the default of the transforms' `graph_updates=` for this thread."""

    name = "graph_updates"


def graph_mode(graph: bool | None) -> bool:
    """`graph`, or the current default when it is None."""
    return set_graph_mode.current_value() if graph is None else graph


def graph_updates(updates: bool | None) -> bool:
    """`updates`, or the current default when it is None."""
    return set_graph_updates.current_value() if updates is None else updates
