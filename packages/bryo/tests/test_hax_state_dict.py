"""`bryo.hax.state_dict`: Haliax's state-dict API over bryo's named arrays and `Stacked`,
and safetensors files that are checked before anything is allocated."""

import json
import os
import struct

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo import hax
from bryo.hax import state_dict as sd
from bryo.hax.nn import Stacked

Embed, Layers = hax.Axis("Embed", 3), hax.Axis("Layers", 2)


class Block(eqx.Module):
    weight: hax.NamedArray
    bias: jax.Array
    width: int = eqx.field(static=True)

    @staticmethod
    def init(weight, bias):
        return Block(weight, bias, 3)


class Model(sd.ModuleWithStateDictSerialization):
    blocks: Stacked
    head: hax.NamedArray

    def _state_dict_key_map(self):
        return {"blocks": "h"}


def make_model(seed=0):
    weight = hax.random.normal(jax.random.key(seed), (Layers, Embed))
    blocks = Stacked.init(Layers, Block)(weight, jnp.arange(2.0))
    return Model(blocks, hax.ones(Embed))


def test_a_model_with_a_stacked_writes_torch_keys_and_reads_them_back():
    model = make_model()
    state = sd.to_state_dict(model, prefix="model")
    assert sorted(state) == [
        "model.h.0.bias",
        "model.h.0.weight",
        "model.h.1.bias",
        "model.h.1.weight",
        "model.head",
    ]
    assert model.to_state_dict("model").keys() == state.keys()  # Haliax's method spelling
    np.testing.assert_array_equal(state["model.h.1.weight"], model.blocks.stacked.weight.array[1])
    other = make_model(seed=1)
    back = sd.from_state_dict(other, state, prefix="model")
    assert back.blocks.stacked.weight.axes == other.blocks.stacked.weight.axes
    np.testing.assert_array_equal(
        back.blocks.stacked.weight.array, model.blocks.stacked.weight.array
    )
    assert not np.array_equal(other.blocks.stacked.weight.array, model.blocks.stacked.weight.array)


def test_a_module_that_overrides_to_state_dict_is_asked():
    class Custom(sd.ModuleWithStateDictSerialization):
        w: jax.Array

        def to_state_dict(self, prefix=None):
            return {sd.with_prefix(prefix, "W"): self.w.T}

        def from_state_dict(self, state_dict, prefix=None):
            return Custom(jnp.asarray(state_dict[sd.with_prefix(prefix, "W")]).T)

    model = {"layer": Custom(jnp.arange(6.0).reshape(2, 3))}
    state = sd.to_state_dict(model)
    assert state["layer.W"].shape == (3, 2)
    np.testing.assert_array_equal(sd.from_state_dict(model, state)["layer"].w, model["layer"].w)


def test_torch_compatible_export_flattens_modules_and_comes_back():
    class Linear(sd.ModuleWithStateDictSerialization):
        weight: hax.NamedArray  # (Out, Heads, Head): PyTorch wants (Out, Heads * Head)

        def flatten_for_export(self):
            return Linear(self.weight.flatten_axes(("Heads", "Head"), "In"))

        def unflatten_from_export(self, template):
            axes = template.weight.axes
            return Linear(
                hax.named(self.weight.array.reshape(self.weight.array.shape[0], 2, 2), axes)
            )

    out, heads, head = hax.make_axes(Out=3, Heads=2, Head=2)
    layer = Linear(hax.random.normal(jax.random.key(0), (out, heads, head)))
    state = sd.to_torch_compatible_state_dict(layer)
    assert isinstance(state["weight"], np.ndarray) and state["weight"].shape == (3, 4)
    back = sd.from_torch_compatible_state_dict(layer, state)
    assert back.weight.axes == layer.weight.axes
    np.testing.assert_array_equal(back.weight.array, layer.weight.array)


def test_save_and_load_a_model(tmp_path):
    model = make_model()
    path = tmp_path / "model.safetensors"
    sd.save_state_dict(sd.to_numpy_state_dict(model), path)
    loaded = sd.load_state_dict(path)
    back = sd.from_state_dict(make_model(seed=3), loaded)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), back, model))


_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.tuples(
            st.lists(st.integers(0, 3), max_size=3),
            st.sampled_from([*_DTYPES, "bfloat16"]),
            st.integers(0, 2**16),
        ),
        max_size=5,
    )
)
def test_safetensors_round_trip(tmp_path_factory, specs):
    state = {}
    for name, (shape, dtype, seed) in specs.items():
        raw = np.random.default_rng(seed).integers(0, 100, size=shape)
        state[name] = raw.astype(jnp.bfloat16 if dtype == "bfloat16" else dtype)
    path = tmp_path_factory.mktemp("st") / "f.safetensors"
    sd.save_state_dict(state, path)
    loaded = sd.load_state_dict(path)
    assert loaded.keys() == state.keys()
    for name, array in state.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name].astype(np.float64), array.astype(np.float64))
    assert len(path.read_bytes()) % 8 == 0 or state  # header padded to 8 bytes


def test_files_interoperate_with_hugging_faces_safetensors(tmp_path):
    numpy_io = pytest.importorskip("safetensors.numpy")
    ours = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.int64)}
    sd.save_state_dict(ours, tmp_path / "ours.safetensors")
    theirs = numpy_io.load_file(str(tmp_path / "ours.safetensors"))
    assert (
        all(np.array_equal(theirs[k], v) for k, v in ours.items()) and theirs.keys() == ours.keys()
    )
    numpy_io.save_file(ours, str(tmp_path / "theirs.safetensors"), metadata={"format": "pt"})
    loaded = sd.load_state_dict(tmp_path / "theirs.safetensors")
    assert all(np.array_equal(loaded[k], v) for k, v in ours.items())


def _file(header, data=b"", length=None):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


_GOOD = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
_HOSTILE = {
    "too short": (b"\x01\x02", "too short"),
    "a header longer than the file": (_file(_GOOD, b"\0" * 8, length=10**12), "header says"),
    "a header that is not JSON": (struct.pack("<Q", 4) + b"{{{{", "do not parse"),
    "a deeply nested header": (
        struct.pack("<Q", 200_000) + b"[" * 100_000 + b"]" * 100_000,
        "do not parse",
    ),
    "a header that is a list": (_file([1, 2]), "not an object"),
    "an unknown dtype": (_file({"w": {**_GOOD["w"], "dtype": "F128"}}, b"\0" * 8), "dtype"),
    "a negative shape": (_file({"w": {**_GOOD["w"], "shape": [-2]}}, b"\0" * 8), "shape"),
    "a huge shape": (_file({"w": {**_GOOD["w"], "shape": [10**9, 10**9]}}, b"\0" * 8), "needs"),
    "offsets past the end": (
        _file({"w": {**_GOOD["w"], "data_offsets": [0, 10**12]}}, b"\0" * 8),
        "data_offsets",
    ),
    "overlapping tensors": (
        _file({**_GOOD, "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        "overlaps",
    ),
    "a gap": (
        _file({"w": {**_GOOD["w"], "data_offsets": [4, 12]}}, b"\0" * 12),
        "gap",
    ),
    "bytes appended": (_file(_GOOD, b"\0" * 9), "appended"),
    "truncated data": (_file(_GOOD, b"\0" * 4), "data_offsets"),
    "bad metadata": (_file({**_GOOD, "__metadata__": {"a": 1}}, b"\0" * 8), "__metadata__"),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_a_damaged_file_is_refused_naming_what_is_wrong(tmp_path, case):
    content, words = _HOSTILE[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(sd.StateDictFileError, match=words) as info:
        sd.load_state_dict(path)
    assert str(path) in str(info.value)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_flipped_bytes_either_load_the_right_shapes_or_are_refused(tmp_path_factory, data):
    state = {"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 2), np.int8)}
    path = tmp_path_factory.mktemp("flip") / "f.safetensors"
    sd.save_state_dict(state, path)
    content = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(content) - 1))
        content[index] ^= 1 << data.draw(st.integers(0, 7))
    path.write_bytes(bytes(content))
    try:
        loaded = sd.load_state_dict(path)
    except sd.StateDictFileError:
        return
    total = sum(array.nbytes for array in loaded.values())
    assert total == len(content) - 8 - struct.unpack("<Q", content[:8])[0]


def test_a_failed_save_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    sd.save_state_dict({"w": np.ones(2, np.float32)}, path)
    before = path.read_bytes()
    with pytest.raises(sd.StateDictFileError, match=r"'s' has dtype <U1"):
        sd.save_state_dict({"w": np.zeros(2), "s": np.array(["x"])}, path)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        sd.save_state_dict({"w": np.zeros(3)}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["model.safetensors"]


def test_the_module_is_reached_from_hax_and_lacks_what_haliax_lacks():
    assert hax.state_dict is sd and sd.to_state_dict is hax.state_dict.to_state_dict
    with pytest.raises(AttributeError, match="reimplements Haliax"):
        sd.not_a_name  # noqa: B018


class Flattening(eqx.Module):
    """A module with Haliax's export methods but not bryo's base class (as
    `haliax.nn.Linear`, whose base is Haliax's `ModuleWithStateDictSerialization`)."""

    weight: jax.Array

    def flatten_for_export(self):
        return Flattening(self.weight.reshape(-1))

    def unflatten_from_export(self, template):
        return Flattening(self.weight.reshape(template.weight.shape))


def test_a_module_with_the_export_methods_is_flattened_whatever_its_base():
    model = {"layer": Flattening(jnp.arange(6.0).reshape(2, 3))}
    exported = sd.to_torch_compatible_state_dict(model)
    assert exported["layer.weight"].shape == (6,)
    back = sd.from_torch_compatible_state_dict(model, {"layer.weight": np.arange(6.0) + 1})
    np.testing.assert_array_equal(back["layer"].weight, np.arange(6.0).reshape(2, 3) + 1)
