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

    for name in (
        "split",
        "merge",
        "state",
        "update",
        "Rngs",
        "scan",
        "fold",
        "make_mox",
        "eval_mox",
        "query",
        "sub",
        "Stacked",
        "nnx",
        "hax",
        "mox",
        "pytree",
    ):
        assert hasattr(bryo, name), name
    import bryo.nnx
    from bryo.nnx import Linear, Rngs, split  # noqa: F401


SEED_NAMES = {
    "bryo.nnx": [
        "filterlib",
        "graph",
        "split",
        "merge",
        "state",
        "update",
        "Rngs",
        "jit",
        "vmap",
        "scan",
        "grad",
        "StateAxes",
        "Carry",
        "fork_rngs",
        "reseed",
        "Linear",
        "Dropout",
        "display",
        "VariableState",
        "State",
        "OfType",
    ],
    "bryo.hax": [
        "Axis",
        "NamedArray",
        "scan",
        "fold",
        "map",
        "random",
        "zeros",
        "full",
        "minimum",
        "maximum",
        "arange",
        "tree_checkpoint_name",
        "nn",
        "ScanCheckpointPolicy",
    ],
    "bryo.hax.nn": ["Stacked", "BlockSeq", "scan"],
    "bryo.mox": ["make_mox", "eval_mox", "query", "sub", "dumps", "loads", "dump", "load"],
}


@pytest.mark.parametrize("facade", sorted(SEED_NAMES))
def test_the_seeds_names_are_in_the_facades(facade):
    module = importlib.import_module(facade)
    missing = [name for name in SEED_NAMES[facade] if not hasattr(module, name)]
    assert not missing, f"{facade} lacks {missing}"
