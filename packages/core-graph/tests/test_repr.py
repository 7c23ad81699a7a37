"""`repr` of Objects, `List`s and `Dict`s (and `render`): Flax NNX 0.12's layout, one
attribute per line in the order they were set, each node's first line counting the
Variables below it by type; shared and cyclic nodes print once; linear in the model."""

import sys

import jax.numpy as jnp
import pytest

import bryo_graph._repr as repr_module
from bryo_graph import (
    BatchStat,
    Dict,
    List,
    Object,
    Param,
    Variable,
    data,
    format_bytes,
    render,
    variable_size,
)


class Norm(Object):
    def __init__(self, n: int) -> None:
        self.mean = BatchStat(jnp.zeros((n,)))
        self.scale = Param(jnp.ones((n,)))
        self.n = n


class Dense(Object):
    def __init__(self, a: int, b: int) -> None:
        self.kernel = Param(jnp.ones((a, b)))
        self.norm = Norm(b)


class Net(Object):
    def __init__(self) -> None:
        self.width = 3
        self.dense = Dense(2, 3)
        self.heads = List([Dense(3, 1), Norm(1)])


def test_every_module_level_counts_its_variables_on_its_first_line():
    assert repr(Net()) == "\n".join(
        [
            "Net( # Param: 14 (56 B), BatchStat: 5 (20 B), Total: 19 (76 B)",
            "  width=3,",
            "  dense=Dense( # Param: 9 (36 B), BatchStat: 3 (12 B), Total: 12 (48 B)",
            "    kernel=Param( # 6 (24 B)",
            "      value=f32[2,3]",
            "    ),",
            "    norm=Norm( # BatchStat: 3 (12 B), Param: 3 (12 B), Total: 6 (24 B)",
            "      mean=BatchStat( # 3 (12 B)",
            "        value=f32[3]",
            "      ),",
            "      scale=Param( # 3 (12 B)",
            "        value=f32[3]",
            "      ),",
            "      n=3",
            "    )",
            "  ),",
            "  heads=List([",
            "    Dense( # Param: 4 (16 B), BatchStat: 1 (4 B), Total: 5 (20 B)",
            "      kernel=Param( # 3 (12 B)",
            "        value=f32[3,1]",
            "      ),",
            "      norm=Norm( # BatchStat: 1 (4 B), Param: 1 (4 B), Total: 2 (8 B)",
            "        mean=BatchStat( # 1 (4 B)",
            "          value=f32[1]",
            "        ),",
            "        scale=Param( # 1 (4 B)",
            "          value=f32[1]",
            "        ),",
            "        n=1",
            "      )",
            "    ),",
            "    Norm( # BatchStat: 1 (4 B), Param: 1 (4 B), Total: 2 (8 B)",
            "      mean=BatchStat( # 1 (4 B)",
            "        value=f32[1]",
            "      ),",
            "      scale=Param( # 1 (4 B)",
            "        value=f32[1]",
            "      ),",
            "      n=1",
            "    )",
            "  ])",
            ")",
        ]
    )


def test_attributes_show_in_the_order_they_were_set():
    class Late(Object):
        def __init__(self) -> None:
            self.zeta = 1
            self.alpha = Param(jnp.ones(()))
            self.mid = "m"
            self._hidden = "static and private: not shown"
            self._weights = Param(jnp.ones((2,)))  # private data: shown (as Flax)

    lines = repr(Late()).splitlines()
    names = [line.strip().split("=")[0] for line in lines if line.startswith("  ") and "=" in line]
    assert [n for n in names if not n.startswith("value")] == ["zeta", "alpha", "mid", "_weights"]
    assert "  alpha=Param( # 1 (4 B)\n    value=f32[] 1.0\n  )," in repr(Late())
    assert "_object__" not in repr(Late())


def test_a_module_without_variables_has_no_comment_and_an_empty_one_no_lines():
    class Empty(Object):
        pass

    class Config(Object):
        def __init__(self) -> None:
            self.rate = 0.5
            self.dtype = jnp.float32

    assert repr(Empty()) == "Empty()"
    assert repr(Config()) == "Config(\n  rate=0.5,\n  dtype=float32\n)"


def test_a_shared_node_prints_once_and_counts_once():
    class Pair(Object):
        def __init__(self) -> None:
            self.first = Norm(2)
            self.again = self.first

    text = repr(Pair())
    assert text.startswith("Pair( # BatchStat: 2 (8 B), Param: 2 (8 B), Total: 4 (16 B)\n")
    assert text.endswith("  again=Norm(...)\n)")
    assert text.count("mean=BatchStat(") == 1


def test_a_second_parent_of_a_shared_node_adds_nothing_as_in_flax():
    # The statistics come from one walk in flattening (sorted) order: the shared node is
    # counted under `a`, met first there, and `b` counts nothing of it; the text, in
    # attribute order, shows it in full under `b` and as seen under `a` (Flax prints this).
    class Wrap(Object):
        def __init__(self, inner: Object) -> None:
            self.inner = inner

    class Two(Object):
        def __init__(self) -> None:
            shared = Norm(2)
            self.b = Wrap(shared)
            self.a = Wrap(shared)

    lines = repr(Two()).splitlines()
    assert lines[0] == "Two( # BatchStat: 2 (8 B), Param: 2 (8 B), Total: 4 (16 B)"
    assert lines[1:3] == [
        "  b=Wrap(",
        "    inner=Norm( # BatchStat: 2 (8 B), Param: 2 (8 B), Total: 4 (16 B)",
    ]
    assert lines[-4:] == [
        "  a=Wrap( # BatchStat: 2 (8 B), Param: 2 (8 B), Total: 4 (16 B)",
        "    inner=Norm(...)",
        "  )",
        ")",
    ]


def test_a_cycle_ends_at_the_node_met_again():
    class Node(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones((3,)))
            self.children = List([])

    root = Node()
    child = Node()
    root.children.append(child)
    child.children.append(root)
    assert repr(root) == "\n".join(
        [
            "Node( # Param: 6 (24 B)",
            "  w=Param( # 3 (12 B)",
            "    value=f32[3]",
            "  ),",
            "  children=List([",
            "    Node( # Param: 3 (12 B)",
            "      w=Param( # 3 (12 B)",
            "        value=f32[3]",
            "      ),",
            "      children=List([",
            "        Node(...)",
            "      ])",
            "    )",
            "  ])",
            ")",
        ]
    )


def test_lists_and_dicts_print_as_flax_nnx_does():
    assert repr(List([])) == "List([])"
    assert repr(Dict()) == "Dict({})"
    assert repr(List([1, Param(jnp.ones((2,)))])) == (
        "List([\n  1,\n  Param( # 2 (8 B)\n    value=f32[2]\n  )\n])"
    )
    assert repr(Dict(a=1, b=List([2, 3]))) == (
        "Dict({\n  'a': 1,\n  'b': List([\n    2,\n    3\n  ])\n})"
    )


def test_plain_containers_of_variables_open_up_and_of_values_stay_on_one_line():
    class Holder(Object):
        def __init__(self) -> None:
            self.pair = data((Param(jnp.ones((2,))), 3))
            self.sizes = (1, 2)
            self.table = data({"k": jnp.ones((4,))})

    assert repr(Holder()) == "\n".join(
        [
            "Holder( # Param: 2 (8 B)",
            "  pair=(",
            "    Param( # 2 (8 B)",
            "      value=f32[2]",
            "    ),",
            "    3",
            "  ),",
            "  sizes=(1, 2),",
            "  table={'k': f32[4]}",
            ")",
        ]
    )


def test_variables_print_their_metadata_and_plain_values_no_size():
    class Tagged(Object):
        def __init__(self) -> None:
            self.count = Variable(0, tag="steps")

    assert repr(Tagged()) == "Tagged(\n  count=Variable(\n    value=0,\n    tag='steps'\n  )\n)"


def test_sizes_and_bytes_are_written_as_flax_writes_them():
    assert [format_bytes(n) for n in (0, 176, 1000, 24_280, 4_000_000, 1_500_000_000)] == [
        "0 B",
        "176 B",
        "1,000 B",
        "24.3 KB",
        "4.0 MB",
        "1.5 GB",
    ]
    assert str(variable_size(Param(jnp.ones((6070,))))) == "6,070 (24.3 KB)"
    assert str(variable_size(Variable(jnp.ones((3,), jnp.int8)))) == "3 (3 B)"


def test_render_shows_a_variable_as_a_block_and_other_values_as_their_repr():
    assert render(Param(jnp.ones((2, 3)))) == "Param( # 6 (24 B)\n  value=f32[2,3]\n)"
    assert render(3) == "3"
    assert repr(Param(jnp.ones((2, 3)))) == "Param(value=f32[2,3])"  # unchanged, one line


def test_a_thousand_layers_print_in_one_walk(monkeypatch: pytest.MonkeyPatch):
    calls = 0
    node_type_of = repr_module.node_type_of

    def counted(value: object) -> object:
        nonlocal calls
        calls += 1
        return node_type_of(value)

    monkeypatch.setattr(repr_module, "node_type_of", counted)

    class Deep(Object):
        def __init__(self, n: int) -> None:
            self.layers = List([Norm(4) for _ in range(n)])

    text = repr(Deep(1000))
    lines = text.splitlines()
    assert len(lines) == 4 + 1000 * 9 and max(map(len, lines)) < 100
    assert lines[0] == (
        "Deep( # BatchStat: 4,000 (16.0 KB), Param: 4,000 (16.0 KB), Total: 8,000 (32.0 KB)"
    )
    assert calls <= 2 * 1000 + 10  # each node's children are looked up once, not per level


def test_a_chain_deeper_than_the_recursion_limit_prints():
    class Link(Object):
        def __init__(self, inner: object) -> None:
            self.w = Param(jnp.ones(()))
            self.inner = inner

    depth = sys.getrecursionlimit() + 100
    chain: object = None
    for _ in range(depth):
        chain = Link(chain)
    text = repr(chain)
    assert text.startswith(f"Link( # Param: {depth:,} ({format_bytes(4 * depth)})\n")
    assert text.count("\n") == depth * 5
