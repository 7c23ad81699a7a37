"""`CallRouter`: route the calls of a backend's module classes to a handler, on demand.

Backends make their module calls visible to tools such as `make_mox` by wrapping each
class's `__call__`. The wrapper costs one context-variable read while no handler is active;
while one is (inside `router.active(handler)`), each call goes to the backend's `route`
function instead, except the inner `super().__call__` of a call already being routed.
Handlers and the running call are context variables: re-entrant and confined to their
thread or task. For classes a backend does not own (Equinox's, Flax's), `patching(base)`
wraps the `__call__` of every existing subclass of `base` while a block runs.

A transform that calls a copy of a module it rebuilt (one layer of a scanned stack,
rebuilt from a slice of the stacked arrays) says which module of the model the copy stands
for with `standing_in(copy, original)`; tools that name calls by their place in the model
read it back with `stood_in_for(copy)`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

ORIGINAL_ATTRIBUTE = "__bryo_original_call__"

# route(handler, call, obj, current, args, kwargs): `call` is the unwrapped method and
# `current` the `(object, name)` whose routed call is running (None at the top).
Route = Callable[..., Any]


def _every_class(cls: type) -> bool:
    return True


class CallRouter:
    """One backend's call routing: `wrap` methods, `active(handler)`, `running(obj, name)`.

    Args:
        name: names the router's context variables (the backend's name).
        route: `route(handler, call, obj, current, args, kwargs)`, called instead of a
            wrapped `__call__` while a handler is active: `handler` is the active handler
            (`make_mox`'s), `call` the unwrapped method, `obj` the object called,
            `current` the `(object, name)` of the routed call running around this one
            (None at the top level: what `bryo_mox.interception.module_path` takes as
            `parent`), and `args`/`kwargs` the call's arguments. Run `call` inside
            `running(obj_or_its_copy, name)`, so that nested calls know their parent and
            `super().__call__` of the same object is not routed again. When `route`
            raises and the handler has a `route_failed(route, obj, error)` method, the
            error that method returns (None: the error is not the route's) is raised
            instead, from the original: `make_mox`'s handler names the backend's plugin.

    Example (a backend's `bryo_mox_interceptor` answers `router.active`; a base class's
    own `__call__` too: `router.patching(Base)`):
        >>> router = CallRouter("acme", route)  # doctest: +SKIP
        >>> Layer.__call__ = router.wrap(Layer.__call__)  # doctest: +SKIP
    """

    def __init__(self, name: str, route: Route) -> None:
        self._route = route
        self._handler: contextvars.ContextVar[Callable[..., Any] | None] = contextvars.ContextVar(
            f"{name}_handler", default=None
        )
        self._current: contextvars.ContextVar[tuple[object, str] | None] = contextvars.ContextVar(
            f"{name}_current", default=None
        )
        self._patch_lock = threading.Lock()
        self._patch_depth = 0
        self._patched: list[type] = []

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """`call` (a `__call__` method), routed while a handler is active; wraps once."""
        if hasattr(call, ORIGINAL_ATTRIBUTE):
            return call
        handler_var, current_var, route = self._handler, self._current, self._route

        @functools.wraps(call)
        def routed(obj: object, *args: Any, **kwargs: Any) -> Any:
            handler = handler_var.get()
            if handler is None:
                return call(obj, *args, **kwargs)
            current = current_var.get()
            if current is not None and current[0] is obj:  # super().__call__ of this call
                return call(obj, *args, **kwargs)
            try:
                return route(handler, call, obj, current, args, kwargs)
            except Exception as error:  # (free until it catches)
                failed = getattr(handler, "route_failed", None)
                named = failed(route, obj, error) if failed is not None else None
                if named is None:
                    raise
                raise named from error

        setattr(routed, ORIGINAL_ATTRIBUTE, call)
        return routed

    @contextlib.contextmanager
    def active(self, handler: Callable[..., Any]) -> Iterator[None]:
        """Route every wrapped call to `handler` inside the block."""
        token = self._handler.set(handler)
        try:
            yield
        finally:
            self._handler.reset(token)

    def running(self, obj: object, name: str) -> contextlib.AbstractContextManager[None]:
        """Mark `obj` (called `name`) as the call being routed, for nested calls' parents
        (a context manager; once per routed call, so a class rather than a generator)."""
        return _Running(self._current, (obj, name))

    @contextlib.contextmanager
    def patching(self, base: type, keep: Callable[[type], bool] = _every_class) -> Iterator[None]:
        """Wrap `__call__` of `base` and of every existing subclass inside the block.

        `base` itself counts: a torch-like library's `Module.__call__` (calling the
        subclass's `forward`) is the one method to wrap there. Only classes defining
        `__call__` themselves and accepted by `keep` are wrapped;
        they are put back when the last block (of any thread) exits. Classes created
        inside the block are not wrapped. Pass the same `base` every time.
        """
        with self._patch_lock:
            if self._patch_depth == 0:
                self._install(base, keep)
            self._patch_depth += 1
        try:
            yield
        finally:
            with self._patch_lock:
                self._patch_depth -= 1
                if self._patch_depth == 0:
                    self._uninstall()

    def _install(self, base: type, keep: Callable[[type], bool]) -> None:
        for cls in (base, *_subclasses(base)):
            call = cls.__dict__.get("__call__")
            if call is None or original_call(call) is not None or not keep(cls):
                continue
            type.__setattr__(cls, "__call__", self.wrap(call))
            self._patched.append(cls)

    def _uninstall(self) -> None:
        while self._patched:
            cls = self._patched.pop()
            original = original_call(cls.__dict__.get("__call__"))
            if original is not None:
                type.__setattr__(cls, "__call__", original)


class _Running:
    """`CallRouter.running`'s context manager: sets a context variable for the block."""

    __slots__ = ("token", "value", "var")

    def __init__(self, var: contextvars.ContextVar[Any], value: object) -> None:
        self.var = var
        self.value = value
        self.token: contextvars.Token[Any] | None = None

    def __enter__(self) -> None:
        self.token = self.var.set(self.value)

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            self.var.reset(self.token)
            self.token = None


def _subclasses(cls: type) -> Iterator[type]:
    seen: set[type] = set()
    stack = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                yield sub


def original_call(method: object) -> Callable[..., Any] | None:
    """The method `CallRouter.wrap` wrapped, or None if `method` is not a wrapper."""
    return getattr(method, ORIGINAL_ATTRIBUTE, None)


#: `(copy, original)` pairs of the `standing_in` blocks open in this context, innermost last
_stand_ins: contextvars.ContextVar[tuple[tuple[object, object], ...]] = contextvars.ContextVar(
    "bryo_stand_ins", default=()
)


@contextlib.contextmanager
def standing_in(copy: object, original: object) -> Iterator[None]:
    """Inside the block, `copy` stands for `original`: `stood_in_for(copy)` is `original`.

    For a transform that calls a module it rebuilt, such as `Stacked.fold` calling one
    layer rebuilt from slices of the stacked block's arrays: a tool naming calls by their
    place in the model (`make_mox`) then names the copy's calls after `original` (the
    stacked block, `"trunk/stacked"`) instead of guessing from the copy's arrays. The
    pairs are a context variable: confined to their thread or task, and kept only while
    the block runs.

    Example:
        >>> with standing_in(layer, stack.stacked):  # doctest: +SKIP
        ...     y = layer(x)
    """
    token = _stand_ins.set((*_stand_ins.get(), (copy, original)))
    try:
        yield
    finally:
        _stand_ins.reset(token)


def stood_in_for(copy: object) -> object | None:
    """The module `copy` stands for in an open `standing_in` block (the innermost), or None."""
    for candidate, original in reversed(_stand_ins.get()):
        if candidate is copy:
            return original
    return None
