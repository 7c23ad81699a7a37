"""Typed access to MoX's hooks, cached on the plugin manager's epoch.

Core code asks here for the active interceptors and the serializer table; plugins are
asked once per registration change, never per traced call. Two hook families load
lazily: `mox` (backends' interceptors, keyed by the backend's top-level module) when
`make_mox` traces, and `serializers` (keyed by format name) on the first `dump`/`load`
of a format.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import jax

from bryo_plugins import (
    PerEpoch,
    PluginCallbackError,
    PluginError,
    PluginResultError,
    answers,
    callable_answer,
    callback_error,
    get_plugin_manager,
    hook_table,
    module_roots,
)

from ._errors import MoxError

INTERCEPTORS = "mox"
SERIALIZERS = "serializers"


class CallHandler(Protocol):
    """What an interceptor calls instead of a module (see `hookspecs`)."""

    def __call__(
        self,
        info: Any,
        state: Any,
        pure: Callable[..., tuple[Any, Any]],
        write_back: Callable[[Any], None],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any: ...


Interceptor = Callable[[CallHandler], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class Serializer:
    """A file format for MoX.

    Attributes:
        format: the name passed as `format=` (`"xml"`).
        extensions: file suffixes chosen by `dump`/`load` (`(".xml",)`).
        dumps: `DocNode -> str | bytes`.
        loads: `str | bytes -> DocNode`, safe on untrusted input.
    """

    format: str
    extensions: tuple[str, ...]
    dumps: Callable[[Any], str | bytes]
    loads: Callable[[str | bytes], Any]


_interceptor = callable_answer("an interceptor `(handler) -> context manager`")


_interceptors: PerEpoch[list[tuple[str, Interceptor]]] = PerEpoch(
    # Callable is all that can be checked of a plugin's answer before it is called.
    lambda pm: [
        (a.plugin, cast(Interceptor, a.value))
        for a in answers("bryo_mox_interceptor", _interceptor, pm=pm)
    ]
)


def interceptors() -> list[Interceptor]:
    """The interceptors of every backend whose module is imported (family `mox`).

    A backend's modules cannot exist before its library is imported, so the `mox`
    plugins keyed by an imported top-level module are all that tracing can need.
    """
    return [interceptor for _, interceptor in _active()]


def _active() -> list[tuple[str, Interceptor]]:
    pm = get_plugin_manager()
    pm.load_family(INTERCEPTORS, sys.modules)
    return _interceptors.get(pm)


_INTERCEPTOR_CONTRACT = (
    "`interceptor(handler)` must return a context manager that routes the backend's "
    "module calls to `handler` while it is entered (see `bryo_mox.hookspecs`)"
)


def enter_interceptors(stack: contextlib.ExitStack, handler: CallHandler) -> None:
    """Enter every backend's interceptor with `handler` on `stack`; an interceptor that
    raises, or answers no context manager, is named with its plugin."""
    for plugin, interceptor in _active():
        try:
            named = PluginHandler(handler, plugin=plugin, interceptor=interceptor)
            named.plugin, named.interceptor = plugin, interceptor
            manager = interceptor(named)
        except Exception as error:
            raise _interceptor_error(plugin, interceptor, error=error) from error
        if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
            returned = f"{type(manager).__name__} {manager!r:.80}, not a context manager"
            raise _interceptor_error(plugin, interceptor, returned=returned)
        try:
            stack.enter_context(manager)
        except MoxError:  # the backend's own message to the user
            raise
        except Exception as error:
            raise _interceptor_error(plugin, interceptor, error=error, entering=True) from error


def _interceptor_error(
    plugin: str,
    interceptor: Interceptor,
    *,
    error: Exception | None = None,
    returned: str | None = None,
    entering: bool = False,
) -> PluginCallbackError:
    return callback_error(
        interceptor,
        role="the interceptor" + (" (entering its context manager)" if entering else ""),
        plugin=plugin,
        hook="bryo_mox_interceptor",
        contract=_INTERCEPTOR_CONTRACT,
        error=error,
        returned=returned,
        where="when `make_mox` began to trace",
        unchanged="Nothing was traced.",
        category=MoxError,
    )


PURE_CONTRACT = (
    "`pure(state, *args, **kwargs)` must return `(new_state, out)`: the module's state after "
    "the call (the structure of `state`) and the call's result"
)
WRITE_BACK_CONTRACT = (
    "`write_back(new_state)` must store `new_state` into the module, as the call itself would have"
)
INFO_CONTRACT = (
    "A backend's interceptor must hand each module call to `handler(info, state, pure, "
    "write_back, args, kwargs)` with a `bryo_mox.ModuleInfo` as `info` "
    "(`bryo_mox.interception.module_info`)"
)


_ROUTE_CONTRACT = (
    "`route(handler, call, module, parent, args, kwargs)` must hand the call to "
    "`handler(info, state, pure, write_back, args, kwargs)` and return what it returns"
)


class PluginHandler(functools.partial):
    """`make_mox`'s handler as one backend's interceptor gets it: `handler(..., plugin=
    name)`, a `functools.partial` (calling it adds no Python frame: deep models nest one
    module call in another). The handler names the plugin when the `info`, `pure` or
    `write_back` its route passes misbehave (`handler_error`), and `CallRouter` asks
    `route_failed` about an error the route itself raised."""

    plugin: str
    interceptor: Interceptor

    def route_failed(self, route: object, module: object, error: Exception) -> Exception | None:
        """The error naming the plugin for an `error` its route raised itself; None for one
        that passed through the handler (the module's own code, a nested call), for
        the owner's own errors (MoxError: the backend's message to the user), and for a
        RecursionError (the model nests too deeply: `make_mox` says so)."""
        if isinstance(error, MoxError | RecursionError) or _through(error, self.func):
            return None
        return handler_error(
            self.plugin,
            route,
            "the route of its CallRouter",
            _ROUTE_CONTRACT,
            error=error,
            where=f"for a call of a {type(module).__qualname__}",
        )


def _through(error: BaseException, function: Any) -> bool:
    """Whether `error` was raised inside a call of `function` (its traceback shows it)."""
    code = getattr(function, "__code__", None)
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def handler_error(
    plugin: str | None,
    function: object,
    role: str,
    contract: str,
    *,
    where: str,
    error: Exception | None = None,
    returned: str | None = None,
    did: str | None = None,
) -> PluginCallbackError:
    """The error naming `plugin` for a function its interceptor handed `make_mox`."""
    return callback_error(
        function,
        role=role,
        plugin=plugin,
        hook="bryo_mox_interceptor",
        contract=contract,
        error=error,
        returned=returned,
        did=did,
        where=where,
        category=MoxError,
    )


def check_interceptors_for(fun: object, args: tuple, kwargs: Mapping[str, Any]) -> None:
    """Refuse to trace `fun` with objects of a backend whose `mox` plugin failed (to load,
    or in `bryo_mox_interceptor`): the MoX would silently lack that backend's module
    calls. The objects looked at are `fun` (a module, a bound method's module, what a
    closure or `functools.partial` holds) and the pytree nodes and leaves of its arguments.
    Costs nothing while no `mox` plugin failed.
    """
    _active()  # loads the `mox` plugins of the imported modules: they may fail now
    pm = get_plugin_manager()
    if not pm.failures:
        return
    failed = pm.failures_for(INTERCEPTORS, _AnyKey())
    if not failed:
        return
    keys = {key for failure in failed for _, key in pm.entry_groups(failure.name) if key}
    for cls in _classes_of(fun, args, kwargs):
        roots = module_roots(cls) & keys
        if roots:
            pm.check_failed(INTERCEPTORS, roots, f"the module calls of {_name(cls)} in `make_mox`")


class _AnyKey:
    def __contains__(self, key: object) -> bool:
        return True


def _classes_of(fun: object, args: tuple, kwargs: Mapping[str, Any]) -> set[type]:
    found: set[type] = set()
    held: list[object] = [fun, getattr(fun, "__self__", None), getattr(fun, "func", None)]
    held += (
        list(getattr(fun, "args", None) or ()) if not isinstance(fun, types.FunctionType) else []
    )
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue

    def seen(value: object) -> bool:
        found.add(type(value))
        return False

    jax.tree_util.tree_flatten((held, args, dict(kwargs)), is_leaf=seen)
    return found


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _serializer_entries(answer: object) -> list[tuple[str, Serializer]]:
    if isinstance(answer, Serializer | str | bytes) or not isinstance(answer, Sequence):
        raise PluginResultError(f"expected a sequence of `bryo_mox.Serializer`s, got {answer!r}")
    bad = [s for s in answer if not isinstance(s, Serializer)]
    if bad:
        raise PluginResultError(f"expected `bryo_mox.Serializer`s, got {bad[0]!r}")
    for serializer in answer:
        _check_serializer(serializer)
    return [(serializer.format, serializer) for serializer in answer]


def _check_serializer(serializer: Serializer) -> None:
    """Refuse a `Serializer` that would misbehave later: `extensions=".json"` (a string)
    would claim every file ending in `.`, `j`, `s`, `o` or `n`."""
    name = f"the Serializer {serializer.format!r}"
    format = serializer.format
    if not isinstance(format, str) or not format or any(c.isspace() or c == "." for c in format):
        raise PluginResultError(
            f"{name}: `format` must be a name such as 'json', without spaces or dots (it is "
            f"also the entry point's key, bryo.serializers.<format>), got {format!r}"
        )
    extensions = serializer.extensions
    if isinstance(extensions, str) or not isinstance(extensions, tuple | list):
        raise PluginResultError(
            f"{name}: `extensions` must be a tuple of suffixes such as ('.mox.json',), got "
            f"{extensions!r}"
        )
    for extension in extensions:
        if not isinstance(extension, str) or not extension.startswith(".") or extension == ".":
            raise PluginResultError(
                f"{name}: each extension must be a suffix starting with '.', such as "
                f"'.mox.json', got {extension!r}"
            )
    for field in ("dumps", "loads"):
        if not callable(getattr(serializer, field)):
            raise PluginResultError(f"{name}: `{field}` must be a function")


def _serializer_table(pm: Any) -> tuple[dict[str, Serializer], dict[str, str]]:
    owners: dict[str, str] = {}
    return hook_table("bryo_mox_serializers", _serializer_entries, pm=pm, owners=owners), owners


# `(format -> Serializer, format -> the name of the plugin that declared it)`
_serializers: PerEpoch[tuple[dict[str, Serializer], dict[str, str]]] = PerEpoch(_serializer_table)


def serializer_plugin(serializer: Serializer) -> str | None:
    """The name of the plugin whose `bryo_mox_serializers` answer holds `serializer`."""
    table, owners = _serializers.get()
    return owners.get(serializer.format) if table.get(serializer.format) is serializer else None


def serializers(formats: Container[str] | None = None) -> dict[str, Serializer]:
    """Registered serializers by format name, after loading the `serializers` plugins
    keyed by `formats` (all of them when None)."""
    pm = get_plugin_manager()
    pm.load_family(SERIALIZERS, formats)
    return _serializers.get(pm)[0]


def serializer_for(format: str | None = None, path: str | None = None) -> Serializer:
    """The serializer named `format`, or the one claiming `path`'s extension.

    Only the serializer plugin keyed by the format (or by a word of the file's
    extensions: `xml` for `model.mox.xml`) is imported first; the others only when that
    one does not answer.
    """
    if format is not None:
        table = serializers({format})
        if format not in table:
            table = serializers()
        if format not in table:
            _check_failed({format}, f"the MoX format {format!r}")
            raise MoxError(
                f"`format` {format!r} has no serializer; installed: "
                f"{', '.join(sorted(table)) or 'none'}. Install bryo-serializer-{format} "
                "or pass one of these."
            )
        return table[format]
    assert path is not None
    name = str(path).lower()
    found = _by_extension(serializers(set(name.split(".")[1:])), name)
    if found is None:
        table = serializers()
        found = _by_extension(table, name)
    if found is None:
        _check_failed(set(name.split(".")[1:]), f"the MoX file {path!s}")
        known: Sequence[str] = sorted(ext for s in table.values() for ext in s.extensions)
        raise MoxError(
            f"`path` {path!s} has no known MoX extension ({', '.join(known) or 'none'}); "
            "pass `format=` explicitly."
        )
    return found


def _check_failed(keys: Container[str], subject: str) -> None:
    """A serializer plugin keyed by one of `keys` failed: say so, rather than that no
    serializer is installed."""
    try:
        get_plugin_manager().check_failed(SERIALIZERS, keys, subject)
    except PluginError as error:
        raise MoxError(str(error)) from error


def _by_extension(table: Mapping[str, Serializer], name: str) -> Serializer | None:
    matches = [(len(ext), s) for s in table.values() for ext in s.extensions if name.endswith(ext)]
    return max(matches, key=lambda m: m[0])[1] if matches else None
