"""Torch-style state dicts of plain pytrees, `Stacked` and `BlockSeq` (Haliax's layout)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_pytree import pytree_dataclass, static_field
from bryo_scan import (
    AxisInfo,
    BlockSeq,
    Stacked,
    StateDictError,
    from_state_dict,
    to_state_dict,
    with_prefix,
)

LAYERS = AxisInfo(name=None, size=3, position=0)


@pytree_dataclass
class Dense:
    w: jax.Array
    b: jax.Array
    activation: object = static_field(default=jnp.tanh)

    @classmethod
    def make(cls, width, *, key):
        return cls(jax.random.normal(key, (width, width + 1)), jnp.zeros(width + 1))


@pytree_dataclass
class Renamed:
    blocks: list
    head: jax.Array

    def _state_dict_key_map(self):
        return {"blocks": "h", "head": None}


def leaves_equal(a, b):
    same = jax.tree.map(lambda x, y: bool(np.array_equal(x, y)), a, b)
    return all(jax.tree.leaves(same)) and jax.tree.structure(a) == jax.tree.structure(b)


def test_keys_are_dotted_paths_and_numbers_are_kept():
    tree = {"layers": [{"w": jnp.ones((2, 3))}, {"w": jnp.zeros((2, 3))}], "scale": 2.0}
    state = to_state_dict(tree, prefix="model")
    assert sorted(state) == ["model.layers.0.w", "model.layers.1.w", "model.scale"]
    assert state["model.scale"] == 2.0
    back = from_state_dict(tree, {k: v + 1 for k, v in state.items()}, prefix="model")
    np.testing.assert_array_equal(back["layers"][1]["w"], np.ones((2, 3)))
    assert back["scale"] == 3.0 and type(back["scale"]) is float
    np.testing.assert_array_equal(tree["layers"][1]["w"], np.zeros((2, 3)))  # unchanged


def test_static_fields_and_functions_are_not_weights():
    dense = Dense.make(2, key=jax.random.key(0))
    assert sorted(to_state_dict(dense)) == ["b", "w"]
    assert sorted(to_state_dict({"f": jnp.tanh, "w": jnp.ones(1), "none": None})) == ["w"]


def test_a_key_map_renames_and_splices_fields():
    model = Renamed([jnp.ones(2), jnp.zeros(2)], jnp.full(3, 7.0))
    state = to_state_dict(model, "gpt")
    assert sorted(state) == ["gpt", "gpt.h.0", "gpt.h.1"]
    back = from_state_dict(model, {k: v * 2 for k, v in state.items()}, "gpt")
    np.testing.assert_array_equal(back.head, np.full(3, 14.0))


def test_stacked_writes_one_entry_per_layer_and_reads_them_back():
    keys = jax.random.split(jax.random.key(0), 3)
    stack = Stacked.init(LAYERS, Dense.make)(2, key=keys)
    state = stack.to_state_dict("blocks")
    assert sorted(state) == [f"blocks.{i}.{n}" for i in range(3) for n in ("b", "w")]
    np.testing.assert_array_equal(state["blocks.1.w"], stack.stacked.w[1])
    assert leaves_equal(to_state_dict({"blocks": stack}), state)  # a node of a larger tree
    changed = {k: v + 1 for k, v in state.items()}
    back = stack.from_state_dict(changed, "blocks")
    assert isinstance(back, Stacked) and back.Block == stack.Block
    np.testing.assert_array_equal(back.stacked.w, stack.stacked.w + 1)
    assert back.stacked.activation is jnp.tanh
    assert leaves_equal(from_state_dict({"blocks": stack}, changed)["blocks"], back)


def test_blockseq_uses_the_same_layout_as_stacked():
    keys = jax.random.split(jax.random.key(0), 3)
    stack = Stacked.init(LAYERS, Dense.make)(2, key=keys)
    seq = BlockSeq.init(LAYERS, Dense.make)(2, key=keys)
    assert sorted(seq.to_state_dict()) == sorted(stack.to_state_dict())
    back = seq.from_state_dict(stack.to_state_dict())
    assert isinstance(back, BlockSeq) and leaves_equal(back, seq)
    restacked = stack.from_state_dict(seq.to_state_dict())
    np.testing.assert_allclose(restacked.stacked.w, stack.stacked.w)


def test_a_missing_key_names_it_and_the_close_ones():
    tree = {"encoder": {"weight": jnp.ones(2)}}
    with pytest.raises(StateDictError, match=r"no key 'encoder\.weight'.*'encoder\.weigth'"):
        from_state_dict(tree, {"encoder.weigth": np.ones(2)})
    with pytest.raises(KeyError):  # what Haliax raises for a missing key
        from_state_dict(tree, {})


def test_a_mis_shaped_array_names_the_key_and_a_transpose_says_so():
    tree = {"w": jnp.ones((2, 3))}
    with pytest.raises(StateDictError, match=r"'w' has shape \(4,\).*shape \(2, 3\)"):
        from_state_dict(tree, {"w": np.ones(4)})
    with pytest.raises(ValueError, match="It is the transpose"):
        from_state_dict(tree, {"w": np.ones((3, 2))})


def test_two_leaves_writing_one_key_are_refused():
    model = Renamed([jnp.ones(2)], jnp.ones(2))
    clash = {"a": model, "a.h": [jnp.ones(1)]}  # "a.h.0" twice
    with pytest.raises(StateDictError, match=r"two leaves write the state dict key 'a\.h\.0'"):
        to_state_dict(clash)


def test_a_bare_leaf_needs_a_prefix():
    with pytest.raises(StateDictError, match=r"needs a key.*prefix="):
        to_state_dict(jnp.ones(2))
    assert to_state_dict(jnp.ones(2), "w").keys() == {"w"}
    with pytest.raises(StateDictError, match="needs a key"):
        from_state_dict(jnp.ones(2), {"w": np.ones(2)})


def test_a_shape_dtype_struct_template_reads_arrays():
    template = {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}
    back = from_state_dict(template, {"w": np.arange(2, dtype=np.float32)})
    assert isinstance(back["w"], jax.Array)


def test_the_state_dicts_dtype_is_kept_as_in_haliax():
    back = from_state_dict({"w": jnp.ones(2)}, {"w": np.ones(2, np.float16)})
    assert back["w"].dtype == jnp.float16


def test_with_prefix_joins_optional_parts():
    assert with_prefix(None, None) is None
    assert with_prefix("a", "b") == "a.b"


_names = st.text("abcxyz_", min_size=1, max_size=4)
_trees = st.recursive(
    st.tuples(st.lists(st.integers(0, 3), max_size=2), st.sampled_from(["f4", "i4"])).map(
        lambda spec: np.zeros(spec[0], spec[1])
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(_trees)
def test_round_trip_through_a_state_dict_changes_nothing(tree):
    state = to_state_dict(tree, "root")
    assert all(k == "root" or k.startswith("root.") for k in state)
    assert leaves_equal(from_state_dict(tree, state, "root"), tree)


def test_a_variable_adds_no_key_of_its_own():
    from bryo_graph import Variable

    tree = {"layer": {"kernel": Variable(jnp.ones(2))}}
    state = to_state_dict(tree)
    assert list(state) == ["layer.kernel"]  # not "layer.kernel.value"
    back = from_state_dict(tree, {"layer.kernel": np.zeros(2)})
    assert isinstance(back["layer"]["kernel"], Variable)
    np.testing.assert_array_equal(back["layer"]["kernel"].value, np.zeros(2))
    np.testing.assert_array_equal(tree["layer"]["kernel"].value, np.ones(2))


def test_a_stacked_template_of_shape_dtype_structs_reads_arrays():
    # `eqx.filter_eval_shape(Model.init, ...)` gives such a template: a struct cannot be
    # sliced into layers, so each layer's shapes come from `jax.eval_shape`.
    keys = jax.random.split(jax.random.key(0), 3)
    stack = Stacked.init(LAYERS, Dense.make)(2, key=keys)
    template = jax.eval_shape(lambda: Stacked.init(LAYERS, Dense.make)(2, key=keys))
    assert isinstance(template.stacked.w, jax.ShapeDtypeStruct)
    back = from_state_dict({"h": template}, to_state_dict({"h": stack}))["h"]
    assert isinstance(back.stacked.w, jax.Array) and back.stacked.activation is jnp.tanh
    assert leaves_equal(back, stack)
    with pytest.raises(StateDictError, match=r"no key 'h\.2\.w'"):
        from_state_dict(
            {"h": template}, {k: v for k, v in to_state_dict({"h": stack}).items() if k != "h.2.w"}
        )


@pytree_dataclass
class Gated:
    w: jax.Array
    inference: bool = False  # a leaf that is no array, as `haliax.nn.Dropout.inference`

    @classmethod
    def make(cls, *, key):
        return cls(jax.random.normal(key, (2,)))


def test_a_stacked_writes_a_non_array_leaf_once_as_haliax_does():
    keys = jax.random.split(jax.random.key(0), 3)
    stack = Stacked.init(LAYERS, Gated.make)(key=keys)
    state = to_state_dict({"h": stack})
    # Haliax writes `h.inference` once; a file with `h.0.inference`, ... is read back by
    # Haliax as a stacked array of bools, which then fails inside the block.
    assert sorted(state) == ["h.0.w", "h.1.w", "h.2.w", "h.inference"]
    assert state["h.inference"] is False
    back = from_state_dict({"h": stack}, {**state, "h.inference": np.asarray(True)})["h"]
    assert back.stacked.inference is True
    np.testing.assert_array_equal(back.stacked.w, stack.stacked.w)
    per_layer = {k: v for k, v in state.items() if k != "h.inference"}
    per_layer.update({f"h.{i}.inference": True for i in range(3)})  # bryo's older layout
    assert from_state_dict({"h": stack}, per_layer)["h"].stacked.inference is True
    assert from_state_dict(stack, to_state_dict(stack)).stacked.inference is False  # no prefix
