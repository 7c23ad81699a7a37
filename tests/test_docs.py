"""Every ```python block in docs/ runs, page by page, so the guides cannot rot.

Blocks of one page share a namespace and run in order, in a temporary directory. A block
written as a doctest (`>>>` prompts) has its printed output checked too. Fence code that
is not meant to run as ```text (or any other language).
"""

from __future__ import annotations

import doctest
import os
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text()))


def python_blocks(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_docs_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for line, code in python_blocks(page):
        if code.lstrip().startswith(">>>"):
            run_doctest(code, namespace, f"{page.name}:{line}")
            continue
        try:
            exec(compile(code, f"{page.name}:{line}", "exec", dont_inherit=True), namespace)
        except Exception as error:
            raise AssertionError(f"{page.name}, block at line {line} failed: {error!r}") from error
    assert os.getcwd() == str(tmp_path)


def run_doctest(code: str, namespace: dict[str, object], name: str) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(code, namespace, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    namespace.update(test.globs)  # doctest ran on a copy: carry its names to later blocks
    failed, _ = runner.summarize(verbose=False)
    assert not failed, f"{name}: {failed} doctest example(s) failed (see the output above)"
