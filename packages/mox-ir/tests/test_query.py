from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import pytest

from bryo_mox import Equation, ModuleCall, Mox, MoxError, make_mox, query
from bryo_mox._ir import Region
from bryo_mox._view import attribute_names, element_view
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
    view = element_view(mox)
    query("//module_call", mox)
    assert element_view(mox) is view


def test_bad_xpath(mox):
    with pytest.raises(MoxError, match="not valid XPath"):
        query("//module_call[", mox)


def test_seed_resblock_query(toy):
    block = ResBlock(10, key=jax.random.key(0))
    mox = make_mox(block)(jnp.ones((1, 10)))
    (dense,) = query("//module_call[@features=10]", mox)
    assert dense.info.short_type == "Linear" and dense.name == "dense"


def test_attribute_names_a_query_reads():
    assert attribute_names('//module_call[@type="Linear"]') == {"type"}
    assert attribute_names("//a[@x=1 and attribute::y]/@z") == {"x", "y", "z"}
    assert attribute_names('//a[@name="@b"]') == {"name"}  # inside strings: not attributes
    for reads_any in ("//*[@*]", "//a/attribute::node()", "//a[@p:x]", "//a[@ node()]"):
        assert attribute_names(reads_any) == {"*"}
    assert attribute_names("//dot_general/..") == frozenset()


def test_view_fills_only_the_attributes_queries_read(mox):
    query('//module_call[@type="Linear"]', mox)
    view = element_view(mox)
    dot = next(view.root.iter("dot_general"))
    calls = list(view.root.iter("module_call"))
    assert set(calls[1].attrib) == {"type"} and dict(dot.attrib) == {}
    (text,) = set(query("//dot_general/@dimension_numbers", mox))
    assert text == "(((1,), (0,)), ((), ()))"
    assert "preferred_element_type" not in dot.attrib
    everything = query("//dot_general/@*", mox)
    assert "dtype('float32')" in everything and "preferred_element_type" in dot.attrib


def test_region_elements_are_region_records(toy, mlp, x):
    def summed(m, xs):
        return jax.lax.scan(lambda total, row: (total + m(row).sum(), None), 0.0, xs)[0]

    mox = make_mox(summed)(mlp, x)
    (region,) = query("//scan/region", mox)
    assert isinstance(region, Region) and region.param == "jaxpr" and region.closed
    assert query('//region[@param="jaxpr"]/module_call/@name', mox) == [""]
    assert names(query("//scan//module_call[@type='Linear']", mox)) == ["layers/0", "layers/1"]


def test_xpath_errors_are_mox_errors(mox):
    with pytest.raises(MoxError, match="cannot be evaluated"):
        query("//module_call[nope(1)]", mox)


def test_concurrent_queries_see_one_view(mox):
    xpaths = ['//module_call[@type="Linear"]', "//dot_general/@dimension_numbers", "//*[@*]"]
    expected = {xpath: query(xpath, make_mox_copy(mox)) for xpath in xpaths}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda xp: (xp, query(xp, mox)), xpaths * 8))
    for xpath, result in results:
        assert [str(r) if isinstance(r, str) else type(r).__name__ for r in result] == [
            str(r) if isinstance(r, str) else type(r).__name__ for r in expected[xpath]
        ]


def make_mox_copy(mox):
    """The same MoX without its cached view."""
    return Mox(mox.block, mox.in_tree, mox.out_tree, mox.extra_params)


def test_arguments_in_the_wrong_order_are_named(mox):
    with pytest.raises(MoxError, match=r"XPath first and the Mox second.*query\(xpath, mox\)"):
        query(mox, "//module_call")  # type: ignore[arg-type]  # the mistake under test
    with pytest.raises(MoxError, match="must be a Mox, got int"):
        query("//module_call", 3)  # type: ignore[arg-type]  # the mistake under test
