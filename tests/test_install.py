"""Install only what you need: `bryo-core-pytree` alone pulls in jax and bryo-core-plugins.

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
