"""Shared fixtures of the cross-package tests: fake installed distributions.

`fake_dists` writes real `*.dist-info` directories (METADATA + entry_points.txt) and their
plugin modules into a temporary directory on `sys.path`, so `importlib.metadata` discovers
them exactly as it discovers a pip-installed plugin. Everything is undone after the test.
"""

from __future__ import annotations

import re
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


class FakeDistributions:
    """Build installed-looking distributions that expose `bryo` entry points."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(self, dist_name: str, plugins: dict[str, str], version: str = "1.0") -> dict[str, str]:
        """Install `dist_name` with one plugin module per entry point.

        Args:
            dist_name: the distribution's `Name:` metadata (e.g. `acme-bryo-hello`).
            plugins: entry-point name -> source code of the module it points to.
            version: the distribution's version.

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
        lines = [f"{name} = {module}" for name, module in modules.items()]
        (info / "entry_points.txt").write_text("[bryo]\n" + "\n".join(lines) + "\n")
        return modules


@pytest.fixture
def fake_dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDistributions]:
    """A directory on `sys.path` in which the test installs fake plugin distributions."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    dists = FakeDistributions(site)
    yield dists
    for module in dists.modules:
        sys.modules.pop(module, None)
