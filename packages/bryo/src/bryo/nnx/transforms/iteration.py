"""`nnx.transforms.iteration`: `vmap`, `pmap`, `scan` and the loops."""

from bryo_transforms import Carry as Carry
from bryo_transforms import StateAxes as StateAxes
from bryo_transforms import fori_loop as fori_loop
from bryo_transforms import pmap as pmap
from bryo_transforms import scan as scan
from bryo_transforms import transform_metadata as transform_metadata
from bryo_transforms import vmap as vmap
from bryo_transforms import while_loop as while_loop
