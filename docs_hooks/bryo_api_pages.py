"""The API reference pages (docs/api/), generated from the packages while the site builds.

An mkdocs hook (`hooks:` in mkdocs.yml): each distribution gets a page on which the names
its package defines are rendered by mkdocstrings (`::: package.name`) and the names it
re-exports from another distribution link to their home page; `api/hooks.md` renders
every `hookspecs` module. The pages are never written to docs/, so they cannot fall
behind the code; tests/test_api_reference.py checks what they list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # mkdocs is needed only to build the site, not to list the pages
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files

ROOT = Path(__file__).resolve().parents[1]


class Distribution(NamedTuple):
    """One documented distribution: folder, import name and what it is for."""

    folder: str
    package: str
    summary: str


DISTRIBUTIONS = (
    Distribution(
        "packages/bryo",
        "bryo",
        "The meta-package: the most used names at top level, checkpoints, the `bryo` "
        "command, and the facades `bryo.nnx`, `bryo.hax`, `bryo.mox`.",
    ),
    Distribution(
        "packages/core-plugins",
        "bryo_plugins",
        "The plugin system: manager, hookspec/hookimpl markers, hook tables, call routing.",
    ),
    Distribution(
        "packages/core-pytree",
        "bryo_pytree",
        "Pytree helpers: paths, prefixes, dataclasses, array predicates.",
    ),
    Distribution(
        "packages/core-filters", "bryo_filters", "Filters: which Variables a call selects."
    ),
    Distribution(
        "packages/core-graph",
        "bryo_graph",
        "Graphs: Objects, Variables, State, split and merge, sharding.",
    ),
    Distribution("packages/core-rngs", "bryo_rngs", "Named rng streams."),
    Distribution(
        "packages/core-transforms", "bryo_transforms", "Lifted transforms over graph nodes."
    ),
    Distribution(
        "packages/core-scan",
        "bryo_scan",
        "Scan and fold over layers, checkpoint policies, `Stacked` and `BlockSeq`.",
    ),
    Distribution(
        "packages/mox-ir",
        "bryo_mox",
        "MoX: module expressions (trace, evaluate, query, rewrite, save).",
    ),
    Distribution("packages/training", "bryo_training", "Optimizer, train state, metrics."),
    Distribution("plugins/backend-nnx", "bryo_nnx", "NNX-style modules and layers."),
    Distribution(
        "plugins/backend-equinox",
        "bryo_equinox",
        "Equinox modules in bryo's graph, transforms and MoX.",
    ),
    Distribution(
        "plugins/backend-flax", "bryo_flax", "Flax Linen and Flax NNX modules in MoX and scan."
    ),
    Distribution("plugins/backend-named", "bryo_named", "Named axes (Haliax-style `NamedArray`)."),
    Distribution(
        "plugins/backend-haliax",
        "bryo_haliax",
        "Real Haliax (`haliax.Axis`, `haliax.NamedArray`) in bryo's scan and `Stacked`.",
    ),
    Distribution("plugins/serializer-xml", "bryo_xml", "MoX files in XML."),
    Distribution("plugins/serializer-yson", "bryo_yson", "MoX files in YSON."),
)
PAGE_OF = {d.package: Path(d.folder).name for d in DISTRIBUTIONS}


def public_names(module: ModuleType) -> list[str]:
    """`__all__`, or every name the package's `__init__.py` binds that does not start with
    `_` (read from its source, so submodules other code imported later do not count)."""
    names = getattr(module, "__all__", None)
    if names is None:
        tree = ast.parse(Path(module.__file__ or "").read_text())
        names = [n for n in _bound_names(tree) if not n.startswith("_")]
    return sorted(set(names), key=lambda n: (n.lower(), n))


def _bound_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def defining_module(value: object) -> str | None:
    """The module that defines `value`, when it says (classes, functions, modules)."""
    module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
    return module if isinstance(module, str) else None


def traced_import(module_name: str, name: str) -> tuple[str, str]:
    """`(module, name)` where the `from ... import` statements binding `name` in
    `module_name` lead: through bryo's modules, up to the first module outside bryo (the
    public path the code imports, `jax.nn.relu`, not `jax._src.nn.functions.relu`) or the
    bryo module that binds `name` itself (a class, a function, a type alias)."""
    seen: set[tuple[str, str]] = set()
    while module_name.partition(".")[0] in PAGE_OF and (module_name, name) not in seen:
        seen.add((module_name, name))
        source = _imported_from(importlib.import_module(module_name), name)
        if source is None:
            break
        module_name, name = source
    return module_name, name


def _imported_from(module: ModuleType, name: str) -> tuple[str, str] | None:
    """`(absolute module, original name)` of the top-level `from ... import` binding `name`
    in `module`'s source, or None when the module binds it otherwise."""
    tree = ast.parse(Path(module.__file__ or "").read_text())
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) == name:
                return _absolute(module, node), alias.name
    return None


def _absolute(module: ModuleType, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.__name__ if hasattr(module, "__path__") else module.__package__ or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def api_page(dist: Distribution) -> str:
    module = importlib.import_module(dist.package)
    rendered, linked, foreign = [], [], []
    for name in public_names(module):
        value = getattr(module, name)
        home = defining_module(value)
        if inspect.ismodule(value) and not value.__name__.startswith(f"{dist.package}."):
            foreign.append(f"| `{name}` | the module `{value.__name__}` |")
            continue
        if home is None or home.partition(".")[0] not in PAGE_OF:
            # A type alias, a constant or an object of another library: its `__module__`
            # (`types`, `builtins`, `jax._src...`) says nothing; the imports do.
            source, original = traced_import(dist.package, name)
            if source.partition(".")[0] not in PAGE_OF:
                linked.append(f"| `{name}` | `{source}.{original}` (outside bryo) |")
                continue
            home = source  # bound in a bryo module: bryo's own alias (`Key: TypeAlias = ...`)
        top = home.partition(".")[0]
        if top == dist.package:
            rendered.append(f"::: {dist.package}.{name}")
        else:
            linked.append(f"| `{name}` | [`{top}`]({PAGE_OF[top]}.md#{top}.{name}) |")
    title = (
        dist.package
        if dist.package == "bryo"
        else f"{dist.package} (`bryo-{Path(dist.folder).name}`)"
    )
    parts = [
        f"# {title}\n\n{dist.summary}\n\n::: {dist.package}\n    options:\n      members: false\n"
    ]
    if linked or foreign:
        rows = "\n".join(linked + foreign)
        parts.append(f"## Re-exported names\n\n| name | defined in |\n|---|---|\n{rows}\n")
    if rendered:
        parts.append("## Names defined here\n\n" + "\n\n".join(rendered) + "\n")
    if (ROOT / dist.folder / "src" / dist.package / "testing.py").exists():
        # Public but imported on demand (pytest fixtures, toy modules): plugin authors'
        # tests use them, so they are documented here rather than re-exported.
        parts.append(f"## Testing helpers\n\n::: {dist.package}.testing\n")
    return "\n".join(parts)


def hookspec_modules() -> list[str]:
    found = []
    for dist in DISTRIBUTIONS:
        if (ROOT / dist.folder / "src" / dist.package / "hookspecs.py").exists():
            found.append(f"{dist.package}.hookspecs")
    return found


def hooks_page() -> str:
    entries = "\n\n".join(f"::: {name}" for name in hookspec_modules())
    return (
        "# Hooks (hookspecs)\n\nEvery extension point of bryo, by the package that owns it. "
        "A plugin implements these\nwith `@bryo_plugins.hookimpl` (see "
        "[Writing plugins](../plugins.md)).\n\n" + entries + "\n"
    )


def api_pages() -> dict[str, str]:
    """`{path under docs/: markdown}` of every API page."""
    pages = {f"api/{Path(d.folder).name}.md": api_page(d) for d in DISTRIBUTIONS}
    pages["api/hooks.md"] = hooks_page()
    return pages


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """mkdocs hook: add the API pages to the site, generated from the packages."""
    from mkdocs.structure.files import File

    for path, markdown in api_pages().items():
        files.append(File.generated(config, path, content=markdown))
    return files
