"""The NNX-style Module as a graph node: attributes, containers, change tracking, modes."""

import jax
import numpy as np
import pytest

from bryo_graph import BatchStat, Dict, List, Param, Variable, graphdef, merge, split, state
from bryo_nnx import Module, iter_modules, render


class Block(Module):
    def __init__(self, width):
        self.w = Param(np.ones((width, width), np.float32))
        self.deterministic = False
        self.use_running_average = False
        self.width = width


class Net(Module):
    def __init__(self):
        self.blocks = List([Block(2), Block(3)])
        self.heads = Dict({"a": Block(1)})
        self.stats = BatchStat(np.zeros(2))


def test_lists_and_dicts_of_modules_are_children():
    net = Net()
    assert isinstance(net.blocks, List) and isinstance(net.heads, Dict)
    paths = set(state(net).flat_state())
    assert paths == {("blocks", 0, "w"), ("blocks", 1, "w"), ("heads", "a", "w"), ("stats",)}
    copy = merge(*split(net))
    assert isinstance(copy.blocks, List) and copy.blocks[1].width == 3
    assert isinstance(copy.heads["a"], Block)


def test_container_mutations_change_the_graphdef():
    net = Net()
    before = graphdef(net)
    net.blocks.append(Block(4))
    after_append = graphdef(net)
    assert after_append != before
    net.heads["b"] = Block(1)
    assert graphdef(net) != after_append
    del net.heads["b"]
    net.blocks.pop()
    assert graphdef(net) == before


def test_iter_modules_lists_every_module_once():
    net = Net()
    net.alias = net.blocks[0]
    modules = list(iter_modules(net))
    with pytest.warns(DeprecationWarning, match=r"'m.iter_modules\(\)' method is deprecated"):
        assert [p for p, _ in net.iter_modules()] == [p for p, _ in modules]  # Flax's old spelling
    assert [path for path, _ in modules][-1] == ()
    assert sum(1 for _, m in modules if m is net.blocks[0]) == 1
    assert len(modules) == 4


def test_train_and_eval_flip_flags_everywhere():
    net = Net()
    net.eval()
    assert all(b.deterministic and b.use_running_average for b in net.blocks)
    net.train()
    assert not net.heads["a"].deterministic


def test_set_attributes_names_missing_attributes():
    net = Net()
    with pytest.raises(ValueError, match=r"\['nonexistent'\]"):
        net.set_attributes(nonexistent=1)
    net.set_attributes(width=7, nonexistent=1, raise_if_not_found=False)
    assert net.blocks[0].width == 7


def test_repr_shows_attributes():
    text = repr(Block(2))
    assert text.startswith("Block(") and "w=Param(" in text and "width=2" in text


def test_repr_leaves_out_pytree_bookkeeping():
    block = Block(2)
    jax.tree_util.tree_leaves(block)  # caches the treedef node on the module
    for text in (repr(block), render(block)):
        assert "_object__" not in text and "width=2" in text


def test_modules_hold_generic_variables():
    class Counter(Module):
        def __init__(self):
            self.count = Variable(np.array(0))

    counter = Counter()
    counter.count.value += 1
    _, counts = split(counter, Variable)
    assert counts["count"].value == 1
