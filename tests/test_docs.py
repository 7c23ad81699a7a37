"""Every ```python block in docs/ runs, page by page, so the guides cannot rot.

Blocks of one page share a namespace and run in order, in a temporary directory. A block
written as a doctest (`>>>` prompts) has its printed output checked too, so sample outputs
are produced here rather than pasted. Any other fence (```text, ```xml, an indented one)
is not run, so it must not call bryo: `test_no_untested_fence_calls_bryo` fails on a fence
that imports bryo or calls `bryo.`, `bryo_*.`, `nnx.`, `hax.`, `yax.` or `mox.` functions.
Shell sessions (```bash, ```console) are exempt: they run the `bryo` command, not Python.
A fence titled with a file path (```python title="pkg/module.py"```) is a file listing: it
is written to that path in a temporary directory, and each package so written is imported
in a fresh interpreter (importing may register hooks and plugins for good: not in this one).
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text()))
ALL_PAGES = sorted(DOCS.glob("*.md"))
FILE_BLOCK = re.compile(r'^```python title="(?P<path>[\w/.]+\.py)"\n(?P<body>.*?)^```', re.M | re.S)
FILE_PAGES = sorted(p for p in ALL_PAGES if FILE_BLOCK.search(p.read_text()))
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)"
    r"^(?P=indent)(?P=ticks)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
BRYO_CALL = re.compile(
    r"^\s*(?:from|import)\s+bryo\w*|\b(?:bryo\w*|nnx|hax|yax|mox)(?:\.\w+)+\s*\(",
    re.MULTILINE,
)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}


def python_blocks(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


ALIAS = re.compile(r"^\s*import\s+bryo\w*(?:\.\w+)*\s+as\s+(\w+)", re.MULTILINE)


def bryo_calls(markdown: str) -> re.Pattern[str]:
    """Calls of bryo, including through the aliases the page imports it under (`bg.`)."""
    aliases = "".join(f"|{re.escape(alias)}" for alias in sorted(set(ALIAS.findall(markdown))))
    if not aliases:
        return BRYO_CALL
    return re.compile(BRYO_CALL.pattern + rf"|\b(?:{aliases[1:]})(?:\.\w+)+\s*\(", re.MULTILINE)


def untested_fences_calling_bryo(markdown: str) -> list[tuple[int, str]]:
    """`(line, first call)` of each fence that calls bryo but that the docs test does not run."""
    calls = bryo_calls(markdown)
    found = []
    for fence in FENCE.finditer(markdown):
        language = fence["info"].strip().split(" ")[0]
        tested = language == "python" and fence["indent"] == ""
        if tested or language in SHELL_LANGUAGES:
            continue
        call = calls.search(fence["body"])
        if call:
            found.append((markdown.count("\n", 0, fence.start()) + 1, call.group(0).strip()))
    return found


@pytest.mark.parametrize("page", ALL_PAGES, ids=[p.stem for p in ALL_PAGES])
def test_no_untested_fence_calls_bryo(page: Path) -> None:
    found = untested_fences_calling_bryo(page.read_text())
    where = "; ".join(f"line {line}: `{call}`" for line, call in found)
    assert not found, (
        f"{page.name}: fences that call bryo but are not run by this test ({where}); make "
        "them ```python blocks at the start of a line (a doctest to show output)."
    )


def test_the_fence_check_catches_text_xml_and_indented_blocks() -> None:
    page = (
        "```text\nmox = yax.make_mox(f)(x)\n```\n"
        "```xml\n<module_call features='10'/>\n```\n"
        "!!! note\n    ```python\n    import bryo\n    ```\n"
        "```python\nbryo.split(model)\n```\n"
        "```bash\nbryo demo --quiet\n```\n"
        "```\nfrom bryo import nnx\n```\n"
        "```python\nimport bryo_graph as bg\n```\n"
        "```text\nmesh = bg.make_mesh({'data': 2})\n```\n"
    )
    assert untested_fences_calling_bryo(page) == [
        (1, "yax.make_mox("),
        (8, "import bryo"),
        (17, "from bryo"),
        (23, "bg.make_mesh("),
    ]


# Pages whose examples train or trace for a while run with the slow tests.
SLOW_PAGES = {"flax"}

# Pages that train with `optax.adam`: optax's `tree.bias_correction` computes
# `1 - decay**count` (a Python float to an int32 power), which the strict dtype promotion
# of the test suite (conftest.py) refuses, so these run with JAX's standard promotion.
OPTAX_ADAM_PAGES = {"training", "tutorial"}


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_PAGES else p for p in PAGES],
    ids=[p.stem for p in PAGES],
)
def test_docs_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    promotion = (
        "standard" if page.stem in OPTAX_ADAM_PAGES else jax.config.jax_numpy_dtype_promotion
    )
    with jax.numpy_dtype_promotion(promotion):
        run_page(page, namespace)
    assert os.getcwd() == str(tmp_path)


def run_page(page: Path, namespace: dict[str, object]) -> None:
    """Run `page`'s python blocks in order in `namespace` (doctests checked)."""
    for line, code in python_blocks(page):
        if code.lstrip().startswith(">>>"):
            run_doctest(code, namespace, f"{page.name}:{line}")
            continue
        try:
            exec(compile(code, f"{page.name}:{line}", "exec", dont_inherit=True), namespace)
        except Exception as error:
            raise AssertionError(f"{page.name}, block at line {line} failed: {error!r}") from error


def run_doctest(code: str, namespace: dict[str, object], name: str) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(code, namespace, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    namespace.update(test.globs)  # doctest ran on a copy: carry its names to later blocks
    failed, _ = runner.summarize(verbose=False)
    assert not failed, f"{name}: {failed} doctest example(s) failed (see the output above)"


@pytest.mark.parametrize("page", FILE_PAGES, ids=[p.stem for p in FILE_PAGES])
def test_docs_file_listings_import(page: Path, tmp_path: Path) -> None:
    packages = set()
    for listing in FILE_BLOCK.finditer(page.read_text()):
        path = tmp_path / listing["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(listing["body"])
        packages.add(Path(listing["path"]).parts[0].removesuffix(".py"))
    imports = "; ".join(f"import {name}" for name in sorted(packages))
    done = subprocess.run(
        [sys.executable, "-c", imports], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{page.name}: `{imports}` failed:\n{done.stderr}"
