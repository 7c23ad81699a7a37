"""`tree_display`: one line per node, arrays by dtype and shape."""

from __future__ import annotations

from collections import namedtuple

import jax.numpy as jnp
import numpy as np
import pytest

from bryo_pytree import describe_leaf, pytree_dataclass, static_field, tree_display

Point = namedtuple("Point", ["x", "y"])


@pytree_dataclass
class Linear:
    kernel: object
    bias: object
    name: str = static_field(default="linear")


def test_display_of_a_model():
    tree = {
        "layers": [Linear(jnp.ones((2, 3)), jnp.zeros(3, jnp.int32))],
        "point": Point(np.float64(1.5), (None, {})),
        "name": "mlp",
    }
    assert tree_display(tree) == "\n".join(
        [
            "dict",
            "  layers: list",
            "    [0]: Linear",
            "      kernel: f32[2,3]",
            "      bias: i32[3]",
            "  name: 'mlp'",
            "  point: Point",
            "    x: f64[]",
            "    y: tuple",
            "      [0]: None",
            "      [1]: dict (empty)",
        ]
    )


def test_display_of_leaves_and_empty_nodes():
    assert tree_display(3) == "3"
    assert tree_display(None) == "None"
    assert tree_display([]) == "list (empty)"
    assert tree_display(jnp.ones((2,), jnp.bfloat16)) == "bfloat16[2]"


def test_display_is_leaf_and_indent():
    tree = {"a": [1, 2], "b": (3,)}
    text = tree_display(tree, is_leaf=lambda x: isinstance(x, list), indent="    ")
    assert text == "dict\n    a: [1, 2]\n    b: tuple\n        [0]: 3"


@pytest.mark.parametrize(
    ("leaf", "text"),
    [
        (jnp.zeros((2, 3)), "f32[2,3]"),
        (np.zeros((), np.uint8), "u8[]"),
        (np.zeros(4, np.complex64), "c64[4]"),
        (np.zeros(1, bool), "bool[1]"),
        ("x" * 100, repr("x" * 100)[:57] + "..."),
        (1.5, "1.5"),
    ],
)
def test_describe_leaf(leaf, text):
    assert describe_leaf(leaf) == text
