"""Every distribution's wheel declares what its code imports, pins bryo to one release, and
ships `py.typed`.

Builds the wheel of each distribution under packages/ and plugins/ (with uv, offline when
no package index is reachable), reads its `Requires-Dist`, and walks the `.py` files the
wheel holds with `ast`:

- an import that runs when the package is imported (module level, in a module its
  `__init__` reaches through module-level imports) must be an unconditional requirement;
- any other import (inside a function, or in a module imported on demand such as a
  pytest plugin or `__main__`) may come from an extra instead (`bryo-backend-nnx[mox]`);
- `if TYPE_CHECKING:` imports are not imports at run time.

Imports are mapped to distributions through the wheels themselves (bryo's own packages)
and `importlib.metadata.packages_distributions()` (everything else); the standard library
needs nothing.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = sorted(
    p.parent for p in ROOT.glob("*/*/pyproject.toml") if p.parts[-3] in ("packages", "plugins")
)

pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.timeout(1500)]


@dataclass(frozen=True)
class Wheel:
    """What one built wheel declares and holds."""

    name: str
    version: str
    requires: dict[str, set[str]]  # distribution -> extras that require it ("" = always)
    requirements: tuple[Requirement, ...]  # every Requires-Dist line
    files: dict[str, str]  # path in the wheel -> text, for .py files
    names: frozenset[str]  # every path in the wheel

    @property
    def packages(self) -> set[str]:
        """The top-level import names the wheel installs."""
        return {path.split("/")[0] for path in self.files}


@dataclass(frozen=True)
class Import:
    module: str  # the top-level module imported
    where: str  # file:line
    at_import_time: bool  # runs when the distribution's package is imported


def _uv() -> str:
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pytest.skip("uv is not installed (it comes with the hatch-test environment)")


def _read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as archive:
        names = frozenset(archive.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
        files = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    header = dict(re.findall(r"^(Name|Version): (.+)$", metadata, re.MULTILINE))
    requires: dict[str, set[str]] = {}
    requirements = tuple(
        Requirement(line) for line in re.findall(r"^Requires-Dist: (.+)$", metadata, re.MULTILINE)
    )
    for requirement in requirements:
        extra = re.search(r"extra == ['\"]([\w-]+)['\"]", str(requirement.marker or ""))
        requires.setdefault(canonicalize_name(requirement.name), set()).add(
            extra.group(1) if extra else ""
        )
    return Wheel(header["Name"], header["Version"], requires, requirements, files, names)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Wheel]:
    out = tmp_path_factory.mktemp("wheels")
    uv = _uv()
    built = {}
    for distribution in DISTRIBUTIONS:
        before = set(out.glob("*.whl"))
        result = subprocess.run(
            [uv, "build", "--wheel", "--offline", "--out-dir", str(out), str(distribution)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot build {distribution.name} offline:\n{result.stderr[-2000:]}")
        [wheel] = set(out.glob("*.whl")) - before
        built[distribution] = _read_wheel(wheel)
    return built


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


Statement = ast.Import | ast.ImportFrom


def _imports(tree: ast.AST) -> Iterator[tuple[Statement, bool]]:
    """Every import statement that runs, with whether it runs at module level."""

    def walk(node: ast.AST, module_level: bool) -> Iterator[tuple[Statement, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:  # the `if` body never runs
                    yield from walk(other, module_level)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, module_level
            function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, module_level and not function)

    yield from walk(tree, True)


@dataclass(frozen=True)
class Module:
    name: str  # dotted
    path: str  # in the wheel
    is_package: bool

    def resolve(self, node: ast.ImportFrom) -> str:
        """The absolute module a `from` import names."""
        if not node.level:
            return node.module or ""
        parts = (self.name if self.is_package else self.name.rpartition(".")[0]).split(".")
        base = parts[: len(parts) - (node.level - 1)]
        return ".".join([*base, node.module] if node.module else base)


def _modules(wheel: Wheel) -> dict[str, Module]:
    modules = {}
    for path in wheel.files:
        is_package = path.endswith("/__init__.py")
        name = path.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")
        modules[name] = Module(name, path, is_package)
    return modules


def _reachable(modules: dict[str, Module], trees: dict[str, ast.AST]) -> set[str]:
    """The modules importing the distribution's packages imports (module-level imports)."""
    reachable: set[str] = set()
    todo = [name for name in modules if "." not in name]
    while todo:
        name = todo.pop()
        if name in reachable or name not in modules:
            continue
        reachable.add(name)
        for node, module_level in _imports(trees[name]):
            if not module_level:
                continue
            if isinstance(node, ast.Import):
                todo.extend(alias.name for alias in node.names)
            else:
                target = modules[name].resolve(node)
                todo.extend([target, *(f"{target}.{alias.name}" for alias in node.names)])
    return reachable


def _scan(wheel: Wheel) -> list[Import]:
    """Every third-party or bryo import of the wheel's code, with when it runs."""
    modules = _modules(wheel)
    trees = {name: ast.parse(wheel.files[module.path]) for name, module in modules.items()}
    reachable = _reachable(modules, trees)
    found = []
    for name, tree in trees.items():
        for node, module_level in _imports(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            targets = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for target in targets:
                top = target.split(".")[0]
                if top in sys.stdlib_module_names or top in wheel.packages or top == "__future__":
                    continue
                where = f"{modules[name].path}:{node.lineno}"
                found.append(Import(top, where, module_level and name in reachable))
    return found


def _distribution_of(module: str, wheels: dict[Path, Wheel]) -> str:
    for wheel in wheels.values():
        if module in wheel.packages:
            return canonicalize_name(wheel.name)
    found = importlib.metadata.packages_distributions().get(module)
    assert found, f"no installed distribution provides the module {module!r}"
    return canonicalize_name(found[0])


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=[d.name for d in DISTRIBUTIONS])
def test_requires_dist_covers_every_import(wheels, distribution):
    wheel = wheels[distribution]
    missing = []
    for imported in _scan(wheel):
        needed = _distribution_of(imported.module, wheels)
        extras = wheel.requires.get(needed)
        if extras is None:
            missing.append(f"{imported.where} imports {imported.module} ({needed}): not required")
        elif imported.at_import_time and "" not in extras:
            missing.append(
                f"{imported.where} imports {imported.module} when the package is imported, "
                f"but {needed} is only in the extra(s) {sorted(extras)}"
            )
    assert not missing, f"{wheel.name}'s Requires-Dist misses:\n" + "\n".join(missing)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=[d.name for d in DISTRIBUTIONS])
def test_bryo_requirements_are_pinned_to_the_same_release(wheels, distribution):
    wheel = wheels[distribution]
    for requirement in wheel.requirements:
        if requirement.name.startswith("bryo"):
            assert str(requirement.specifier) in (f"~={wheel.version}", f"=={wheel.version}"), (
                f"{wheel.name} requires `{requirement}`: pin bryo distributions to its own "
                f"release (`~={wheel.version}`)"
            )


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=[d.name for d in DISTRIBUTIONS])
def test_every_wheel_ships_py_typed(wheels, distribution):
    wheel = wheels[distribution]
    for package in wheel.packages:
        assert f"{package}/py.typed" in wheel.names, f"{wheel.name}: no {package}/py.typed"


def test_the_scan_sees_lazy_and_type_checking_imports():
    files = {
        "demo/__init__.py": "from . import _core\n",
        "demo/_core.py": (
            "from typing import TYPE_CHECKING\n"
            "import numpy\n"
            "if TYPE_CHECKING:\n"
            "    import equinox\n"
            "def f():\n"
            "    import lxml\n"
        ),
        "demo/testing.py": "import pytest\n",  # a module imported on demand only
    }
    wheel = Wheel("demo", "1", {}, (), files, frozenset())
    found = {(i.module, i.at_import_time) for i in _scan(wheel)}
    assert found == {("numpy", True), ("lxml", False), ("pytest", False)}
