"""`bryo plugin new`: each kind's distribution, generated, installed and tested as is.

Generates a serializer, a backend and a CLI plugin, installs them (no dependencies: bryo is
already in this environment) into a folder put on `PYTHONPATH` with uv, offline, so their
entry points are real `*.dist-info` ones, and runs each one's generated tests in a fresh
pytest process. Skipped when uv cannot build them offline (no hatchling in its cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bryo._cli import main

pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.timeout(1500)]

KINDS = ("serializer", "backend", "cli")


def _uv() -> str:
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pytest.skip("uv is not installed (it comes with the hatch-test environment)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("scaffolds")
    for kind in KINDS:
        assert main(["plugin", "new", f"acme-{kind}", "--kind", kind, "-o", str(root / kind)]) == 0
    site = root / "site"
    install = subprocess.run(
        [_uv(), "pip", "install", "--offline", "--no-deps", "--target", str(site)]
        + [str(root / kind) for kind in KINDS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0:
        pytest.skip(f"cannot build the scaffolds offline:\n{install.stderr[-2000:]}")
    return root, site


@pytest.mark.parametrize("kind", KINDS)
def test_the_generated_plugin_passes_its_own_tests(installed, kind):
    root, site = installed
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root / kind,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout
