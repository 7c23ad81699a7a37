"""Finding plugins: the `bryo` entry-point groups, read once per plugin manager.

A distribution announces a plugin with an entry point whose name is the plugin's name and
whose value is the module (or object) holding its `@hookimpl` functions. The group says
when bryo imports it:

- `bryo`: when the plugin manager is created (any plugin that does not say more);
- `bryo.<family>`: the first time core code needs that hook family (`graph`, `scan`,
  `filters`, `mox`, `serializers`, `cli`);
- `bryo.<family>.<key>`: the first time core code needs that family *for that key*: the
  top-level module whose classes the plugin handles (`bryo.graph.equinox`), or a format
  name (`bryo.serializers.xml`). When a key alone does not answer, the owner loads the
  whole family.

A plugin listed in several groups under the same name and value is one plugin, imported
once. Nothing here imports a plugin; `PluginEntry.load` does.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ._markers import AUTOLOAD_ENV, BLOCK_ENV, ENTRY_POINT_GROUP


def normalize_distribution_name(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): `Bryo_Hello` -> `bryo-hello`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """One entry point of a `bryo` group: which plugin, from where, and when to load it.

    Attributes:
        name: the plugin's name in bryo (the entry-point name).
        family: the hook family whose first use loads it; None for the `bryo` group
            (loaded with the manager).
        key: the key within the family (a module or format name); None when the plugin
            loads on the family's first use.
        value: what the entry point refers to (`module` or `module:attribute`).
        distribution: the distribution's name, when the entry point has one.
        version: the distribution's version, when known.
    """

    name: str
    family: str | None
    key: str | None
    value: str
    distribution: str | None
    version: str | None
    entry_point: importlib.metadata.EntryPoint

    def load(self) -> object:
        """Import the plugin object."""
        return self.entry_point.load()


def parse_group(group: str) -> tuple[str | None, str | None] | None:
    """`(family, key)` of a `bryo` entry-point group, or None for a group of someone else."""
    if group == ENTRY_POINT_GROUP:
        return None, None
    prefix = ENTRY_POINT_GROUP + "."
    if not group.startswith(prefix) or len(group) == len(prefix):
        return None
    family, _, key = group[len(prefix) :].partition(".")
    return family, key or None


def blocked_names() -> frozenset[str]:
    """The plugin and distribution names listed in `BRYO_BLOCK_PLUGINS`."""
    raw = os.environ.get(BLOCK_ENV, "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def autoload_enabled() -> bool:
    """False when `BRYO_DISABLE_PLUGIN_AUTOLOAD` asks for built-ins only."""
    return os.environ.get(AUTOLOAD_ENV, "").strip().lower() not in {"1", "true", "yes", "on"}


def is_blocked(name: str, distribution: str | None, blocked: frozenset[str]) -> bool:
    """Whether a plugin is blocked by its own name or its distribution's (PEP 503 compared)."""
    if name in blocked:
        return True
    if distribution is None:
        return False
    wanted = normalize_distribution_name(distribution)
    return any(normalize_distribution_name(other) == wanted for other in blocked)


def discover() -> list[PluginEntry]:
    """Every `bryo` entry point that the environment lets bryo load, sorted by family,
    key and name (so loading is deterministic)."""
    if not autoload_enabled():
        return []
    blocked = blocked_names()
    found = [e for e in _entries() if not is_blocked(e.name, e.distribution, blocked)]
    return sorted(found, key=lambda e: (e.family or "", e.key or "", e.name, e.value))


def _entries() -> Iterator[PluginEntry]:
    """The entry points of every `bryo` group, one distribution of each name (the first on
    `sys.path`, as `importlib.metadata.entry_points` picks them)."""
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or normalize_distribution_name(name) in seen:
            continue
        seen.add(normalize_distribution_name(name))
        for entry_point in dist.entry_points:
            parsed = parse_group(entry_point.group)
            if parsed is not None:
                yield PluginEntry(
                    name=entry_point.name,
                    family=parsed[0],
                    key=parsed[1],
                    value=entry_point.value,
                    distribution=name,
                    version=dist.version,
                    entry_point=entry_point,
                )
