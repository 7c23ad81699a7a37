"""bryo's pytest fixtures: isolated plugin managers and fake installed plugins. Opt in.

Installing bryo never changes an unrelated pytest session: this plugin is not registered
through `pytest11`. Enable it where you want it, in your top-level `conftest.py`:

    pytest_plugins = ["bryo_plugins.testing"]

or on the command line, `pytest -p bryo_plugins.testing` (`bryo_pytree.testing` is an
alias, for the spelling of bryo 0.1's first layout).

Fixtures:

- `bryo_plugin_manager`: a fresh manager with every declared hookspec, the built-in
  plugins, and the installed plugins (loaded as lazily as bryo's own manager), made bryo's
  manager for the test and discarded after it. Register a plugin class inside the test;
  nothing leaks into the next test.
- `bryo_empty_plugin_manager`: the same with no plugin at all, not even the built-ins.
- `bryo_fake_distributions`: a `FakeDistributions` that installs tiny plugin
  distributions (real `*.dist-info` directories) for one test, so entry-point discovery
  runs exactly as for a pip-installed plugin.
"""

from __future__ import annotations

import re
import sys
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ._manager import BryoPluginManager, new_plugin_manager, use_plugin_manager


class FakeDistributions:
    """Installed-looking distributions exposing `bryo` entry points, in `root` on sys.path.

    >>> dists.add("acme-hello", {"hello": SOURCE}, group="bryo.cli")  # doctest: +SKIP
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(
        self,
        dist_name: str,
        plugins: Mapping[str, str],
        version: str = "1.0",
        group: str = "bryo",
        groups: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Install `dist_name` with one plugin module per entry point.

        Args:
            dist_name: the distribution's `Name:` metadata (`acme-bryo-hello`).
            plugins: entry-point name -> source code of the module it points to (dedented).
            version: the distribution's version.
            group: the entry-point group of every plugin (`bryo`, `bryo.graph.acme`, ...).
            groups: entry-point name -> its own group(s), comma-separated, overriding
                `group` (one plugin may be listed in several groups).

        Returns:
            entry-point name -> the (unique) module name written for it.
        """
        modules = {}
        for ep_name, source in plugins.items():
            stem = re.sub(r"\W", "_", ep_name)
            module = f"_bryo_fake_{stem}_{uuid.uuid4().hex[:8]}"
            (self.root / f"{module}.py").write_text(textwrap.dedent(source))
            modules[ep_name] = module
            self.modules.append(module)
        info = self.root / f"{re.sub(r'[-_.]+', '_', dist_name)}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n"
        )
        sections: dict[str, list[str]] = {}
        for ep_name, module in modules.items():
            for each in (groups or {}).get(ep_name, group).split(","):
                sections.setdefault(each.strip(), []).append(f"{ep_name} = {module}")
        blocks = [f"[{name}]\n" + "\n".join(lines) + "\n" for name, lines in sections.items()]
        text = "\n".join(blocks)
        (info / "entry_points.txt").write_text(text)
        return modules


@pytest.fixture
def bryo_plugin_manager() -> Iterator[BryoPluginManager]:
    """A fresh, loaded plugin manager that is bryo's manager for this test only."""
    with use_plugin_manager(new_plugin_manager()) as pm:
        yield pm


@pytest.fixture
def bryo_empty_plugin_manager() -> Iterator[BryoPluginManager]:
    """A fresh plugin manager with hookspecs but no plugin (no built-in either)."""
    with use_plugin_manager(new_plugin_manager(load=False, builtins=False)) as pm:
        yield pm


@pytest.fixture
def bryo_fake_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeDistributions]:
    """A directory on `sys.path` in which the test installs fake plugin distributions."""
    site = tmp_path / "bryo-fake-site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    dists = FakeDistributions(site)
    yield dists
    for module in dists.modules:
        sys.modules.pop(module, None)
