"""An NNX-style Linear reports `features` in MoX, so Linen-style queries find it."""

import jax.numpy as jnp

import bryo_mox
from bryo import nnx


def test_features_alias_is_queryable_next_to_out_features():
    layer = nnx.Linear(3, 10, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(layer)
    traced = bryo_mox.make_mox(lambda p, x: nnx.merge(graphdef, p)(x))(params, jnp.ones((1, 3)))
    (node,) = bryo_mox.query("//module_call[@features=10]", traced)
    assert node.attrs["features"] == node.attrs["out_features"] == 10
    assert bryo_mox.query("//module_call[@features=3]", traced) == []
    assert not hasattr(layer, "features")  # an alias in MoX only, the module is unchanged


def test_an_alias_never_hides_a_real_attribute():
    class Wide(nnx.Linear):
        def __init__(self, rngs):
            super().__init__(2, 4, rngs=rngs)
            self.features = 99  # the module's own value wins over the alias

    layer = Wide(nnx.Rngs(0))
    graphdef, params = nnx.split(layer)
    traced = bryo_mox.make_mox(lambda p, x: nnx.merge(graphdef, p)(x))(params, jnp.ones((1, 2)))
    (node,) = bryo_mox.query("//module_call", traced)
    assert node.attrs["features"] == 99
