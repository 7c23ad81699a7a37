"""bryo's one plugin manager: created lazily, extended by each owning package, loading
entry points per hook family.

Packages that own an extension point call `add_hookspecs(their_hookspecs)` when they
are imported, and register their own default behaviour with `add_builtin(plugin, ...)`:
built-ins never go through packaging metadata, so the core works with every entry point
blocked, or from a tree without `*.dist-info` at all. Both reach every live manager and
every manager created later.

Entry points (see `_entry_points`) are read when a manager is created. Those of the plain
`bryo` group are loaded then; those of `bryo.<family>[.<key>]` groups wait until core code
asks for their family (`BryoPluginManager.load_family`; threads asking at once wait for
the one loading). A plugin that fails to import (raising anything but `KeyboardInterrupt`,
`SystemExit` included), or implements a hook no package declares (a misspelt hook would
otherwise be silently never called), is recorded as a `PluginFailure`, warned about and
left out; the rest keeps working. A plugin must not call `get_plugin_manager()` while the
manager is being created (it is still loading that plugin): that is reported the same way,
as a `PluginError` naming the plugin. See `docs/plugins.md`.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import sys
import threading
import warnings
import weakref
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import NamedTuple

import pluggy

from ._entry_points import PluginEntry, blocked_names, discover
from ._failures import PluginError, PluginFailure
from ._markers import BLOCK_ENV, ENTRY_POINT_GROUP, PROJECT_NAME


class PluginSource(NamedTuple):
    """Where a registered plugin comes from.

    Attributes:
        distribution: the distribution that ships it (None for one registered by hand).
        version: that distribution's version, when known.
        builtin: registered directly by its owning package, not through an entry point.
    """

    distribution: str | None
    version: str | None = None
    builtin: bool = False


class _Builtin(NamedTuple):
    plugin: object
    name: str
    distribution: str


# Epochs come from one counter shared by all managers, so an epoch value never repeats:
# a cache keyed on it cannot mistake a fresh manager (a test's) for an older one.
_epochs = itertools.count(1)


class BryoPluginManager(pluggy.PluginManager):
    """A `PluginManager` with an `epoch`, lazy per-family loading and failure records.

    Core packages turn hook results into lookup tables and rebuild them only when `epoch`
    changes, keeping pluggy off their hot paths. The epoch changes on every `register`,
    `unregister` and `add_hookspecs`, and its values are unique across all managers.

    Attributes:
        epoch: changes whenever what the hooks answer may change.
        failures: the plugins that failed to load, raised in a hook, or answered one
            with garbage, in the order they failed.
        sources: plugin name -> `PluginSource`.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.epoch = next(_epochs)
        self.failures: list[PluginFailure] = []
        self.sources: dict[str, PluginSource] = {}
        self._spec_sources: list[object] = []
        self._values: dict[str, str] = {}
        # Entries wait here until loaded (or failed): a thread that finds its family empty
        # knows no other thread is still importing one of them.
        self._pending: dict[str | None, list[PluginEntry]] = {}
        self._importing: set[int] = set()
        self._groups: dict[str, set[tuple[str | None, str | None]]] = {}
        self._warned: set[object] = set()

    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        self.epoch = next(_epochs)
        return registered

    def unregister(self, plugin: object = None, name: str | None = None) -> object:
        removed = super().unregister(plugin, name)
        self.epoch = next(_epochs)
        return removed

    def add_hookspecs(self, module_or_class: ModuleType | type) -> None:
        """Add `module_or_class`'s hookspecs; adding the same one again does nothing."""
        if any(source is module_or_class for source in self._spec_sources):
            return
        super().add_hookspecs(module_or_class)
        self._spec_sources.append(module_or_class)
        self.epoch = next(_epochs)

    # --- what a plugin is and what went wrong with it ----------------------------------

    def distribution_of(self, name: str) -> str | None:
        """The distribution that ships plugin `name`, when known."""
        source = self.sources.get(name)
        return source.distribution if source else None

    def record_failure(self, failure: PluginFailure) -> None:
        """Report `failure`: a `RuntimeWarning`, and an entry in `failures`."""
        self.failures.append(failure)
        warnings.warn(str(failure), RuntimeWarning, stacklevel=4)

    def disable(self, name: str, failure: PluginFailure) -> None:
        """Record `failure` and unregister plugin `name` for good (in this manager)."""
        self.record_failure(failure)
        self.set_blocked(name)

    def failures_for(self, family: str, keys: Container[str]) -> list[PluginFailure]:
        """The failures of the plugins bryo loads for `family` and one of `keys` (an entry
        point in group `bryo.<family>.<key>`) that are not registered now: the plugins
        that should have answered for these keys and cannot."""
        return [
            failure
            for failure in self.failures
            if self.get_plugin(failure.name) is None
            and self.keyed_groups(failure.name, family, keys)
        ]

    def keyed_groups(self, name: str, family: str, keys: Container[str]) -> list[str]:
        """The entry-point groups `bryo.<family>.<key>` of plugin `name` with a key in `keys`."""
        return sorted(
            f"{ENTRY_POINT_GROUP}.{f}.{k}"
            for f, k in self.entry_groups(name)
            if f == family and k is not None and k in keys
        )

    def check_failed(self, family: str, keys: Container[str], subject: str) -> None:
        """Refuse to go on without a plugin that should have answered for `subject`.

        Core code calls this when no plugin answered for `subject` (a class, a format),
        so that a broken plugin is named where its absence matters instead of `subject`
        being handled as if no plugin were installed (a model taken for a leaf).

        Args:
            family: the hook family asked.
            keys: the keys of the plugins that could have answered (`module_roots(cls)`).
            subject: what was asked about, for the message (`torchish.MLP`).

        Raises:
            PluginError: a plugin keyed by one of `keys` in `family` failed; the message
                names it, its distribution, its entry point group and its error.
        """
        failed = self.failures_for(family, keys)
        if failed:
            raise PluginError(_unavailable_message(self, family, keys, subject, failed))

    def warn_once(self, key: object, message: str, category: type[Warning]) -> None:
        """Issue `message` once per manager for `key` (tables are rebuilt per epoch)."""
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(message, category, stacklevel=4)

    # --- entry points -------------------------------------------------------------------

    def add_entries(self, entries: Iterable[PluginEntry]) -> None:
        """Make `entries` loadable: the `bryo` group's now, the families' when asked for."""
        for entry in entries:
            self._pending.setdefault(entry.family, []).append(entry)
            self._groups.setdefault(entry.name, set()).add((entry.family, entry.key))

    def entry_groups(self, name: str) -> frozenset[tuple[str | None, str | None]]:
        """`(family, key)` of every entry point of plugin `name` (empty for a plugin not
        loaded through entry points); `(None, None)` is the plain `bryo` group."""
        return frozenset(self._groups.get(name, ()))

    def pending_entries(self) -> list[PluginEntry]:
        """The entry points not loaded yet (their family was not needed so far)."""
        return [entry for entries in self._pending.values() for entry in entries]

    def load_family(self, family: str | None, keys: Container[str] | None = None) -> bool:
        """Load the not-yet-loaded plugins of `family`.

        Args:
            family: the hook family (`"graph"`, `"serializers"`, ...); None loads the plain
                `bryo` group.
            keys: load only the family's keyed entries whose key is in `keys` (any
                container: a set of module names, `sys.modules`), plus its unkeyed ones;
                None loads them all.

        Returns:
            Whether a plugin was registered (hook answers may have changed).

        A plugin that raises anything but `KeyboardInterrupt` while being imported
        (`SystemExit` included), or that implements a hook no package declares, is
        recorded as a `PluginFailure` and left out; the others load.
        """
        if not self._pending.get(family):
            return False  # entries leave `_pending` only once loaded: nothing is in flight
        with _lock:  # another thread loading this family: wait for it, then load the rest
            pending = self._pending.get(family, [])
            chosen = [
                entry
                for entry in pending
                if (entry.key is None or keys is None or entry.key in keys)
                and id(entry) not in self._importing  # this thread is importing it
            ]
            self._importing.update(id(entry) for entry in chosen)
            try:
                loaded = [entry for entry in chosen if self._load(entry)]
            finally:
                self._importing.difference_update(id(entry) for entry in chosen)
                for entry in chosen:
                    pending.remove(entry)
            self._check_loaded(loaded)
        return bool(loaded)

    def load_all(self) -> bool:
        """Load every pending plugin of every family (what `bryo plugins` shows)."""
        return any([self.load_family(family) for family in list(self._pending)])

    def _load(self, entry: PluginEntry) -> bool:
        """Import one plugin and register it; record, never raise, when it fails."""
        if self.is_blocked(entry.name):
            return False
        if self.get_plugin(entry.name) is not None:
            self._check_same_plugin(entry)
            return False
        stack = _loading_stack()
        stack.append(entry.name)
        try:
            plugin = entry.load()
            self.register(plugin, name=entry.name)
        except BaseException as error:  # a broken plugin must not take bryo down with it,
            if isinstance(error, KeyboardInterrupt):  # not even by `sys.exit()` at import
                raise
            self.record_failure(PluginFailure(entry.name, entry.distribution, error))
            return False
        finally:
            stack.pop()
        self.sources[entry.name] = PluginSource(entry.distribution, entry.version)
        self._values[entry.name] = entry.value
        return True

    def _check_same_plugin(self, entry: PluginEntry) -> None:
        """A name seen again: the same plugin in another group, or a clash to report."""
        owner = self.distribution_of(entry.name)
        if owner == entry.distribution and self._values.get(entry.name) == entry.value:
            return
        taken_by = owner or "a plugin registered by hand"
        conflict = ValueError(
            f"the plugin name {entry.name!r} is already taken by {taken_by}; rename one of "
            f"the two entry points of the {ENTRY_POINT_GROUP!r} groups"
        )
        self.record_failure(PluginFailure(entry.name, entry.distribution, conflict))

    def _check_loaded(self, loaded: list[PluginEntry]) -> None:
        """Disable, naming it, every plugin just loaded that implements an undeclared hook:
        it would otherwise never be called, and nothing would say so."""
        names = {entry.name for entry in loaded}
        unknown: dict[str, list[tuple[str, str]]] = {}
        for name, hook in unknown_hookimpls(self):
            if name in names:
                unknown.setdefault(name, []).append((name, hook))
        for name, hooks in unknown.items():
            error = unknown_hooks_error(self, hooks)
            self.disable(name, PluginFailure(name, self.distribution_of(name), error))


def _unavailable_message(
    pm: BryoPluginManager,
    family: str,
    keys: Container[str],
    subject: str,
    failed: list[PluginFailure],
) -> str:
    """Why no `family` plugin answered for `subject`: each failed plugin that should have."""
    parts = []
    for failure in failed:
        groups = pm.keyed_groups(failure.name, family, keys)
        source = f"distribution {failure.distribution}, " if failure.distribution else ""
        where = f" in hook `{failure.hook}`" if failure.hook else " to load"
        error = f"{type(failure.error).__name__}: {failure.error}"
        parts.append(
            f"plugin {failure.name!r} ({source}entry point group {', '.join(groups)}) "
            f"failed{where}: {error.rstrip('.')}"
        )
    names = ",".join(dict.fromkeys(failure.name for failure in failed))
    return (
        f"bryo cannot handle {subject}: the `{family}` plugin installed for it failed. "
        f"{'; '.join(parts)}. Fix or "
        "reinstall that plugin (`bryo plugins --strict` lists every failure), or set "
        f"{BLOCK_ENV}={names} to go on without it."
    )


def unknown_hookimpls(pm: pluggy.PluginManager) -> list[tuple[str, str]]:
    """(plugin name, hook name) for every required implementation of an undeclared hook."""
    unknown = []
    for hook_name, caller in vars(pm.hook).items():
        if hook_name.startswith("_") or not isinstance(caller, pluggy.HookCaller):
            continue
        if caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                unknown.append((impl.plugin_name, hook_name))
    return unknown


def unknown_hooks_error(pm: pluggy.PluginManager, unknown: list[tuple[str, str]]) -> PluginError:
    """The loud error for misspelt hooks: plugin, hook, the closest known hook, the fix."""
    known = sorted(name for name, caller in vars(pm.hook).items() if _is_declared(caller))
    lines = []
    for plugin_name, hook_name in unknown:
        hint = difflib.get_close_matches(hook_name, known, n=1)
        owner = None if hint else _unimported_owner(hook_name)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        if owner is not None:
            suggestion = (
                f" (its package looks like `{owner}`, installed but not imported when the "
                f"plugin loaded: add `import {owner}` to the plugin module, or mark the "
                "implementation `@hookimpl(optionalhook=True)` if that package is optional)"
            )
        lines.append(f"plugin {plugin_name!r} implements unknown hook {hook_name!r}{suggestion}")
    return PluginError(
        f"{'; '.join(lines)}. Known bryo hooks: {', '.join(known) or 'none'}. Fix the hook's "
        "name in the plugin (or import the package that declares it, or mark the "
        f"implementation `@hookimpl(optionalhook=True)`), or skip the plugin with "
        f"{BLOCK_ENV}={','.join(dict.fromkeys(name for name, _ in unknown))}."
    )


def _unimported_owner(hook_name: str) -> str | None:
    """The bryo package a hook's name points at (`bryo_scan` for `bryo_scan_*`, `bryo_filters`
    for `bryo_filter_*`) when it is installed but not imported, so its hooks are unknown."""
    words = hook_name.split("_")
    if len(words) < 3 or words[0] != PROJECT_NAME:
        return None
    for package in (f"{PROJECT_NAME}_{words[1]}", f"{PROJECT_NAME}_{words[1]}s"):
        if package in sys.modules:
            continue
        try:
            if importlib.util.find_spec(package) is not None:
                return package
        except (ImportError, ValueError):
            continue
    return None


def check_pending(pm: pluggy.PluginManager) -> None:
    """Fail loudly, naming plugin and hook, when a plugin implements an undeclared hook.

    Raises:
        PluginError: some registered plugin implements a hook no package declares.
    """
    unknown = unknown_hookimpls(pm)
    if unknown:
        raise unknown_hooks_error(pm, unknown)
    pm.check_pending()  # anything pluggy finds that we do not, it reports itself


def _is_declared(caller: object) -> bool:
    return isinstance(caller, pluggy.HookCaller) and caller.has_spec()


_lock = threading.RLock()
_hookspec_modules: list[ModuleType | type] = []
_builtins: list[_Builtin] = []
_live_managers: weakref.WeakSet[BryoPluginManager] = weakref.WeakSet()
_manager: BryoPluginManager | None = None
# Names of the entry points this thread is importing right now (innermost last): a plugin
# that calls `get_plugin_manager()` at import time would otherwise start a second load.
_loading = threading.local()


def _loading_stack() -> list[str]:
    stack = getattr(_loading, "stack", None)
    if stack is None:
        stack = _loading.stack = []
    return stack


def add_hookspecs(module_or_class: ModuleType | type) -> None:
    """Declare an extension point: add `module_or_class`'s `bryo_*` hookspecs.

    Called by each owning package on import, before `add_builtin`. The specs are added to
    every manager alive (one may be loading the very plugin whose import declares them)
    and to every manager created afterwards.
    """
    with _lock:
        if module_or_class in _hookspec_modules:
            return
        _hookspec_modules.append(module_or_class)
        for pm in list(_live_managers):
            pm.add_hookspecs(module_or_class)


def add_builtin(plugin: object, name: str, distribution: str) -> None:
    """Register an owning package's own default behaviour, as tox and pytest do theirs.

    Called by the package on import, right after `add_hookspecs`. The plugin is
    registered on every live manager and every manager created afterwards, without any
    packaging metadata; `BRYO_BLOCK_PLUGINS` can still block it by `name`.

    Args:
        plugin: the module (or object) holding the package's `@hookimpl` functions.
        name: the plugin's name in bryo (`core-graph`).
        distribution: the owning distribution (`bryo-core-graph`), for reports.
    """
    builtin = _Builtin(plugin, name, distribution)
    with _lock:
        if any(existing.plugin is plugin for existing in _builtins):
            return
        _builtins.append(builtin)
        for pm in list(_live_managers):
            _register_builtin(pm, builtin)


def _register_builtin(pm: BryoPluginManager, builtin: _Builtin) -> None:
    if pm.is_blocked(builtin.name) or pm.get_plugin(builtin.name) is not None:
        return
    pm.register(builtin.plugin, name=builtin.name)
    pm.sources[builtin.name] = PluginSource(builtin.distribution, None, builtin=True)


def new_plugin_manager(*, load: bool = True, builtins: bool = True) -> BryoPluginManager:
    """A fresh manager with every declared hookspec.

    Args:
        load: read the `bryo` entry-point groups (honouring `BRYO_DISABLE_PLUGIN_AUTOLOAD`
            and `BRYO_BLOCK_PLUGINS`): the plain group's plugins are loaded now, the
            families' when first needed. False: no entry point at all.
        builtins: register the built-in plugins of every imported bryo package.

    Returns:
        The new manager. It is not bryo's manager until passed to `use_plugin_manager`.
        Plugins that failed to load are in its `failures`.
    """
    pm = BryoPluginManager()
    for name in blocked_names():
        pm.set_blocked(name)
    with _lock:
        for spec in _hookspec_modules:
            pm.add_hookspecs(spec)
        if builtins:
            for builtin in _builtins:
                _register_builtin(pm, builtin)
        _live_managers.add(pm)
    if load:
        pm.add_entries(discover())
        pm.load_family(None)
    return pm


def get_plugin_manager() -> BryoPluginManager:
    """bryo's plugin manager, created on first use.

    Raises:
        PluginError: a plugin module called this function while the manager was loading
            it (the loading plugin is then recorded as failed).
    """
    global _manager
    manager = _manager
    if manager is not None:
        return manager
    stack = _loading_stack()
    if stack:
        raise PluginError(
            f"plugin {stack[-1]!r} called `get_plugin_manager()` while it was being imported, "
            "before bryo finished loading its plugins. Call `get_plugin_manager()` inside "
            "your functions (at call time), never at module level."
        )
    with _lock:
        if _manager is None:
            _manager = new_plugin_manager()
        return _manager


def plugin_failures() -> list[PluginFailure]:
    """Plugins that failed to load, raised in a hook or returned garbage, in bryo's manager."""
    return list(get_plugin_manager().failures)


@contextmanager
def use_plugin_manager(pm: BryoPluginManager) -> Iterator[BryoPluginManager]:
    """Make `pm` bryo's manager inside the block; the previous one comes back after."""
    global _manager
    with _lock:
        previous, _manager = _manager, pm
    try:
        yield pm
    finally:
        with _lock:
            _manager = previous


def hookspec_sources() -> tuple[ModuleType | type, ...]:
    """Every hookspec module (or class) declared so far, in declaration order."""
    with _lock:
        return tuple(_hookspec_modules)
