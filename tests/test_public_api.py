"""Every public name imports, in documentation order: the API reference, then the facades."""

import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
REFERENCES = re.findall(r"^::: ([\w.]+)$", (DOCS / "api.md").read_text(), re.MULTILINE)


def resolve(dotted: str) -> object:
    module_name, _, attribute = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


@pytest.mark.parametrize("dotted", REFERENCES)
def test_api_reference_names_import(dotted):
    assert resolve(dotted) is not None


def test_the_reference_lists_names():
    assert len(REFERENCES) > 10


@pytest.mark.parametrize("facade", ["bryo", "bryo.nnx", "bryo.hax", "bryo.hax.nn", "bryo.mox"])
def test_facade_names_import(facade):
    module = importlib.import_module(facade)
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        assert getattr(module, name) is not None, f"{facade}.{name}"


def test_top_level_names():
    import bryo

    for name in ("split", "merge", "state", "update", "Rngs", "scan", "fold", "make_mox",
                 "eval_mox", "query", "sub", "Stacked", "nnx", "hax", "mox", "pytree"):
        assert hasattr(bryo, name), name
    import bryo.nnx  # noqa: F401  (the facades import as modules too)
    from bryo.nnx import Linear, Rngs, split  # noqa: F401
