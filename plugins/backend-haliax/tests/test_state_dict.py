"""bryo's state dicts of real Haliax models: the keys and arrays Haliax's own
`haliax.state_dict` writes, and Haliax models that hold bryo's `Stacked`, which Haliax's
functions refuse."""

import equinox as eqx
import haliax
import haliax.nn as hnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_scan import Stacked, StateDictError, from_state_dict, to_state_dict

E, M, L = haliax.Axis("E", 4), haliax.Axis("M", 5), haliax.Axis("L", 3)
KEY = jax.random.key(0)


class Block(eqx.Module):
    up: hnn.Linear
    norm: hnn.LayerNorm

    @staticmethod
    def init(*, key):
        return Block(hnn.Linear.init(E, M, key=key), hnn.LayerNorm.init(E))


class Net(haliax.state_dict.ModuleWithStateDictSerialization):
    embed: hnn.Embedding
    blocks: object

    def _state_dict_key_map(self):
        return {"blocks": "h"}


def haliax_net():
    blocks = hnn.Stacked.init(L, Block)(key=jax.random.split(KEY, 3))
    return Net(hnn.Embedding.init(haliax.Axis("Vocab", 7), E, key=KEY), blocks)


def test_a_haliax_model_gets_the_state_dict_haliax_writes():
    net = haliax_net()
    theirs, ours = haliax.state_dict.to_state_dict(net), to_state_dict(net)
    assert sorted(ours) == sorted(theirs) and "h.2.up.weight" in ours
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)
    back = from_state_dict(net, {k: np.zeros_like(v) for k, v in theirs.items()})
    assert isinstance(back.blocks, hnn.Stacked)
    assert back.blocks.stacked.up.weight.axes == net.blocks.stacked.up.weight.axes
    assert not np.any(back.blocks.stacked.up.weight.array)


def test_a_haliax_model_holding_bryos_stacked_reads_haliaxs_state_dict():
    theirs = haliax.state_dict.to_state_dict(haliax_net())
    net = haliax_net()
    mixed = Net(net.embed, Stacked.init(L, Block)(key=jax.random.split(jax.random.key(1), 3)))
    with pytest.raises(ValueError, match="Unsupported type"):  # Haliax's own refuses it
        haliax.state_dict.to_state_dict(mixed)
    ours = to_state_dict(mixed)
    assert sorted(ours) == sorted(theirs)
    back = from_state_dict(mixed, theirs)
    assert isinstance(back.blocks, Stacked)
    weight = back.blocks.stacked.up.weight
    assert isinstance(weight, haliax.NamedArray) and weight.axes == (L, M, E)
    np.testing.assert_array_equal(weight.array, net.blocks.stacked.up.weight.array)
    # bryo's walk checks shapes (Haliax's modules that read themselves raise Haliax's error)
    with pytest.raises(StateDictError, match=r"'h\.1\.norm\.weight' has shape \(5,\)"):
        from_state_dict(mixed, {**theirs, "h.1.norm.weight": jnp.zeros(5)})


Heads, Size = haliax.Axis("Heads", 2), haliax.Axis("Size", 3)


class Attention(eqx.Module):  # GPT-2's c_attn/c_proj: Linears over axis tuples
    c_attn: hnn.Linear
    c_proj: hnn.Linear
    drop: hnn.Dropout

    @staticmethod
    def init(*, key):
        k1, k2 = jax.random.split(key)
        c_attn = hnn.Linear.init(E, (Heads, Size), key=k1)
        return Attention(c_attn, hnn.Linear.init((Heads, Size), E, key=k2), hnn.Dropout(0.1))


@pytest.mark.parametrize("stack", [hnn.Stacked, Stacked], ids=["haliax", "bryo"])
def test_a_torch_export_flattens_haliaxs_linears_as_haliax_does(stack):
    from bryo.hax import state_dict

    model = {"h": stack.init(L, Attention)(key=jax.random.split(KEY, 3))}
    theirs = haliax.state_dict.to_torch_compatible_state_dict(
        {"h": hnn.Stacked.init(L, Attention)(key=jax.random.split(KEY, 3))}
    )
    ours = state_dict.to_torch_compatible_state_dict(model)
    assert ours["h.1.c_attn.weight"].shape == (6, 4)  # (Heads, Size) flattened, out first
    assert sorted(ours) == sorted(theirs)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)
    abstract = eqx.filter_eval_shape(lambda: model)
    back = state_dict.from_torch_compatible_state_dict(abstract, ours)["h"]
    np.testing.assert_array_equal(
        back.stacked.c_proj.weight.array, model["h"].stacked.c_proj.weight.array
    )
    assert back.stacked.c_attn.weight.axes == model["h"].stacked.c_attn.weight.axes


def test_haliax_reads_the_state_dict_of_bryos_stacked_of_dropout_blocks():
    ours = to_state_dict({"h": Stacked.init(L, Attention)(key=jax.random.split(KEY, 3))})
    assert ours["h.drop.inference"] is False and "h.0.drop.inference" not in ours
    template = {"h": hnn.Stacked.init(L, Attention)(key=jax.random.split(jax.random.key(1), 3))}
    back = haliax.state_dict.from_state_dict(template, ours)["h"]
    assert back.stacked.drop.inference is False  # was an array of 3 bools, failing in Dropout
    x = haliax.ones(E)
    assert back.fold_via(lambda block, x: block.c_proj(block.c_attn(x)))(x).axes == (E,)
