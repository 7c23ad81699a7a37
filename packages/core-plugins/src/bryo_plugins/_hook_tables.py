"""The one way hook answers become lookup tables: one precedence, conflicts warned.

Several hooks answer "which types (or names) does this plugin handle, and how?". Every
table built from them goes through `hook_table`: each plugin's answer is turned into
`(key, value)` entries by the caller's `entries` function (which also validates it: a
plugin whose answer it rejects is disabled, see `_calls`), and the tables are merged with
one rule: **the plugin called first wins** — the same order in which a `firstresult`
hook picks its answer (`tryfirst` implementations, then the most recently registered
plugins, then `trylast` ones). When two plugins claim the same key, a
`PluginConflictWarning` names both and the winner.

Hot paths (flattening a graph, scanning a tree) ask "how does a plugin handle this
type?" once per node. `TypeTable` answers from a dict rebuilt only when a plugin is
registered or unregistered, resolving subclasses along the MRO and memoising the answer.
Every other value made from hook answers is kept in a `PerEpoch`, the one epoch-keyed
cache: it is made again only when the manager's epoch changes (`TypeTable` keeps its
tables in one).
A table tied to a hook family loads the family's plugins keyed by the modules of a type's
MRO the first time it meets that type, so a backend is imported exactly when one of its
types shows up, whatever the import order.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Container, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._calls import Answer, answers, module_roots
from ._failures import PluginConflictWarning, PluginFailure, PluginResultError
from ._manager import BryoPluginManager, get_plugin_manager

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

Entries = Callable[[object], Iterable[tuple[K, V]]]
"""Turns one plugin's answer into `(key, value)` entries, raising `PluginResultError`
when the answer is not what the hook's specification promises."""


def hook_table(
    hook_name: str,
    entries: Entries[K, V],
    *,
    family: str | None = None,
    keys: Container[str] | None = None,
    pm: BryoPluginManager | None = None,
    owners: dict[K, str] | None = None,
) -> dict[K, V]:
    """One dict from every plugin's answer to `hook_name` (a hook taking no arguments).

    Args:
        hook_name: the hook to ask.
        entries: the answer's `(key, value)` pairs, validated (see `Entries`).
        family: load this hook family's pending plugins first.
        keys: with `family`, only the entries of these keys (see `load_family`).
        pm: the manager to ask; bryo's current one by default.
        owners: receives `key -> name of the plugin whose value won`, so that an error
            in a value (a function the plugin supplied) can name its plugin
            (`callback_error`).

    Returns:
        `key -> value`; for a key several plugins claim, the first plugin's value.
    """
    pm = get_plugin_manager() if pm is None else pm

    def validated(answer: object) -> list[tuple[K, V]]:
        return list(entries(answer))

    found = answers(hook_name, validated, family=family, keys=keys, pm=pm)
    return merge_answers(hook_name, found, pm=pm, owners=owners)


def merge_answers(
    hook_name: str,
    found: Iterable[Answer[list[tuple[K, V]]]],
    *,
    pm: BryoPluginManager | None = None,
    owners: dict[K, str] | None = None,
) -> dict[K, V]:
    """Merge plugins' `(key, value)` entries, given in call order: the first plugin to
    claim a key keeps it, and a `PluginConflictWarning` names both plugins.

    `hook_table` does this for hooks that answer with tables; call it directly when the
    entries reach the host another way (the `bryo` command's `Commands` facade). `owners`,
    when given, receives `key -> the winning plugin's name`.
    """
    pm = get_plugin_manager() if pm is None else pm
    table: dict[K, V] = {}
    owners = {} if owners is None else owners
    for answer in found:
        unreachable = _unreachable_types(pm, answer.plugin, [key for key, _ in answer.value])
        if unreachable is not None:
            failure = PluginFailure(
                answer.plugin, pm.distribution_of(answer.plugin), unreachable, hook_name
            )
            pm.disable(answer.plugin, failure)
            continue
        for key, value in answer.value:
            if key not in table:
                table[key], owners[key] = value, answer.plugin
            elif owners[key] != answer.plugin:
                _warn_conflict(pm, hook_name, key, owners[key], answer.plugin)
    return table


def _unreachable_types(
    pm: BryoPluginManager, plugin: str, keys: Iterable[object]
) -> PluginResultError | None:
    """The error for a plugin whose entry-point keys match none of the types it declares.

    A keyed plugin (`bryo.graph.acme`) is loaded when bryo meets a class whose MRO holds a
    class of that top-level module: declaring only types of other modules, it would never
    be loaded when they are met, and nothing would say so.
    """
    groups = pm.entry_groups(plugin)
    plugin_keys = {key for _, key in groups}
    types = [key for key in keys if isinstance(key, type)]
    if not types or not plugin_keys or None in plugin_keys:
        return None
    if any(module_roots(cls) & plugin_keys for cls in types):
        return None
    first = types[0]
    module = first.__module__.partition(".")[0]
    listed = ", ".join(f"bryo.{family}.{key}" for family, key in sorted(groups))
    fixed = ", ".join(sorted({f"bryo.{family}.{module}" for family, _ in groups}))
    return PluginResultError(
        f"its entry points ({listed}) are keyed by modules none of the types it declares "
        f"comes from ({first.__module__}.{first.__qualname__}"
        f"{f' and {len(types) - 1} more' if len(types) > 1 else ''}), so bryo never loads it "
        f"when it meets them. Key it by the top-level module of its classes ({fixed})"
    )


def _warn_conflict(pm: BryoPluginManager, hook: str, key: object, winner: str, loser: str) -> None:
    def named(plugin: str) -> str:
        dist = pm.distribution_of(plugin)
        return f"{plugin!r} ({dist})" if dist else repr(plugin)

    shown = getattr(key, "__qualname__", None) or repr(key)
    pm.warn_once(
        (hook, key, winner, loser),
        f"bryo plugins {named(winner)} and {named(loser)} both answer `{hook}` for {shown}; "
        f"{winner!r} wins (it is called first). Remove the entry from one plugin, or block "
        "one with BRYO_BLOCK_PLUGINS.",
        PluginConflictWarning,
    )


def type_mapping(check: Callable[[object], bool], expected: str) -> Entries[type, V]:
    """`Entries` for hooks answering `Mapping[type, value]`, each value passing `check`.

    Args:
        check: whether one value is acceptable.
        expected: what a value should be, for the error (`"a callable"`).
    """

    def entries(answer: object) -> list[tuple[type, V]]:
        if not isinstance(answer, Mapping):
            raise PluginResultError(
                f"expected a mapping of types to {expected}, got {type(answer).__name__}"
            )
        for key, value in answer.items():
            if not isinstance(key, type):
                raise PluginResultError(f"expected types as keys, got {key!r}")
            if not check(value):
                raise PluginResultError(
                    f"expected {expected} for {key.__qualname__}, got {value!r}"
                )
        return list(answer.items())

    return entries


@dataclass(frozen=True, slots=True)
class Stamped(Generic[T]):
    """A value and the plugin-manager epoch it was made for (epochs never repeat).

    Attributes:
        epoch: the manager's `epoch` when the value was made (`TypeTable.epoch`).
        value: what was made.
    """

    epoch: int | None
    value: T


class PerEpoch(Generic[T]):
    """A value made from the plugin manager's hooks, made again only when its epoch changes.

    The one epoch-keyed cache of bryo: hook tables, lists of interceptors and per-type
    memos live in one, so pluggy is asked once per registration change. The value and its
    epoch are swapped in as one `Stamped` record, so threads never see a value with the
    wrong epoch (two threads may both make it once; the last one is kept).

    Args:
        make: `pm -> value`; may load plugins (then it is made once more, with them).

    >>> memo = PerEpoch(lambda pm: {})
    >>> memo.get() is memo.get()
    True
    """

    __slots__ = ("__weakref__", "_make", "_stamped")

    def __init__(self, make: Callable[[BryoPluginManager], T]) -> None:
        self._make = make
        self._stamped: Stamped[T] | None = None
        _caches.add(self)

    @property
    def epoch(self) -> int | None:
        """The epoch the current value was made for; None before the first `get`."""
        stamped = self._stamped
        return None if stamped is None else stamped.epoch

    def get(self, pm: BryoPluginManager | None = None) -> T:
        """The value for `pm` (bryo's current manager by default), made if its epoch changed."""
        pm = get_plugin_manager() if pm is None else pm
        stamped = self._stamped
        if stamped is None or stamped.epoch != pm.epoch:
            epoch = pm.epoch
            value = self._make(pm)
            if pm.epoch != epoch:  # `make` loaded plugins, or another thread registered one
                epoch = pm.epoch
                value = self._make(pm)
            # Stamped with the epoch read *before* making it: a plugin registered meanwhile
            # (by another thread) makes the next `get` make it again, never keeps it stale.
            stamped = Stamped(epoch, value)
            self._stamped = stamped
        return stamped.value

    def reset(self) -> None:
        """Forget the value: the next `get` makes it again."""
        self._stamped = None

    def __repr__(self) -> str:
        make = getattr(self._make, "__qualname__", None) or repr(self._make)
        return f"PerEpoch({make})"


_caches: weakref.WeakSet[PerEpoch] = weakref.WeakSet()


def refresh_caches(pm: BryoPluginManager | None = None) -> None:
    """Make every live `PerEpoch` value (every `TypeTable` included) for `pm`: each hook
    they are made from is asked, and each answer checked where its owner reads it."""
    pm = get_plugin_manager() if pm is None else pm
    for cache in list(_caches):
        try:
            cache.get(pm)
        except Exception as error:  # the host's bug, not a plugin's: say so, check the rest
            warnings.warn(
                f"bryo could not make {cache!r} from the hooks' answers: "
                f"{type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )


@dataclass(frozen=True, slots=True)
class _Tables(Generic[V]):
    """A `TypeTable`'s contents for one epoch."""

    declared: dict[type, V]
    resolved: dict[type, V | None]


class TypeTable(Generic[V]):
    """`type -> V` built by `collect(pm)` from the current plugin manager's hooks.

    Args:
        collect: builds the `{type: value}` table, usually with `hook_table`.
        family: the hook family whose plugins may declare types for this table; a type
            met for the first time loads that family's plugins keyed by its MRO's modules.

    >>> table = TypeTable(
    ...     lambda pm: hook_table("bryo_scan_named_leaves", entries, pm=pm), family="scan"
    ... )
    >>> table.lookup(NamedArray)  # doctest: +SKIP
    """

    def __init__(
        self, collect: Callable[[BryoPluginManager], Mapping[type, V]], *, family: str | None = None
    ) -> None:
        self._collect = collect
        self._family = family
        self._tables: PerEpoch[_Tables[V]] = PerEpoch(self._make)

    def _make(self, pm: BryoPluginManager) -> _Tables[V]:
        if self._family is not None:  # the family's unkeyed plugins load on first use
            pm.load_family(self._family, ())
        declared = dict(self._collect(pm))
        return _Tables(declared, dict(declared))

    @property
    def epoch(self) -> int | None:
        """The plugin-manager epoch the table was built for (epochs never repeat)."""
        return self._tables.epoch

    def refresh(self) -> BryoPluginManager:
        """Rebuild the table if the plugins changed; returns the current manager."""
        pm = get_plugin_manager()
        self._tables.get(pm)
        return pm

    def lookup(self, cls: type) -> V | None:
        """The value for `cls` or its nearest declared base class, else None.

        Raises:
            PluginError: no plugin declares `cls`, and a plugin of the table's family keyed
                by a module of `cls`'s MRO failed (to load, or in a hook): the plugin
                that would have known `cls` is broken, and going on without it would
                treat a model as a plain value.
        """
        pm = get_plugin_manager()
        tables = self._tables.get(pm)
        try:
            return tables.resolved[cls]
        except KeyError:
            pass
        if self._family is not None:
            pm.load_family(self._family, module_roots(cls))
            # Plugins registered since `tables` was made (by this load, or by another
            # thread's, which `load_family` waited for) are in the table made now.
            tables = self._tables.get(pm)
        declared = tables.declared
        found = next((declared[b] for b in cls.__mro__ if b in declared), None)
        if found is None and self._family is not None:  # never cached: raises every time
            pm.check_failed(self._family, module_roots(cls) - {"builtins"}, _class_name(cls))
        tables.resolved[cls] = found
        return found

    def types(self) -> tuple[type, ...]:
        """The types the plugins declared, those of every imported module's plugins included."""
        pm = get_plugin_manager()
        if self._family is not None:
            pm.load_family(self._family, sys.modules)
        return tuple(self._tables.get(pm).declared)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
