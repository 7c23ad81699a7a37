"""Variables created under `jax.set_mesh` are placed by their sharding metadata."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, PartitionSpec

from bryo_graph import Param, Variable

pytestmark = pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="needs jax.set_mesh")


def _mesh(kind):
    return jax.make_mesh((1,), ("X",), axis_types=(kind,), devices=jax.devices()[:1])


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
def test_variables_with_sharding_metadata_are_placed_under_a_mesh(kind):
    mesh = _mesh(kind)
    with jax.set_mesh(mesh):
        v = Param(jnp.ones((2, 3)), sharding=("X", None))
        w = Param(jnp.ones((2, 3)), out_sharding=PartitionSpec(None, "X"))
        u = Param(jnp.ones((2, 3)), sharding=("rows", None), sharding_rules=(("rows", "X"),))
    assert v[...].sharding.spec == PartitionSpec("X", None)
    assert w[...].sharding.spec == PartitionSpec(None, "X")
    assert u[...].sharding.spec == PartitionSpec("X", None)
    assert u.get_metadata("out_sharding") == ("rows", None)  # kept, under the Flax 0.12 key


def test_no_mesh_or_no_array_keeps_the_value():
    value = jnp.ones(2)
    assert Param(value, sharding=("X",))[...] is value
    with jax.set_mesh(_mesh(AxisType.Explicit)):
        shape = jax.ShapeDtypeStruct((2,), jnp.float32)
        assert Variable(shape, sharding=("X",))[...] is shape
        assert Param(3, sharding=("X",))[...] == 3


def test_unknown_axis_and_too_long_spec_are_named():
    with jax.set_mesh(_mesh(AxisType.Explicit)):
        with pytest.raises(ValueError, match="'model' is not an axis of the current mesh"):
            Param(jnp.ones(2), sharding=("model",))
        with pytest.raises(ValueError, match="names 2 axes for a value of shape"):
            Param(jnp.ones(2), sharding=("X", None))
