"""Every public name of the facades imports (the API reference's entries: test_api_reference)."""

import importlib
from pathlib import Path

import pytest

NNX_SUBMODULES = [
    "bryo.nnx.nn",
    *(
        f"bryo.nnx.nn.{name}"
        for name in (
            "activations",
            "attention",
            "dtypes",
            "initializers",
            "linear",
            "lora",
            "normalization",
            "recurrent",
            "stochastic",
        )
    ),
    "bryo.nnx.training",
    "bryo.nnx.training.metrics",
    "bryo.nnx.training.optimizer",
    "bryo.nnx.compat",
]


@pytest.mark.parametrize(
    "facade", ["bryo", "bryo.nnx", "bryo.hax", "bryo.hax.nn", "bryo.mox", *NNX_SUBMODULES]
)
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
        "index",
        "ds",
        "dslice",
    ],
    "bryo.hax.nn": ["Stacked", "BlockSeq", "scan"],
    "bryo.mox": ["make_mox", "eval_mox", "query", "sub", "dumps", "loads", "dump", "load"],
}


@pytest.mark.parametrize("facade", sorted(SEED_NAMES))
def test_the_seeds_names_are_in_the_facades(facade):
    module = importlib.import_module(facade)
    missing = [name for name in SEED_NAMES[facade] if not hasattr(module, name)]
    assert not missing, f"{facade} lacks {missing}"


HALIAX_MODULES = {
    "bryo.hax.jax_utils": ["tree_checkpoint_name"],
    "bryo.hax.axis": [
        "axis_spec_to_shape_dict",
        "axis_spec_to_tuple",
        "axis_name",
        "make_axes",
        "dslice",
        "ds",
        "dblock",
    ],
    "bryo.hax.util": ["is_named_array", "is_jax_or_hax_array_like"],
    "bryo.hax.nn.scan": ["Stacked", "BlockSeq", "BlockFoldable", "ScanCheckpointPolicy"],
}


@pytest.mark.parametrize("name", sorted(HALIAX_MODULES))
def test_haliax_module_paths_are_modules_of_their_own(name):
    """`from haliax.nn.scan import Stacked` becomes `from bryo.hax.nn.scan import Stacked`:
    each path is a file, importable by itself and reachable as an attribute."""
    module = importlib.import_module(name)
    assert module.__name__ == name
    assert Path(module.__file__).with_suffix("").parts[-2:] == tuple(name.split(".")[-2:])
    parent_name, _, leaf = name.rpartition(".")
    assert getattr(importlib.import_module(parent_name), leaf) is module
    missing = [n for n in HALIAX_MODULES[name] if not hasattr(module, n)]
    assert not missing, f"{name} lacks {missing}"
