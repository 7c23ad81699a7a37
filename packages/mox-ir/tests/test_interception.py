"""`bryo_mox.interception`: module paths (rebuilt modules included) and attributes."""

import numpy as np
import pytest

from bryo_mox import ModuleInfo, MoxError
from bryo_mox.interception import module_info, module_path, static_attributes
from bryo_plugins import standing_in


class Node:
    """A tiny module tree: attributes are children, arrays are leaves."""

    def __init__(self, **children):
        vars(self).update(children)


class Block(Node):
    pass


def walk(node, path=()):
    """Post-order `(path, value)` pairs, like `bryo_graph.iter_graph`."""
    if isinstance(node, Node):
        for key, value in vars(node).items():
            yield from walk(value, (*path, key))
    yield path, node


def block(*lead):
    return Block(w=np.zeros((*lead, 4, 8)), b=np.zeros((*lead, 8)))


def test_path_by_identity_and_top_level():
    child = block()
    parent = Node(layers=Node(first=child))
    assert module_path(child, None, walk) == ""
    assert module_path(child, (parent, ""), walk) == "layers/first"
    assert module_path(child, (parent, "model"), walk) == "model/layers/first"


class TorchLike:
    """Submodules in a private `_modules` dict; the graph's paths are its keys."""

    def __init__(self, **modules):
        self._modules = modules


def torch_walk(node, path=()):
    if isinstance(node, TorchLike):
        for key, value in node._modules.items():
            yield from torch_walk(value, (*path, key))
    yield path, node


def test_a_module_kept_in_a_private_attribute_takes_its_graph_path():
    """It was named `_modules/norm` (the attribute holding it), not `norm` (its path in
    the graph the backend's node type walks)."""
    child = TorchLike()
    parent = TorchLike(norm=child)
    assert module_path(child, (parent, "model"), torch_walk) == "model/norm"


def test_rebuilt_layer_of_a_stacked_trunk_takes_the_trunk_path():
    parent = Node(embed=Node(w=np.zeros((3, 4))), trunk=Node(stacked=block(5)))
    assert module_path(block(), (parent, ""), walk) == "trunk/stacked"
    assert module_path(block(), (parent, "model"), walk) == "model/trunk/stacked"


def test_rebuilt_copy_with_the_same_arrays_takes_the_original_path():
    parent = Node(one=block())
    assert module_path(block(), (parent, ""), walk) == "one"


def test_a_copy_standing_in_for_a_stacked_block_takes_its_path_among_two_alike():
    """Two stacks of one layout: the layout cannot tell them apart, `standing_in` can."""
    parent = Node(a=Node(stacked=block(5)), b=Node(stacked=block(5)))
    for name in ("a", "b"):
        layer = block()
        with standing_in(layer, getattr(parent, name).stacked):
            assert module_path(layer, (parent, "m"), walk) == f"m/{name}/stacked"


@pytest.mark.parametrize(
    "parent",
    [
        Node(a=Node(stacked=block(5)), b=Node(stacked=block(5))),  # ambiguous
        Node(a=Block(w=np.zeros((5, 4, 8)), b=np.zeros((6, 8)))),  # no common layers axis
        Node(a=Block(w=np.zeros((4, 8)))),  # other arrays
        Node(),  # nothing of the class
    ],
)
def test_unmatched_rebuilt_module_falls_back_to_its_class_name(parent):
    assert module_path(block(), (parent, "p"), walk) == "p/Block"


def test_static_attributes_filter_and_rename_reserved():
    attrs = static_attributes(
        {
            "features": 3,
            "name": "dense",
            "shape": (2, None),
            "_private": 1,
            "w": np.zeros(2),
            "nested": ((1,),),
        }.items()
    )
    assert attrs == {"features": 3, "module_name": "dense", "shape": (2, None)}
    info = module_info(Block(), "x", attrs)
    assert isinstance(info, ModuleInfo) and info.type.endswith("test_interception.Block")
    with pytest.raises(MoxError, match="reserved"):
        ModuleInfo("t", "x", {"name": 1})
