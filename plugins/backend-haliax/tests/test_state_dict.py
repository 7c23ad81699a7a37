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
