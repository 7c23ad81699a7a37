"""Install only what you need: `bryo-core-pytree` alone pulls in jax and bryo-core-plugins;
and the install commands of docs/index.md (the whole workspace, or chosen members from
wheels built into `dist/`) work from a clone without hatch.

Builds the wheels of packages/core-pytree and packages/core-plugins, makes a fresh virtual
environment with `uv`, installs the wheels there (their dependencies come from the package
index, through uv's cache so that reruns are fast), imports bryo_pytree, and checks that no
backend's dependency (equinox, flax, lxml) and no other bryo distribution came along. It
needs a reachable package index, or uv's cache holding every dependency; otherwise it is
skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "packages" / "core-plugins", ROOT / "packages" / "core-pytree")
FORBIDDEN = ("equinox", "flax", "lxml", "optax", "ytsaurus-client")
STEP_TIMEOUT = 600

pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.timeout(1500)]

CHECK_IMPORT = """
import importlib.metadata as md, json, re
import bryo_pytree
from bryo_pytree import broadcast_prefix, flatten_to_paths
from bryo_plugins import get_plugin_manager
assert flatten_to_paths({"a": [1, 2]}) == {("a", 0): 1, ("a", 1): 2}
assert broadcast_prefix((None, 0), (1, {"k": 2})) == (None, {"k": 0})
pm = get_plugin_manager()
print(json.dumps({
    "version": bryo_pytree.__version__,
    "file": bryo_pytree.__file__,
    "plugins": [name for name, plugin in pm.list_name_plugin() if plugin is not None],
    "distributions": sorted(
        {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in md.distributions()}
    ),
}))
"""


def _uv() -> list[str]:
    """The uv command: the `uv` module of this interpreter's environment, or `uv` on PATH."""
    try:
        import uv

        return [uv.find_uv_bin()]
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            pytest.skip("uv is not installed (it comes with the hatch-test environment)")
        return [found]


def _index_url() -> str:
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var]
    return "https://pypi.org/simple"


def _index_reachable(url: str) -> bool:
    if url.startswith("file:"):
        return True
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/pluggy/", timeout=15) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False, **kwargs
    )


def _check(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert result.returncode == 0, (
        f"{what} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )


@pytest.fixture
def workdir():
    """A temporary directory removed after the test, venv and wheels included."""
    with tempfile.TemporaryDirectory(prefix="bryo-install-") as path:
        yield Path(path)


def test_core_pytree_installs_alone(workdir):
    uv = _uv()
    online = _index_reachable(_index_url())
    offline = [] if online else ["--offline"]  # all from uv's cache, if it holds everything
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}

    wheels = workdir / "wheels"
    for package in PACKAGES:
        build = [*uv, "build", "--wheel", "--out-dir", str(wheels), *offline, str(package)]
        _check(_run(build, env=env), f"building the wheel of {package.name}")
    built = sorted(str(wheel) for wheel in wheels.glob("bryo_core_*.whl"))

    venv = workdir / "venv"
    _check(_run([*uv, "venv", "--python", sys.executable, str(venv)], env=env), "uv venv")
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    install = _run([*uv, "pip", "install", "--python", str(python), *offline, *built], env=env)
    if install.returncode != 0 and not online:
        pytest.skip(
            f"no package index reachable at {_index_url()} and uv's cache lacks the "
            f"dependencies of bryo-core-pytree:\n{install.stderr[-2000:]}"
        )
    _check(install, "installing the wheels")

    result = _run([str(python), "-c", CHECK_IMPORT], env=env, cwd=workdir)
    _check(result, "importing bryo_pytree in the fresh venv")
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert Path(report["file"]).is_relative_to(venv), "imported the workspace copy, not the wheel"
    assert report["version"] == "0.1.0"
    assert report["plugins"] == []  # core-pytree ships no `bryo` plugin of its own
    installed = set(report["distributions"])
    print("installed:", ", ".join(sorted(installed)))
    assert {"bryo-core-pytree", "bryo-core-plugins", "jax", "jaxlib", "pluggy"} <= installed
    assert not installed & set(FORBIDDEN), f"pulled in {sorted(installed & set(FORBIDDEN))}"
    bryo_dists = sorted(d for d in installed if d.startswith("bryo"))
    assert bryo_dists == ["bryo-core-plugins", "bryo-core-pytree"]


# --- the documented install from a clone (docs/index.md, "Into your own environment") ---

DOCUMENTED = (
    "pip install ./packages/* ./plugins/*",
    "pip wheel --no-deps --wheel-dir dist ./packages/* ./plugins/*",
    "pip install --find-links dist bryo-core-graph bryo-backend-equinox",
)
MEMBERS = sorted(
    str(p.parent.relative_to(ROOT))
    for p in ROOT.glob("*/*/pyproject.toml")
    if p.parts[-3] in ("packages", "plugins")
)

SPLIT_EQUINOX = """
import equinox as eqx, jax
import bryo_graph
_, state = bryo_graph.split(eqx.nn.Linear(2, 2, key=jax.random.key(0)))
print(sorted(state.flat_state()), bryo_graph.__file__)
"""


def _documented_commands() -> list[str]:
    text = (ROOT / "docs" / "index.md").read_text()
    section = text[text.index("### Into your own environment") :]
    section = section[: section.index("\n## ")]
    blocks = [block.split("```", 1)[0] for block in section.split("```bash\n")[1:]]
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_docs_show_the_commands_tested_here():
    assert _documented_commands() == list(DOCUMENTED)


class _Env:
    """uv, offline when no package index is reachable, and an environment without the
    workspace's virtual environment."""

    def __init__(self) -> None:
        self.uv = _uv()
        self.online = _index_reachable(_index_url())
        self.offline = [] if self.online else ["--offline"]
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))
        }

    def venv(self, path: Path) -> Path:
        _check(
            _run([*self.uv, "venv", "--python", sys.executable, str(path)], env=self.env), "venv"
        )
        return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def install(self, python: Path, *args: str) -> None:
        command = [*self.uv, "pip", "install", "--python", str(python), *self.offline, *args]
        result = _run(command, env=self.env, cwd=ROOT)
        if result.returncode != 0 and not self.online:
            pytest.skip(
                f"no package index reachable and uv's cache lacks a dependency:\n"
                f"{result.stderr[-2000:]}"
            )
        _check(result, " ".join(command[1:]))


def test_one_command_installs_the_whole_workspace(workdir):
    """`pip install ./packages/* ./plugins/*`, run as uv's pip (offline-capable)."""
    tools = _Env()
    python = tools.venv(workdir / "venv")
    tools.install(python, *(f"./{member}" for member in MEMBERS))
    bryo = python.parent / ("bryo.exe" if os.name == "nt" else "bryo")
    result = _run([str(bryo), "plugins", "--strict"], env=tools.env, cwd=workdir)
    _check(result, "bryo plugins --strict in the fresh venv")
    for plugin in ("backend-equinox", "backend-nnx", "serializer-xml", "serializer-yson"):
        assert f"  {plugin} " in result.stdout, result.stdout
    assert "FAILED" not in result.stdout


def test_chosen_members_install_from_wheels_built_into_dist(workdir):
    """`pip wheel ... --wheel-dir dist`, then `pip install --find-links dist MEMBERS`."""
    tools = _Env()
    dist = workdir / "dist"
    for member in MEMBERS:
        build = [*tools.uv, "build", "--wheel", "--out-dir", str(dist), *tools.offline, member]
        _check(_run(build, env=tools.env, cwd=ROOT), f"building the wheel of {member}")
    python = tools.venv(workdir / "venv")
    tools.install(python, "--find-links", str(dist), "bryo-core-graph", "bryo-backend-equinox")
    result = _run([str(python), "-c", SPLIT_EQUINOX], env=tools.env, cwd=workdir)
    _check(result, "splitting an Equinox model in the fresh venv")
    paths, file = result.stdout.strip().rsplit("] ", 1)
    assert paths == "[('bias',), ('weight',)"
    assert Path(file).is_relative_to(workdir / "venv")
    freeze = _run([*tools.uv, "pip", "freeze", "--python", str(python)], env=tools.env)
    _check(freeze, "uv pip freeze")
    names = [re.split(r"==| @ ", line)[0] for line in freeze.stdout.splitlines()]
    assert sorted(name for name in names if name.startswith("bryo")) == [
        "bryo-backend-equinox",
        "bryo-core-filters",
        "bryo-core-graph",
        "bryo-core-plugins",
        "bryo-core-pytree",
    ]
