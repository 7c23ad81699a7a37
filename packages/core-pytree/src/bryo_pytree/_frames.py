"""Walk nested structures of any depth with generators on an explicit stack.

A recursive walk over a user's structure (a module graph, a file's nested scopes) hits
Python's recursion limit on deep input. `run_frames` runs the same code without
recursing: each level is a generator (a *frame*) that yields a request for a nested
level and receives that level's result, as a recursive call would return it. It is a
building block for bryo's own packages (`bryo_transforms` builds the caller's graphs
with it, `bryo_mox` a file's nested scopes), public so that they share one driver.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

Result = TypeVar("Result")


def run_frames(
    root: Generator[Any, Any, Result],
    enter: Callable[[Any], Generator[Any, Any, Any]],
    *,
    frame_type: type | tuple[type, ...] = object,
    resolve: Callable[[Any], Any] | None = None,
    on_error: Callable[[Exception], BaseException] | None = None,
) -> Result:
    """Run `root` and the frames it asks for, depth-first, on an explicit stack.

    Each frame yields requests. A request that is an instance of `frame_type` opens a
    new frame, `enter(request)`, whose return value is sent back to the frame that
    asked; any other request is answered with `resolve(request)` at once (a leaf that
    needs no frame of its own).

    Args:
        root: the outermost frame.
        enter: makes the frame that answers a request.
        frame_type: the requests that open frames (all of them by default).
        resolve: answers the other requests; required when `frame_type` does not
            cover every request.
        on_error: called with an `Exception` raised inside a frame's code (not in
            `enter` or `resolve`); the walk stops and raises what it returns (say,
            the error with the place it happened). Without it, errors propagate.

    Returns:
        What `root` returns.

    Example:
        >>> def depth(tree):
        ...     deepest = 0
        ...     for child in tree:
        ...         deepest = max(deepest, (yield child))
        ...     return deepest + 1
        >>> nested = []
        >>> for _ in range(10_000):
        ...     nested = [nested]
        >>> run_frames(depth(nested), depth)
        10001
    """
    stack: list[Generator[Any, Any, Any]] = [root]
    sent: Any = None
    while True:
        try:
            request = stack[-1].send(sent)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            sent = done.value
            continue
        except Exception as error:
            if on_error is None:
                raise
            raise on_error(error) from None
        if isinstance(request, frame_type):
            stack.append(enter(request))
            sent = None
        elif resolve is None:
            raise TypeError(
                f"a frame yielded {type(request).__name__}, which is not a `frame_type` "
                "request, and no `resolve` was given to answer it."
            )
        else:
            sent = resolve(request)
