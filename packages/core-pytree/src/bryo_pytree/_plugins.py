"""bryo's one plugin system: a lazily created `pluggy.PluginManager("bryo")`.

Packages that own an extension point call `add_hookspecs(their_hookspecs)` when they
are imported. Plugins, bryo's own built-ins included, are found through the `bryo`
entry-point group and registered through the same function, `_load_entry_point`. The
manager is created on first use: entry points are loaded once, then `check_pending()`
makes a misspelt hook fail loudly. Two environment variables steer loading:

- `BRYO_DISABLE_PLUGIN_AUTOLOAD=1` loads only bryo's own distributions' plugins;
- `BRYO_BLOCK_PLUGINS=name,other` skips plugins by entry-point or distribution name.

A plugin that raises on import is reported (a warning, and `plugin_failures()`) with its
name and error; the rest of the stack keeps working.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
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
    """A plugin could not be validated: it implements a hook no package declares."""


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


class BryoPluginManager(pluggy.PluginManager):
    """A `PluginManager` that counts its registrations, so callers can cache hook results.

    Core packages turn hook results into lookup tables (a type -> handler dict, say) and
    rebuild them only when `epoch` changes, keeping pluggy off their hot paths.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.epoch = 0
        self.failures: list[PluginFailure] = []
        self.distributions: dict[str, tuple[str, str]] = {}

    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        self.epoch += 1
        return registered

    def unregister(self, plugin: object = None, name: str | None = None) -> object:
        removed = super().unregister(plugin, name)
        self.epoch += 1
        return removed


_lock = threading.RLock()
_hookspec_modules: list[ModuleType | type] = []
_live_managers: weakref.WeakSet[BryoPluginManager] = weakref.WeakSet()
_manager: BryoPluginManager | None = None


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


def _autoload_enabled() -> bool:
    return os.environ.get(AUTOLOAD_ENV, "").strip().lower() not in {"1", "true", "yes", "on"}


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name
    )


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str, str] | None:
    dist = entry_point.dist
    if dist is None:
        return None
    return dist.metadata["Name"], dist.version


def _load_entry_point(pm: BryoPluginManager, entry_point: importlib.metadata.EntryPoint) -> None:
    """Import one plugin and register it; record, never raise, when it fails."""
    dist = _distribution_of(entry_point)
    dist_name = dist[0] if dist else None
    if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
        return
    try:
        plugin = entry_point.load()
        pm.register(plugin, name=entry_point.name)
    except Exception as error:  # a broken plugin must not take bryo down with it
        failure = PluginFailure(entry_point.name, dist_name, error)
        pm.failures.append(failure)
        warnings.warn(str(failure), RuntimeWarning, stacklevel=3)
        return
    if dist is not None:
        pm.distributions[entry_point.name] = dist


def _check_pending(pm: BryoPluginManager) -> None:
    """Fail loudly, naming plugin and hook, when a plugin implements an undeclared hook."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as error:
        known = sorted(
            name for name in dir(pm.hook) if name.startswith("bryo_") and _has_spec(pm, name)
        )
        hook_name = _unknown_hook_name(pm)
        hint = difflib.get_close_matches(hook_name or "", known, n=1)
        suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
        raise PluginError(
            f"{error}. Known bryo hooks: {', '.join(known) or 'none'}.{suggestion} "
            "Fix the hook's name in the plugin, or block the plugin with "
            f"{BLOCK_ENV}=<name>."
        ) from error


def _has_spec(pm: BryoPluginManager, name: str) -> bool:
    return getattr(pm.hook, name).spec is not None


def _unknown_hook_name(pm: BryoPluginManager) -> str | None:
    for name in dir(pm.hook):
        caller = getattr(pm.hook, name)
        if isinstance(caller, pluggy.HookCaller) and caller.spec is None:
            if any(not impl.optionalhook for impl in caller.get_hookimpls()):
                return name
    return None


def load_plugins(pm: BryoPluginManager) -> BryoPluginManager:
    """Register the installed plugins on `pm`, honouring the environment, then validate."""
    for name in _blocked_names():
        pm.set_blocked(name)
    autoload = _autoload_enabled()
    blocked = _blocked_names()
    for entry_point in _entry_points():
        dist = _distribution_of(entry_point)
        dist_name = dist[0] if dist else None
        if dist_name in blocked:
            continue
        if not autoload and dist_name not in BUILTIN_DISTRIBUTIONS:
            continue
        _load_entry_point(pm, entry_point)
    _check_pending(pm)
    return pm


def new_plugin_manager(*, load: bool = True) -> BryoPluginManager:
    """A fresh manager with every declared hookspec, and the installed plugins if `load`."""
    pm = BryoPluginManager()
    with _lock:
        for spec in _hookspec_modules:
            pm.add_hookspecs(spec)
        _live_managers.add(pm)
    return load_plugins(pm) if load else pm


def get_plugin_manager() -> BryoPluginManager:
    """bryo's plugin manager, created and loaded on first use."""
    global _manager
    if _manager is None:
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
    pm = pm or get_plugin_manager()
    infos = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        dist = pm.distributions.get(name)
        infos.append(PluginInfo(name, dist[0] if dist else None, dist[1] if dist else None, hooks))
    return infos
