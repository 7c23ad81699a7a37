import jax
import jax.numpy as jnp
import pytest

from bryo_mox import Equation, ModuleCall, Mox, MoxError, make_mox, query
from bryo_mox.testing import MLP, ResBlock


@pytest.fixture
def mox(toy):
    model = MLP((3, 4, 4, 2), key=jax.random.key(0))
    return make_mox(lambda m, v: m(v))(model, jnp.ones((2, 3)))


def names(nodes):
    return [n.name for n in nodes]


def test_attribute_tests(mox):
    assert names(query("//module_call[@features=4]", mox)) == ["layers/0", "layers/1"]
    assert names(query('//module_call[@type="Linear"]', mox)) == [
        "layers/0",
        "layers/1",
        "layers/2",
    ]
    assert names(query('//module_call[@qualtype="bryo_mox.testing.Linear"]', mox))[0] == "layers/0"
    assert query('//module_call[@type="Dense"]', mox) == []


def test_pjit_alias_and_custom_jvp(mox):
    jits = query('//pjit[@name="relu"]', mox)
    assert len(jits) == 2 and all(n.primitive.name in ("jit", "pjit") for n in jits)
    assert len(query('//jit[@name="relu"]', mox)) == 2
    relus = query('//custom_jvp_call[@name="relu"]', mox)
    assert all(isinstance(n, Equation) and n.name == "relu" for n in relus)
    # a string literal spelled pjit is left alone
    assert query('//module_call[@name="pjit"]', mox) == []


def test_paths_predicates_wildcards_parent_union(mox):
    assert isinstance(query("/mox", mox)[0], Mox)
    top = query("/mox/module_call", mox)
    assert [n.info.short_type for n in top] == ["MLP"]
    assert names(query("/mox/module_call/module_call[2]", mox)) == ["layers/1"]
    assert names(query("/mox/module_call/module_call[last()]", mox)) == ["layers/2"]
    kids = query("/mox/module_call/*[self::module_call or self::custom_jvp_call]", mox)
    assert [type(n).__name__ for n in kids] == [
        "ModuleCall",
        "Equation",
        "ModuleCall",
        "Equation",
        "ModuleCall",
    ]
    assert query('//module_call[@type="Linear"]/..', mox) == top
    both = query("//module_call[@features=2] | //module_call[@in_features=3]", mox)
    assert names(both) == ["layers/0", "layers/2"]  # document order
    assert query("count(//module_call)", mox) == 4.0
    assert names(query("//dot_general/..", mox)) == ["layers/0", "layers/1", "layers/2"]
    assert query('//module_call[@name="layers/0"]/input', mox) == []  # nodes only
    assert query('//module_call[@name="layers/0"]/@features', mox) == ["4"]


def test_results_are_nodes_of_the_mox(mox):
    (first,) = query('//module_call[@name="layers/0"]', mox)
    mlp = mox.nodes[0]
    assert first is mlp.nodes[0] and isinstance(first, ModuleCall)


def test_view_is_cached(mox):
    query("//add", mox)
    view = mox._view
    query("//module_call", mox)
    assert mox._view is view


def test_bad_xpath(mox):
    with pytest.raises(MoxError, match="not valid XPath"):
        query("//module_call[", mox)


def test_seed_resblock_query(toy):
    block = ResBlock(10, key=jax.random.key(0))
    mox = make_mox(block)(jnp.ones((1, 10)))
    (dense,) = query("//module_call[@features=10]", mox)
    assert dense.info.short_type == "Linear" and dense.name == "dense"
