"""The API reference documents every public name of every distribution and every hook.

Its pages are generated while the site builds (docs_hooks/bryo_api_pages.py, an mkdocs hook),
so they cannot fall behind the code; this test checks what the generator lists.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT / "docs_hooks"))
import bryo_api_pages as pages  # noqa: E402  (the mkdocs hook generating the pages)

PAGES = pages.api_pages()
ENTRY = re.compile(r"^::: (\S+)$", re.MULTILINE)


def test_every_distribution_folder_is_documented():
    folders = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/*/pyproject.toml")}
    assert folders == {d.folder for d in pages.DISTRIBUTIONS}, (
        "add the new distribution to DISTRIBUTIONS in docs_hooks/bryo_api_pages.py"
    )


def test_the_navigation_lists_every_generated_page_and_only_those():
    nav = re.findall(r"^\s+- [\w-]+: (api/[\w-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert sorted(nav) == sorted(PAGES)
    assert not (ROOT / "docs" / "api").exists(), "docs/api/ is generated: remove the folder"


@pytest.mark.parametrize("dist", pages.DISTRIBUTIONS, ids=lambda d: d.package)
def test_every_public_name_of_a_package_has_an_entry_or_a_link(dist):
    page = PAGES[f"api/{Path(dist.folder).name}.md"]
    module = importlib.import_module(dist.package)
    for name in pages.public_names(module):
        assert f"::: {dist.package}.{name}\n" in page or f"| `{name}` |" in page, (
            f"{dist.package}.{name} is missing from its API page"
        )


def test_names_are_rendered_where_they_are_defined_and_linked_elsewhere():
    graph = PAGES["api/core-graph.md"]
    assert "::: bryo_graph.split\n" in graph and "::: bryo_graph.State\n" in graph
    assert "::: bryo_graph._graph" not in graph
    top = PAGES["api/bryo.md"]
    assert "| `split` | [`bryo_graph`](core-graph.md#bryo_graph.split) |" in top
    assert "::: bryo_graph.WithAxis\n" in graph and "::: bryo_graph.logical_axes\n" in graph
    assert "| `WithAxis` | [`bryo_graph`](core-graph.md#bryo_graph.WithAxis) |" in top
    assert "::: bryo.save_state\n" in top


def test_the_testing_helpers_plugin_authors_use_are_rendered():
    """docs/plugins.md sends serializer and backend authors to `bryo_plugins.testing` and
    `bryo_mox.testing.assert_round_trip`, which no page rendered."""
    assert "## Testing helpers\n\n::: bryo_plugins.testing\n" in PAGES["api/core-plugins.md"]
    assert "## Testing helpers\n\n::: bryo_mox.testing\n" in PAGES["api/mox-ir.md"]


def test_private_modules_and_submodules_imported_elsewhere_do_not_count():
    package = importlib.import_module("bryo_graph")
    assert importlib.import_module("bryo_graph.hookspecs") is package.hookspecs
    names = pages.public_names(package)  # __init__ binds it as `_hookspecs` only
    assert "hookspecs" not in names and not [n for n in names if n.startswith("_")]


def test_every_hookspec_module_is_rendered():
    found = sorted(f"{path.parent.name}.hookspecs" for path in ROOT.glob("*/*/src/*/hookspecs.py"))
    assert ENTRY.findall(PAGES["api/hooks.md"]) == [
        name for name in pages.hookspec_modules() if name in found
    ]
    assert sorted(pages.hookspec_modules()) == found


def test_every_entry_names_something_that_imports():
    for markdown in PAGES.values():
        for dotted in ENTRY.findall(markdown):
            module_name, _, attribute = dotted.rpartition(".")
            try:
                module = importlib.import_module(dotted)
            except ImportError:
                module = getattr(importlib.import_module(module_name), attribute)
            assert module is not None


def test_re_exported_names_say_where_they_really_live():
    """Type aliases of bryo's own were said to come from `types`/`builtins` "(outside
    bryo)", and jax's functions from private `jax._src` modules."""
    graph = PAGES["api/core-graph.md"]
    assert "::: bryo_graph.Entry\n" in graph and "::: bryo_graph.PureState\n" in graph
    nnx = PAGES["api/backend-nnx.md"]
    assert "| `relu` | `jax.nn.relu` (outside bryo) |" in nnx
    for path, markdown in PAGES.items():
        for row in re.findall(r"^\| `\w+` \| .*\(outside bryo\) \|$", markdown, re.M):
            assert "._" not in row and "`types`" not in row and "`builtins`" not in row, (
                f"{path}: {row}"
            )


def test_an_import_chain_is_followed_to_its_public_source():
    assert pages.traced_import("bryo_nnx", "relu") == ("jax.nn", "relu")
    assert pages.traced_import("bryo_graph", "Entry") == ("bryo_graph._entries", "Entry")
    assert pages.traced_import("bryo", "split")[0].startswith("bryo_graph")
