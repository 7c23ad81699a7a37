"""What `bryo plugins` shows: the registered plugins, and every hook with its contract."""

from __future__ import annotations

import importlib.metadata
import inspect
from dataclasses import dataclass

import pluggy

from ._manager import BryoPluginManager, PluginSource, get_plugin_manager


@dataclass(frozen=True)
class PluginInfo:
    """One registered plugin: where it comes from and the hooks it implements.

    Attributes:
        name: the plugin's name.
        distribution: the distribution that ships it (None when registered by hand).
        version: that distribution's version, when known.
        hooks: the hooks it implements, sorted.
        builtin: registered directly by its owning package (not an entry point).
    """

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool = False


@dataclass(frozen=True)
class HookInfo:
    """One declared hook: its owner and the first line of its contract.

    Attributes:
        name: the hook (`bryo_graph_node_types`).
        owner: the module (or class) that declares it (`bryo_graph.hookspecs`).
        summary: the first sentence of its docstring.
        signature: its arguments, as the implementations take them (`(filter)`).
        firstresult: whether the first non-None answer is the only one used.
    """

    name: str
    owner: str
    summary: str
    signature: str
    firstresult: bool


def describe_plugins(pm: BryoPluginManager | None = None) -> list[PluginInfo]:
    """Every registered plugin with its distribution, version and implemented hooks."""
    pm = get_plugin_manager() if pm is None else pm
    infos = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        source = pm.sources.get(name, PluginSource(None))
        version = source.version or _installed_version(source.distribution)
        infos.append(PluginInfo(name, source.distribution, version, hooks, source.builtin))
    return infos


def _installed_version(distribution: str | None) -> str | None:
    """A built-in's version, read from its distribution's metadata when there is one."""
    if distribution is None:
        return None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:  # run from a tree without dist-info
        return None


def describe_hooks(pm: BryoPluginManager | None = None) -> list[HookInfo]:
    """Every declared hook, sorted by name, with its owner and one-line contract."""
    pm = get_plugin_manager() if pm is None else pm
    hooks = []
    for name, caller in sorted(vars(pm.hook).items()):
        if not isinstance(caller, pluggy.HookCaller) or caller.spec is None:
            continue
        spec = caller.spec
        owner = getattr(spec.namespace, "__name__", type(spec.namespace).__name__)
        hooks.append(
            HookInfo(
                name=name,
                owner=owner,
                summary=_first_sentence(inspect.getdoc(spec.function) or ""),
                signature=f"({', '.join(spec.argnames)})",
                firstresult=bool(spec.opts.get("firstresult")),
            )
        )
    return hooks


def _first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]
