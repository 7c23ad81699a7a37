"""bryo's one plugin system: a lazily created `pluggy.PluginManager("bryo")`.

Packages that own an extension point call `add_hookspecs(their_hookspecs)` when they
are imported. Plugins, bryo's own built-ins included, are found through the `bryo`
entry-point group and registered through the same function, `_load_entry_point`. The
manager is created on first use: entry points are loaded once, then `check_pending()`
makes a misspelt hook fail loudly. Two environment variables steer loading:

- `BRYO_DISABLE_PLUGIN_AUTOLOAD=1` loads only bryo's own distributions' plugins;
- `BRYO_BLOCK_PLUGINS=name,other` skips plugins by entry-point or distribution name.

A plugin that raises on import is reported (a warning, and `plugin_failures()`) with its
name and error; the rest of the stack keeps working. A plugin must not call
`get_plugin_manager()` while it is being imported (the manager is still loading it): that
is reported the same way, as a `PluginError` naming the plugin. See `docs/plugins.md`.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import itertools
import os
import re
import threading
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import pluggy

PROJECT_NAME = "bryo"
ENTRY_POINT_GROUP = "bryo"
AUTOLOAD_ENV = "BRYO_DISABLE_PLUGIN_AUTOLOAD"
BLOCK_ENV = "BRYO_BLOCK_PLUGINS"


def normalize_distribution_name(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): `Bryo_Core.Pytree` -> `bryo-core-pytree`."""  # noqa: E501
    return re.sub(r"[-_.]+", "-", name).lower()


# Distributions of this monorepo. Their plugins are bryo's built-ins: they load even when
# autoload is off (the way pytest keeps its own plugins with autoload disabled).
BUILTIN_DISTRIBUTIONS = frozenset(
    {
        "bryo",
        "bryo-core-pytree",
        "bryo-core-filters",
        "bryo-core-graph",
        "bryo-core-rngs",
        "bryo-core-scan",
        "bryo-mox-ir",
        "bryo-backend-nnx",
        "bryo-backend-equinox",
        "bryo-backend-named",
        "bryo-serializer-xml",
        "bryo-serializer-yson",
    }
)

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class PluginError(RuntimeError):
    """A plugin is misbuilt: it implements a hook no package declares, or it asks for the
    plugin manager while that manager is still loading it."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that raised while being imported or registered."""

    name: str
    distribution: str | None
    error: BaseException

    def __str__(self) -> str:
        source = f" (distribution {self.distribution})" if self.distribution else ""
        return (
            f"bryo plugin {self.name!r}{source} failed to load: "
            f"{type(self.error).__name__}: {self.error}. The rest of bryo keeps working; "
            f"set {BLOCK_ENV}={self.name} to skip it."
        )


# Epochs come from one counter shared by all managers, so an epoch value never repeats:
# a cache keyed on it cannot mistake a fresh manager (a test's) for an older one.
_epochs = itertools.count(1)


class BryoPluginManager(pluggy.PluginManager):
    """A `PluginManager` with an `epoch`, so callers can cache what its hooks return.

    Core packages turn hook results into lookup tables (a type -> handler dict, say) and
    rebuild them only when `epoch` changes, keeping pluggy off their hot paths. The epoch
    changes on every `register`, `unregister` and `add_hookspecs`, and its values are
    unique across all managers of the process.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.epoch = next(_epochs)
        self._spec_sources: list[object] = []
        self.failures: list[PluginFailure] = []
        self.distributions: dict[str, tuple[str, str]] = {}

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


_lock = threading.RLock()
_hookspec_modules: list[ModuleType | type] = []
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

    Called by each owning package on import. The specs are added to every manager alive
    (one may be loading the very plugin whose import declares them) and to every manager
    created afterwards.
    """
    with _lock:
        if module_or_class in _hookspec_modules:
            return
        _hookspec_modules.append(module_or_class)
        for pm in list(_live_managers):
            pm.add_hookspecs(module_or_class)


def _blocked_names() -> frozenset[str]:
    raw = os.environ.get(BLOCK_ENV, "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def _is_blocked(
    entry_point: importlib.metadata.EntryPoint, dist_name: str | None, blocked: frozenset[str]
) -> bool:
    if entry_point.name in blocked:
        return True
    if dist_name is None:
        return False
    return normalize_distribution_name(dist_name) in {
        normalize_distribution_name(name) for name in blocked
    }


def _autoload_enabled() -> bool:
    return os.environ.get(AUTOLOAD_ENV, "").strip().lower() not in {"1", "true", "yes", "on"}


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str, str] | None:
    dist = entry_point.dist
    if dist is None:
        return None
    return dist.metadata["Name"], dist.version


def _record_failure(pm: BryoPluginManager, failure: PluginFailure) -> None:
    pm.failures.append(failure)
    warnings.warn(str(failure), RuntimeWarning, stacklevel=4)


def _load_entry_point(pm: BryoPluginManager, entry_point: importlib.metadata.EntryPoint) -> None:
    """Import one plugin and register it; record, never raise, when it fails."""
    dist = _distribution_of(entry_point)
    dist_name = dist[0] if dist else None
    if pm.is_blocked(entry_point.name):
        return
    if pm.get_plugin(entry_point.name) is not None:
        owner = pm.distributions.get(entry_point.name, ("another plugin",))[0]
        if dist_name != owner:
            conflict = ValueError(
                f"the entry-point name {entry_point.name!r} is already taken by {owner}; "
                f"rename one of the two entry points in group {ENTRY_POINT_GROUP!r}"
            )
            _record_failure(pm, PluginFailure(entry_point.name, dist_name, conflict))
        return
    stack = _loading_stack()
    stack.append(entry_point.name)
    try:
        plugin = entry_point.load()
        pm.register(plugin, name=entry_point.name)
    except Exception as error:  # a broken plugin must not take bryo down with it
        _record_failure(pm, PluginFailure(entry_point.name, dist_name, error))
        return
    finally:
        stack.pop()
    if dist is not None:
        pm.distributions[entry_point.name] = dist


def _check_pending(pm: BryoPluginManager) -> None:
    """Fail loudly, naming plugin and hook, when a plugin implements an undeclared hook."""
    unknown = _unknown_hookimpls(pm)
    if not unknown:
        pm.check_pending()  # anything pluggy finds that we do not, it reports itself
        return
    known = sorted(name for name, caller in vars(pm.hook).items() if _is_declared(caller))
    lines = []
    for plugin_name, hook_name in unknown:
        hint = difflib.get_close_matches(hook_name, known, n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        lines.append(f"plugin {plugin_name!r} implements unknown hook {hook_name!r}{suggestion}")
    raise PluginError(
        f"{'; '.join(lines)}. Known bryo hooks: {', '.join(known) or 'none'}. Fix the hook's "
        "name in the plugin (or import the package that declares it, or mark the "
        f"implementation `@hookimpl(optionalhook=True)`), or skip the plugin with "
        f"{BLOCK_ENV}={','.join(dict.fromkeys(name for name, _ in unknown))}."
    )


def _is_declared(caller: object) -> bool:
    return isinstance(caller, pluggy.HookCaller) and caller.has_spec()


def _unknown_hookimpls(pm: BryoPluginManager) -> list[tuple[str, str]]:
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


def load_plugins(pm: BryoPluginManager) -> BryoPluginManager:
    """Register the installed plugins on `pm`, honouring the environment, then validate.

    Raises:
        PluginError: a loaded plugin implements a hook that no package declares.
    """
    blocked = _blocked_names()
    for name in blocked:
        pm.set_blocked(name)
    autoload = _autoload_enabled()
    for entry_point in _entry_points():
        dist = _distribution_of(entry_point)
        dist_name = dist[0] if dist else None
        if _is_blocked(entry_point, dist_name, blocked):
            continue
        if not autoload and not _is_builtin(dist_name):
            continue
        _load_entry_point(pm, entry_point)
    _check_pending(pm)
    return pm


def _is_builtin(dist_name: str | None) -> bool:
    return dist_name is not None and normalize_distribution_name(dist_name) in BUILTIN_DISTRIBUTIONS


def new_plugin_manager(*, load: bool = True) -> BryoPluginManager:
    """A fresh manager with every declared hookspec, and the installed plugins if `load`.

    Args:
        load: import and register the plugins of the `bryo` entry-point group (honouring
            `BRYO_DISABLE_PLUGIN_AUTOLOAD` and `BRYO_BLOCK_PLUGINS`); `False` gives an
            empty manager that only knows the hookspecs.

    Returns:
        The new manager. It is not bryo's manager until passed to `use_plugin_manager`.
    """
    pm = BryoPluginManager()
    with _lock:
        for spec in _hookspec_modules:
            pm.add_hookspecs(spec)
        _live_managers.add(pm)
    return load_plugins(pm) if load else pm


def get_plugin_manager() -> BryoPluginManager:
    """bryo's plugin manager, created and loaded on first use.

    Raises:
        PluginError: a plugin implements an unknown hook (see `load_plugins`), or a plugin
            module called this function while it was being imported.
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
    """Plugins that failed to load into the current manager."""
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


@dataclass(frozen=True)
class PluginInfo:
    """What `bryo plugins` shows for one registered plugin."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]


def describe_plugins(pm: BryoPluginManager | None = None) -> list[PluginInfo]:
    """Every registered plugin with its distribution, version and implemented hooks."""
    pm = get_plugin_manager() if pm is None else pm
    infos = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        dist = pm.distributions.get(name)
        infos.append(PluginInfo(name, dist[0] if dist else None, dist[1] if dist else None, hooks))
    return infos
