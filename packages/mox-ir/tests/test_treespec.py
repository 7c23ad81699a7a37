"""Files record the argument and result structures (paths and node kinds): a loaded MoX
takes the arguments the traced one took, and names the path where they differ."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo_mox as mox_lib
from bryo_mox import MoxError, MoxSerializationError
from bryo_mox._treespec import MAX_PARSED_TEXT, PARSED, TreeSpec, spec_text
from bryo_mox.testing import MLP, Linear, assert_round_trip

FORMATS = ("xml", "yson")


@pytest.mark.parametrize("format", FORMATS)
def test_a_loaded_mox_takes_the_model_and_rebuilds_the_result(toy, mlp, x, format):
    mox = mox_lib.make_mox(lambda m, v, *, scale: {"y": m(v) * scale, "m": m})(
        mlp, x, scale=jnp.float32(2.0)
    )
    back = mox_lib.loads(mox_lib.dumps(mox, format), format)
    assert back.in_tree is None and back.in_spec is not None and back.out_spec is not None
    got = mox_lib.eval_mox(back, mlp, x, scale=jnp.float32(2.0))
    want = mox_lib.eval_mox(mox, mlp, x, scale=jnp.float32(2.0))
    # the result's model is rebuilt from the argument of the same structure
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    jitted = jax.jit(lambda m, v: mox_lib.eval_mox(back, m, v, scale=jnp.float32(2.0)))
    np.testing.assert_allclose(jitted(mlp, x)["y"], want["y"], rtol=1e-6)


@pytest.mark.parametrize("format", FORMATS)
def test_a_mismatch_names_the_path(toy, mlp, x, format):
    back = mox_lib.loads(mox_lib.dumps(mox_lib.make_mox(lambda m, v: m(v))(mlp, x), format), format)
    deeper = MLP((3, 4, 4, 2), key=jax.random.key(0))
    with pytest.raises(MoxError, match=r"at `args\[0\]\.layers` they hold a `list` of 3"):
        mox_lib.eval_mox(back, deeper, x)
    with pytest.raises(MoxError, match=r"at `args` they hold a `tuple` of 1 children"):
        mox_lib.eval_mox(back, x)
    with pytest.raises(MoxError, match=r"at `kwargs` they hold a `dict` of 1"):
        mox_lib.eval_mox(back, mlp, x, extra=x)


def test_static_leaves_are_marked_and_skipped(toy, x):
    linear = Linear(3, 2, key=jax.random.key(1))
    mox = mox_lib.make_mox(lambda cfg, m, v: m(v) * cfg[1])(("scale", 2.0), linear, x)
    for format in FORMATS:
        back = assert_round_trip(mox, format, ("scale", 2.0), linear, x)
        assert back.in_spec is not None and back.in_spec.static_positions == [0, 1]


def test_an_unknown_result_node_is_an_error_naming_it(toy, mlp, x):
    mox = mox_lib.make_mox(lambda m, v: (m(v), m))(mlp, x)
    back = mox_lib.loads(mox_lib.dumps(mox))
    assert back.out_spec is not None
    leaves = jax.tree.leaves(mox_lib.eval_mox(mox, mlp, x))
    np.testing.assert_allclose(mox_lib.eval_mox(back, mlp, x)[0], leaves[0], rtol=1e-6)
    # without an argument of the model's structure, the model cannot be rebuilt
    with pytest.raises(
        MoxError, match=r"the result at `\[1\]\.layers\[0\]` is a `bryo_mox.testing.Linear`"
    ):
        back.out_spec.build(leaves, {})


@jax.tree_util.register_pytree_node_class
class Labelled:
    """An array with a static label (as a Haliax NamedArray keeps its axes): the label is
    aux data, which a file's spec does not record."""

    def __init__(self, array, label):
        self.array, self.label = array, label

    def tree_flatten(self):
        return (self.array,), self.label

    @classmethod
    def tree_unflatten(cls, label, children):
        return cls(children[0], label)


@pytest.mark.parametrize("format", FORMATS)
def test_a_result_node_is_never_given_another_arguments_static_data(format):
    a, b = Labelled(jnp.ones(2), "a"), Labelled(jnp.zeros(2), "b")
    swap = lambda a, b: (Labelled(a.array, "new"), Labelled(b.array * 2.0, "b"))
    back = mox_lib.loads(mox_lib.dumps(mox_lib.make_mox(swap)(a, b), format), format)
    # two arguments of the result's spec with different labels: refused, not guessed
    # (the first one's label, "a", came back before)
    with pytest.raises(MoxError, match=r"the result at `\[0\]` is a .*Labelled.*static data"):
        mox_lib.eval_mox(back, a, b)
    # one label among the arguments: the result takes it
    same = mox_lib.loads(mox_lib.dumps(mox_lib.make_mox(swap)(a, a), format), format)
    first, second = mox_lib.eval_mox(same, a, a)
    assert (first.label, second.label) == ("a", "a")
    np.testing.assert_allclose(second.array, 2 * a.array)


@pytest.mark.parametrize(
    "text",
    ["tuple([0]=*", "tuple([0]=*))", "tuple(*)", "tuple([0]=*(), [1]=*)", "*, *", "tuple([0]=*) x"],
)
def test_a_malformed_spec_is_refused_with_its_place(toy, mlp, x, text):
    mox = mox_lib.make_mox(lambda m, v: m(v))(mlp, x)
    xml = mox_lib.dumps(mox)
    good = mox.in_spec or TreeSpec.of(
        jax.tree_util.treedef_tuple([mox.in_tree, jax.tree.structure({})])
    )
    assert good is not None and good.text in xml.replace("&#39;", "'")
    bad = xml.replace("&#39;", "'").replace(good.text, text.replace("'", "&#39;"))
    with pytest.raises(MoxSerializationError, match="in_spec") as info:
        mox_lib.loads(bad)
    assert info.value.line == 1


_leaf = st.sampled_from([0])
_trees = st.recursive(
    _leaf | st.none(),
    lambda children: (
        st.tuples(children, children)
        | st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b c", "d'e", 'f"']), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(_trees)
def test_spec_text_parses_back_and_rebuilds_the_tree(tree):
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    text, known = spec_text(treedef, [p for p, _ in with_paths])
    spec = TreeSpec.parse(text)
    assert spec.text == text and TreeSpec.of(treedef) == spec
    assert len(spec.leaf_kinds) == treedef.num_leaves
    leaves = list(range(treedef.num_leaves))
    assert jax.tree.structure(spec.build(leaves, known)) == treedef
    assert jax.tree.leaves(spec.build(leaves, known)) == leaves


def test_parsed_specs_are_kept_by_their_text_within_the_bound():
    first = TreeSpec.parse("tuple([0]=*, [1]=~)")
    assert TreeSpec.parse("tuple([0]=*, [1]=~)") is first  # a file loaded again
    other = TreeSpec.parse("tuple([0]=~, [1]=*)")
    assert first.leaf_kinds == ["*", "~"] and other.leaf_kinds == ["~", "*"]
    assert first.nodes == TreeSpec._parse(first.text).nodes
    leaves = MAX_PARSED_TEXT // 6 + 1
    long = "tuple(" + ", ".join(f"[{i}]=*" for i in range(leaves)) + ")"
    assert len(long) > MAX_PARSED_TEXT
    assert len(TreeSpec.parse(long).leaf_kinds) == leaves
    assert PARSED.get(long) is None  # too long to keep
    mox_lib.clear_caches()
    assert len(PARSED) == 0 and TreeSpec.parse(first.text) is not first


@pytest.mark.parametrize("format", FORMATS)
def test_a_mox_written_again_writes_its_own_specs(toy, mlp, x, format):
    # the specs a MoX writes are kept with it (`file_specs`): a MoX made from it by
    # `dataclasses.replace` writes its own
    mox = mox_lib.make_mox(lambda m, v: (m(v), m))(mlp, x)
    text = mox_lib.dumps(mox, format)
    assert "in_spec" in text and "out_spec" in text
    assert mox_lib.dumps(mox, format) == text
    flat = mox_lib.dumps(dataclasses.replace(mox, in_tree=None, out_tree=None), format)
    assert "in_spec" not in flat and "out_spec" not in flat
    assert mox_lib.dumps(mox, format) == text
