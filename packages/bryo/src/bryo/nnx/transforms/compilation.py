"""`nnx.transforms.compilation`: `jit`, `jit_partial`, `shard_map`."""

from bryo_transforms import StateSharding as StateSharding
from bryo_transforms import jit as jit
from bryo_transforms import jit_partial as jit_partial
from bryo_transforms import shard_map as shard_map
