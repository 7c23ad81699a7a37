"""The docs site builds (mkdocs --strict) and looks right in a real browser.

Slow, and skipped where mkdocs or Chromium is missing (the docs build itself is CI's
`hatch run docs:build`). It builds the site, checks that the API reference has an anchor
for every name its pages render, and takes headless-Chromium screenshots of the index
and the Checkpointing guide into the test's temporary folder (`BRYO_SCREENSHOTS=DIR`
keeps them in DIR).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_every_rendered_api_name_has_an_anchor(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "docs_hooks"))
    import bryo_api_pages  # the mkdocs hook generating the API pages

    for path, markdown in sorted(bryo_api_pages.api_pages().items()):
        names = re.findall(r"^::: (\S+)$", markdown, re.MULTILINE)
        html = (site / path.removesuffix(".md") / "index.html").read_text()
        missing = [n for n in names if f'id="{n}"' not in html]
        assert not missing, f"{path}: not rendered: {missing}"


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to take screenshots with")
@pytest.mark.parametrize("page", ["index.html", "checkpointing/index.html"])
def test_pages_render_in_headless_chromium(site: Path, page: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("BRYO_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    shot = folder / (page.replace("/", "-").removesuffix(".html") + ".png")
    command = [
        str(CHROMIUM),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1400,1000",
        f"--screenshot={shot}",
        (site / page).as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=300, check=True)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    html = (site / page).read_text()
    assert "md-tabs" in html and "md-search" in html  # material's tabs and search
