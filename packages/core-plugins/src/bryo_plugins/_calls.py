"""Calling a hook one plugin at a time, so that no plugin can break the core.

Core packages never call `pm.hook.*` themselves: their small typed functions go through
`answers` (every plugin's answer) or `first_answer` (the first plugin that answers). Each
implementation is called on its own, in pluggy's call order (`tryfirst` ones, then the
most recently registered, then `trylast` ones); its result is checked by the caller's
`validate` where it is read. A plugin that raises, or whose answer `validate` rejects, is
named with its distribution, disabled for the rest of the process (of its manager), and
listed by `plugin_failures()`; the other plugins still answer. Hook wrappers are not
called: bryo hooks are answered by plain implementations only.
"""

from __future__ import annotations

import reprlib
import sys
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Generic, TypeVar

import pluggy

from ._failures import PluginFailure, PluginResultError
from ._manager import BryoPluginManager, get_plugin_manager

T = TypeVar("T")

Validate = Callable[[object], T]
"""Checks one plugin's (non-None) answer and returns it, possibly normalised; raises
`PluginResultError` (or any exception) naming what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """One plugin's validated answer to a hook."""

    plugin: str
    value: T


@dataclass(frozen=True, slots=True)
class PerPlugin:
    """A hook argument made for each plugin: that plugin receives `make(plugin_name)`.

    Lets the host know which plugin did what through an argument (the `bryo` command
    hands each plugin its own `Commands` facade, so it can name both plugins of a
    conflict).
    """

    make: Callable[[str], object]


def answers(
    hook_name: str,
    validate: Validate[T],
    *,
    family: str | None = None,
    keys: Container[str] | None = None,
    pm: BryoPluginManager | None = None,
    **kwargs: object,
) -> list[Answer[T]]:
    """Every plugin's answer to `hook_name`, in call order; None answers are left out.

    Args:
        hook_name: the hook (`"bryo_graph_node_types"`).
        validate: checks each answer (see `Validate`).
        family: load this hook family's pending plugins first (see
            `BryoPluginManager.load_family`); None loads nothing.
        keys: with `family`, load only the entries of these keys (and unkeyed ones).
        pm: the manager to ask; bryo's current one by default.
        **kwargs: the hook's arguments, by name.
    """
    pm = get_plugin_manager() if pm is None else pm
    if family is not None:
        pm.load_family(family, keys)
    found = []
    for impl in call_order(pm, hook_name):
        answer = ask(pm, impl, hook_name, validate, kwargs)
        if answer is not None:
            found.append(answer)
    return found


def first_answer(
    hook_name: str,
    validate: Validate[T],
    *,
    family: str | None = None,
    keys: Container[str] | None = None,
    pm: BryoPluginManager | None = None,
    **kwargs: object,
) -> Answer[T] | None:
    """The first plugin's non-None answer to `hook_name` (in call order), or None.

    When `family` is given and no loaded plugin answers, the family's plugins keyed by
    modules already imported are loaded and asked next, and the rest of the family last:
    a key narrows what is imported first, never what can answer. A plugin keyed by a
    module nobody imported cannot know a live object, so the library it wraps (Haliax,
    Flax) is not imported to resolve a plain name such as the axis `'Time'` while another
    plugin can.
    """
    pm = get_plugin_manager() if pm is None else pm
    if family is not None:
        pm.load_family(family, keys)
    answer = _first(pm, hook_name, validate, kwargs)
    if family is not None:
        for wider in (sys.modules, None):
            if answer is not None:
                break
            if pm.load_family(family, wider):
                answer = _first(pm, hook_name, validate, kwargs)
    return answer


def first_answer_for(
    hook_name: str,
    validate: Validate[T],
    *,
    family: str,
    pm: BryoPluginManager | None = None,
    **kwargs: object,
) -> T | None:
    """The first plugin's validated answer about the hook's arguments, or None.

    `first_answer` for hooks asked about one kind of value (a filter literal, an axis
    spec): the `family` plugins keyed by the modules of the arguments' classes load first
    (see `module_roots`), the rest of the family only when none of those answers.

    Args:
        hook_name: the hook (`"bryo_filter_predicate"`).
        validate: checks each answer (see `Validate`).
        family: the hook family whose plugins may answer.
        pm: the manager to ask; bryo's current one by default.
        **kwargs: the hook's arguments, by name.

    Raises:
        PluginError: no plugin answered, and a plugin of `family` keyed by a module of an
            argument's class failed (to load, or in a hook): the one that would have
            answered is broken (`BryoPluginManager.check_failed`).
    """
    answer = first_answer_about(hook_name, validate, family=family, pm=pm, **kwargs)
    return None if answer is None else answer.value


def first_answer_about(
    hook_name: str,
    validate: Validate[T],
    *,
    family: str,
    pm: BryoPluginManager | None = None,
    **kwargs: object,
) -> Answer[T] | None:
    """`first_answer_for`, with the name of the plugin that answered (`Answer.plugin`):
    for a host that names it when what the plugin answered fails later
    (`callback_error`)."""
    keys = frozenset().union(*(module_roots(type(value)) for value in kwargs.values()))
    answer = first_answer(hook_name, validate, family=family, keys=keys, pm=pm, **kwargs)
    if answer is None:
        subject = ", ".join(f"`{name}` {reprlib.repr(value)}" for name, value in kwargs.items())
        (pm or get_plugin_manager()).check_failed(family, keys - {"builtins"}, subject)
    return answer


def callable_answer(expected: str) -> Validate[Callable[..., object]]:
    """A `Validate` accepting callables only; `expected` says which, for the error
    (`"a predicate (path, value) -> bool"`)."""

    def validate(answer: object) -> Callable[..., object]:
        if not callable(answer):
            raise PluginResultError(f"expected {expected}, got {answer!r}")
        return answer

    return validate


def module_roots(cls: type) -> frozenset[str]:
    """The top-level modules of every class in `cls`'s MRO: the keys of the plugins that
    could know `cls` (`equinox` for any `eqx.Module` subclass)."""
    return frozenset(
        (getattr(base, "__module__", None) or "").partition(".")[0] for base in cls.__mro__
    )


def _first(
    pm: BryoPluginManager, hook_name: str, validate: Validate[T], kwargs: dict[str, object]
) -> Answer[T] | None:
    for impl in call_order(pm, hook_name):
        answer = ask(pm, impl, hook_name, validate, kwargs)
        if answer is not None:
            return answer
    return None


def call_order(pm: BryoPluginManager, hook_name: str) -> list[pluggy.HookImpl]:
    caller = getattr(pm.hook, hook_name, None)
    if not isinstance(caller, pluggy.HookCaller):
        return []
    impls = caller.get_hookimpls()  # pluggy calls them last to first
    return [impl for impl in reversed(impls) if not (impl.wrapper or impl.hookwrapper)]


def _argument(value: object, plugin: str) -> object:
    return value.make(plugin) if isinstance(value, PerPlugin) else value


def ask(
    pm: BryoPluginManager,
    impl: pluggy.HookImpl,
    hook_name: str,
    validate: Validate[T],
    kwargs: dict[str, object],
) -> Answer[T] | None:
    """One plugin's validated answer; None if it passed, or failed (then it is disabled)."""
    try:
        arguments = [_argument(kwargs[name], impl.plugin_name) for name in impl.argnames]
        value = impl.function(*arguments)
        if value is None:
            return None
        return Answer(impl.plugin_name, validate(value))
    except BaseException as error:  # the plugin's bug must not become the core's,
        if isinstance(error, KeyboardInterrupt):  # not even a `sys.exit()` in a hook
            raise
        name = impl.plugin_name
        pm.disable(name, PluginFailure(name, pm.distribution_of(name), error, hook_name))
        return None
