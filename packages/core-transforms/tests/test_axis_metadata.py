"""`transform_metadata`: the mapped axis's name in the Variables' sharding metadata, taken
out inside `vmap`/`scan` and present outside; the simple-mode decorator; its errors."""

import jax
import jax.numpy as jnp
import pytest

from bryo_graph import PARTITION_NAME, Object, Param
from bryo_transforms import Carry, StateAxes, TransformError, scan, transform_metadata, vmap

LAYERS = {PARTITION_NAME: "layers"}


class Block(Object):
    def __init__(self, key: jax.Array) -> None:
        self.w = Param(jax.random.normal(key, (2, 2)), out_sharding=("din", "dout"))


def sharding(variable: Param) -> object:
    return variable.metadata["out_sharding"]


def test_vmap_adds_the_axis_name_and_scan_takes_it_out_inside():
    @vmap(in_axes=0, out_axes=0, transform_metadata=LAYERS)
    def init(key):
        return Block(key)

    blocks = init(jax.random.split(jax.random.key(0), 3))
    assert blocks.w.value.shape == (3, 2, 2)
    assert sharding(blocks.w) == ("layers", "din", "dout")

    seen = []

    @scan(in_axes=(StateAxes({Param: 0}), Carry), out_axes=Carry, transform_metadata=LAYERS)
    def forward(block, x):
        seen.append(sharding(block.w))
        return x @ block.w.value

    assert forward(blocks, jnp.ones(2)).shape == (2,)
    assert seen == [("din", "dout")]
    assert sharding(blocks.w) == ("layers", "din", "dout")


def test_without_partition_name_nothing_changes():
    @vmap(in_axes=0, out_axes=0, transform_metadata={})
    def init(key):
        return Block(key)

    assert sharding(init(jax.random.split(jax.random.key(0), 2)).w) == ("din", "dout")


@pytest.mark.parametrize("graph", [True, False])
def test_decorator_for_simple_mode_and_values_written_back(graph):
    @vmap(in_axes=0, out_axes=0, graph=graph, graph_updates=False)
    @transform_metadata(in_axes=0, out_axes=0, partition="layers", graph=graph)
    def init(key):
        return Block(key)

    blocks = init(jax.random.split(jax.random.key(0), 2))
    assert sharding(blocks.w) == ("layers", "din", "dout")

    @transform_metadata(in_axes=0, out_axes=None, partition="layers", graph=graph)
    def scale(block):
        assert sharding(block.w) == ("din", "dout")
        block.w.value = 2.0 * block.w.value

    before = blocks.w.value
    scale(blocks)
    assert jnp.array_equal(blocks.w.value, 2.0 * before)
    assert sharding(blocks.w) == ("layers", "din", "dout")


def test_errors_name_the_prefix():
    block = Block(jax.random.key(0))
    with pytest.raises(TransformError, match="StateAxes is for a graph node"):
        transform_metadata(lambda x: x, in_axes=StateAxes({...: 0}), partition="l")(jnp.ones(2))
    with pytest.raises(TransformError, match="2 entries for a tuple of 1"):
        transform_metadata(lambda t: None, in_axes=((0, 0),), partition="l")((block,))
    with pytest.raises(ValueError, match="expected 'l' at index 0 but found 'din'"):
        transform_metadata(lambda b: None, in_axes=0, partition="l")(block)  # never mapped
    with pytest.raises(ValueError, match="Duplicate Param"):
        transform_metadata(lambda b: b.w, in_axes=None, partition="l")(block)
    assert sharding(block.w) == ("din", "dout")
