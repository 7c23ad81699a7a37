"""The layering rules of STYLE.md, checked on the source: no import cycles inside a
package or between distributions, and no distribution importing another one's private
modules or names.

The sources are parsed (`ast`), never imported. Every import counts, including those
inside functions and under `TYPE_CHECKING`: a lazy import that closes a circle is still
a circle in the design.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Import cycles known and owned by another engineer's task. A cycle found must lie inside
# one entry. Remove entries as they are fixed; the list ends empty.
ALLOWED_CYCLES: list[frozenset[str]] = []


@dataclasses.dataclass(frozen=True)
class Package:
    """One importable package of the monorepo: its name, its distribution's folder."""

    name: str
    dist: str
    root: Path

    def modules(self) -> Iterator[tuple[str, Path]]:
        """`(dotted module name, file)` for every module of the package."""
        for file in sorted(self.root.rglob("*.py")):
            parts = list(file.relative_to(self.root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), file


def packages() -> list[Package]:
    found = []
    for src in sorted([*ROOT.glob("packages/*/src"), *ROOT.glob("plugins/*/src")]):
        for root in sorted(p for p in src.iterdir() if (p / "__init__.py").exists()):
            found.append(Package(root.name, src.parent.name, root))
    return found


PACKAGES = packages()
TOP_NAMES = {package.name: package for package in PACKAGES}


@dataclasses.dataclass(frozen=True)
class Import:
    """One imported module (and the names taken from it), with where it was written."""

    module: str
    names: tuple[str, ...]
    line: int


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of a relative import `from {'.' * level}{target} import ...`."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str, file: Path) -> list[Import]:
    tree = ast.parse(file.read_text(), filename=str(file))
    is_package = file.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module
            if node.level:
                target = _resolve(module, is_package, node.level, node.module)
            names = tuple(alias.name for alias in node.names)
            found.append(Import(target, names, node.lineno))  # type: ignore[arg-type]  # an absolute `from` import names its module; relative ones are resolved above
    return found


def _module_aliases(file: Path) -> dict[str, str]:
    """Local names bound to another package's top-level module by `import x [as y]`."""
    aliases = {}
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in TOP_NAMES and "." not in alias.name:
                    aliases[alias.asname or alias.name] = alias.name
    return aliases


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# Cycles ------------------------------------------------------------------------------------


def dependency_graph(package: Package) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = dict(package.modules())
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, file in modules.items():
        for imp in imports_of(name, file):
            # `from pkg import sub` imports the submodule; `from pkg import name`, pkg itself.
            targets = [
                f"{imp.module}.{n}" if f"{imp.module}.{n}" in modules else imp.module
                for n in imp.names or ("",)
            ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walker_finds_every_package():
    names = {package.name for package in PACKAGES}
    assert {"bryo", "bryo_graph", "bryo_transforms", "bryo_mox", "bryo_nnx"} <= names


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_import_cycles_inside_a_package(package: Package):
    unexpected = [
        sorted(cycle)
        for cycle in cycles(dependency_graph(package))
        if not any(cycle <= allowed for allowed in ALLOWED_CYCLES)
    ]
    assert not unexpected, (
        f"{package.dist}: modules that import each other: {unexpected}. Layer them so "
        "imports only go downward: move what both need into a lower module."
    )


def distribution_graph() -> dict[str, set[str]]:
    """Distribution -> the other distributions its sources import."""
    graph: dict[str, set[str]] = {package.dist: set() for package in PACKAGES}
    for package in PACKAGES:
        for name, file in package.modules():
            for imp in imports_of(name, file):
                top = TOP_NAMES.get(imp.module.split(".")[0])
                if top is not None and top.dist != package.dist:
                    graph[package.dist].add(top.dist)
    return graph


def test_no_import_cycles_between_distributions():
    graph = distribution_graph()
    assert "core-pytree" in graph["core-graph"]  # the walk sees cross-distribution imports
    found = [sorted(cycle) for cycle in cycles(graph)]
    assert not found, (
        f"distributions that import each other: {found}. A lower layer must not import a "
        "higher one: move what both need down, or invert the call through a hook."
    )


# Private names across distributions ---------------------------------------------------------


def private_uses(package: Package) -> list[str]:
    """`file:line: what` for each use of another distribution's private module or name."""
    problems = []
    for name, file in package.modules():
        where = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
        for imp in imports_of(name, file):
            top = imp.module.split(".")[0]
            if top not in TOP_NAMES or TOP_NAMES[top].dist == package.dist:
                continue
            if any(_is_private(part) for part in imp.module.split(".")[1:]):
                problems.append(f"{where}:{imp.line}: imports {imp.module}")
            problems += [
                f"{where}:{imp.line}: imports {imp.module}.{n}" for n in imp.names if _is_private(n)
            ]
        aliases = _module_aliases(file)
        for node in ast.walk(ast.parse(file.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and TOP_NAMES[aliases[node.value.id]].dist != package.dist
                and _is_private(node.attr)
            ):
                problems.append(f"{where}:{node.lineno}: reads {node.value.id}.{node.attr}")
    return problems


def test_the_private_check_sees_modules_names_and_attributes(tmp_path: Path):
    root = tmp_path / "bryo_probe"
    root.mkdir()
    (root / "__init__.py").write_text(
        "import bryo_mox\n"
        "from bryo_mox._types import ModuleCall\n"
        "from bryo_graph import _private, GraphDef\n"
        "x = bryo_mox._hooks\n"
    )
    problems = private_uses(Package("bryo_probe", "probe", root))
    assert len(problems) == 3, problems


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_private_imports_across_distributions(package: Package):
    problems = private_uses(package)
    assert not problems, (
        f"{package.dist} uses other distributions' private modules or names "
        "(use their public API, or add a public name there):\n" + "\n".join(problems)
    )
