"""Where `Module.sow` puts values while `capture` runs: a session per capturing call.

`capture(fn, Intermediate)` opens a `Captures` session for the modules of its model
(found by identity, with their paths). While it is active, `Module.sow` on one of them
folds the value into the session (`reduce_fn(previous or init_fn(), value)`) instead of
setting an attribute, and returns whether that Variable type is captured; afterwards the
session becomes one State per captured type, nested by module path as the model is.
Modules outside the session (none open, or a module the capture did not see) sow into
attributes as before. As Flax NNX does, the session gives each of the model's modules,
for the call, a `__captures__` attribute: a `List` of one Variable per captured type (and
per type of `init`), holding a dict name -> value. It is state like any other, so the
copies of a module that lifted transforms, `split`/`merge` and simple-mode transforms
make carry it: their `sow` and `perturb` fold into it, the transform writes its new value
back (stacked along the axis its `in_axes` give it, e.g. `prefix(model, {Intermediate:
0, ...: None})`), and `adopt` reads it off the model's modules. A module the session
cannot set it on (one of an outer trace) keeps its values in the session itself; new
Variables of a captured type that a transform wrote onto the modules are moved into the
session too.

`capture(..., method_outputs=Intermediate)` also sows the result of every public method
(and `__call__`) of the model's modules under the method's name. The methods of the
model's classes are wrapped while at least one such capture runs (counted per class,
under a lock, then restored; the methods `Module` itself defines, `sow` included, never
are); a wrapped method sows only for a module of the running
thread's active session, so other modules and threads see the plain method. Modules
copied inside lifted transforms are not the session's: their method outputs are not
recorded (their `sow` calls are).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from bryo_graph import (
    Intermediate,
    List,
    State,
    TraceContextError,
    Variable,
    register_variable_name,
)
from bryo_pytree import Key, Path

_ACTIVE: contextvars.ContextVar[Captures | None] = contextvars.ContextVar(
    "bryo_nnx_captures", default=None
)
SLOTS = "__captures__"  # the attribute holding a module's capture Variables (Flax's name)


@register_variable_name("perturbations")
class Perturbation(Intermediate):
    """A value `Module.perturb` adds to an intermediate, to take gradients with respect to
    that intermediate (capture the zeros first, then differentiate w.r.t. them)."""


class Captures:
    """The values sown into the modules of one `capture` call.

    Attributes:
        var_types: the Variable types captured (sowing another type returns False).
        paths: `id(module)` -> its path in the captured model.
        values: module path -> Variable type -> name -> the value so far.
    """

    def __init__(
        self,
        modules: Sequence[tuple[Path, object]],
        var_types: tuple[type[Variable], ...],
        init: State | None,
        method_outputs: type[Variable] | None = None,
    ) -> None:
        self.var_types = var_types
        self.method_outputs = method_outputs
        self.paths = {id(module): path for path, module in modules}
        self._modules = [module for _, module in modules]  # keeps the ids valid
        self.values: dict[Path, dict[type, dict[Key, Any]]] = {}
        # (path, module, an enclosing capture's `__captures__`) of the modules given theirs
        self._installed: list[tuple[Path, object, object]] = []
        if init is not None:
            self._load(init)

    def _load(self, init: State) -> None:
        """Start from the values of a State `capture` returned (e.g. perturbations)."""
        modules = set(self.paths.values())
        for path, leaf in init.flat_state().items():
            if not path or path[:-1] not in modules or not isinstance(leaf, Variable):
                raise ValueError(
                    f"`capture(init=...)`: {'/'.join(map(str, path))} is not a Variable under "
                    "one of the model's modules; pass a State that `capture` returned for "
                    "this model."
                )
            by_type = self.values.setdefault(path[:-1], {}).setdefault(type(leaf), {})
            by_type[path[-1]] = leaf.get_value()

    def install(self, modules: Sequence[tuple[Path, object]]) -> None:
        """Give each module its `__captures__` for the call (taken off by `adopt`): one
        Variable per captured type and per type of `init`, holding its `init` values, so
        that the copies made inside the call (`split`/`merge`, lifted and simple-mode
        transforms) sow into state that the transforms write back, and a perturbation read
        in a copy depends on the `init` value (its gradient flows there). A module another
        trace owns keeps its values in the session only."""
        for path, module in modules:
            by_type = self.values.get(path, {})
            types = dict.fromkeys((*self.var_types, *by_type))
            slots = List([var_type(dict(by_type.get(var_type, {}))) for var_type in types])
            outer = vars(module).get(SLOTS)  # an enclosing capture's, put back by `adopt`
            try:
                setattr(module, SLOTS, slots)
            except TraceContextError:
                continue  # a module of an outer trace: the session alone holds its values
            self._installed.append((path, module, outer))

    def sow(
        self,
        module: object,
        variable_type: type[Variable],
        name: str,
        value: object,
        reduce_fn: Callable[[Any, Any], Any],
        init_fn: Callable[[], Any],
    ) -> bool | None:
        """Fold `value` in (into the module's `__captures__`, else the session); None when
        `module` is neither one of the session's modules nor a copy of one."""
        slot = _slots(module)
        if slot is not None:
            var = slot.get(variable_type)
            if var is None:
                return False
            named = var.get_value()
            var.set_value(
                {**named, name: reduce_fn(named[name] if name in named else init_fn(), value)}
            )
            return True
        path = self.paths.get(id(module))
        if path is None:
            return None
        known = self.values.get(path, {})
        if variable_type not in self.var_types and variable_type not in known:
            return False
        store = self.values.setdefault(path, {}).setdefault(variable_type, {})
        store[name] = reduce_fn(store[name] if name in store else init_fn(), value)
        return True

    def record_output(self, module: Any, name: str, result: object) -> None:
        """Sow `result`, what method `name` of `module` returned, when this session
        records method outputs and `module` is one of its modules."""
        if self.method_outputs is not None and id(module) in self.paths:
            _plain(type(module).sow)(module, self.method_outputs, name, result)

    def perturb(
        self, module: object, variable_type: type[Variable], name: str, value: object
    ) -> tuple[bool, object]:
        """`(handled, value + perturbation)`: zeros are captured the first time; not
        handled when `module` is neither one of the session's modules nor a copy of one."""
        slot = _slots(module)
        if slot is not None:
            var = slot.get(variable_type)
            if var is None:
                return True, value
            named = var.get_value()
            if name not in named:
                named = {**named, name: jax.tree.map(jnp.zeros_like, value)}
                var.set_value(named)
            return True, jax.tree.map(lambda p, v: p + v, named[name], value)
        path = self.paths.get(id(module))
        if path is None:
            return False, value
        known = self.values.get(path, {})
        if variable_type not in self.var_types and variable_type not in known:
            return True, value
        store = self.values.setdefault(path, {}).setdefault(variable_type, {})
        if name not in store:
            store[name] = jax.tree.map(jnp.zeros_like, value)
        return True, jax.tree.map(lambda p, v: p + v, store[name], value)

    def adopt(self, modules: Sequence[tuple[Path, object]], before: set[tuple[int, str]]) -> None:
        """Move into the session the Variables of a captured type that the call added to
        `modules` (`before`: their `(id(module), name)` Variable slots before the call):
        values sown inside lifted transforms, which set them on the modules. The
        `__captures__` `install` set are read and taken off; so are new `Intermediate`s of
        a type this capture does not take (a `sow` outside the copies drops those too), so
        that the model is left as it was."""
        for path, module, outer in self._installed:
            slot = _slots(module)
            if slot is not None:
                by_type = self.values.setdefault(path, {})
                for var_type, var in slot.items():
                    by_type[var_type] = dict(var.get_value())
            if outer is not None:
                setattr(module, SLOTS, outer)
            elif SLOTS in vars(module):
                delattr(module, SLOTS)
        self._installed.clear()
        for path, module in modules:
            for name, value in list(vars(module).items()):
                if not isinstance(value, Variable) or (id(module), name) in before:
                    continue
                if type(value) in self.var_types:
                    by_type = self.values.setdefault(path, {}).setdefault(type(value), {})
                    by_type[name] = value.get_value()
                    delattr(module, name)
                elif isinstance(value, Intermediate):
                    delattr(module, name)

    def states(self) -> list[State]:
        """One State per captured type: `(*module path, name)` -> a Variable of that type."""
        flats: dict[type, dict[Path, Variable]] = {t: {} for t in self.var_types}
        for path, by_type in self.values.items():
            for var_type, named in by_type.items():
                if var_type in flats:
                    for name, value in named.items():
                        flats[var_type][(*path, name)] = var_type(value)
        return [State.from_flat_path(flats[t]) for t in self.var_types]

    def __enter__(self) -> Captures:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._token)


def _slots(module: object) -> dict[type, Variable] | None:
    """A module's `__captures__` (set by a capture, or copied from one) by Variable type,
    or None when it has none."""
    slots = vars(module).get(SLOTS) if hasattr(module, "__dict__") else None
    if not isinstance(slots, List):  # a graph node: lifted transforms update it in place
        return None
    return {type(var): var for var in slots if isinstance(var, Variable)}


def variable_slots(modules: Sequence[tuple[Path, object]]) -> set[tuple[int, str]]:
    """`(id(module), name)` of every Variable attribute of `modules` (see `adopt`)."""
    return {
        (id(module), name)
        for _, module in modules
        for name, value in vars(module).items()
        if isinstance(value, Variable)
    }


_RECORDING_LOCK = threading.Lock()
_RECORDING: dict[type, int] = {}  # class -> open captures recording its methods' outputs


def _recording(name: str, method: Callable) -> Callable:
    @functools.wraps(method)
    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        session = _ACTIVE.get()
        if session is not None:
            session.record_output(self, name, result)
        return result

    recording.__bryo_records_output__ = True  # type: ignore[attr-defined]  # a marker on the function object
    return recording


def _plain(method: Callable) -> Callable:
    """`method` without the recording wrappers `recording_method_outputs` put on it."""
    while getattr(method, "__bryo_records_output__", False):
        method = method.__wrapped__  # type: ignore[attr-defined]  # set by functools.wraps
    return method


@contextlib.contextmanager
def recording_method_outputs(classes: Iterable[type], base: type) -> Iterator[None]:
    """While open, the public methods and `__call__` defined by `classes` (not their
    bases) report their results to the active session (`Captures.record_output`).

    `base` (the Module class) and its own bases are never wrapped, nor are methods
    overriding one of theirs (`sow`, `train`, ...): those are the framework's, not the
    model's computations.
    """
    framework = base.__mro__
    own = {name for cls in framework for name in vars(cls)}
    classes = [cls for cls in dict.fromkeys(classes) if cls not in framework]
    with _RECORDING_LOCK:
        for cls in classes:
            if cls not in _RECORDING:
                for name, method in list(vars(cls).items()):
                    if (
                        inspect.isfunction(method)
                        and (name == "__call__" or not name.startswith("_"))
                        and name not in own
                    ):
                        setattr(cls, name, _recording(name, method))
            _RECORDING[cls] = _RECORDING.get(cls, 0) + 1
    try:
        yield
    finally:
        with _RECORDING_LOCK:
            for cls in classes:
                _RECORDING[cls] -= 1
                if _RECORDING[cls] == 0:
                    del _RECORDING[cls]
                    for name, method in list(vars(cls).items()):
                        if getattr(method, "__bryo_records_output__", False):
                            setattr(cls, name, method.__wrapped__)


def active_captures() -> Captures | None:
    """The innermost open `capture` session of this thread, or None."""
    return _ACTIVE.get()
