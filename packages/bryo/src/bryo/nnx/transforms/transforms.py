"""`nnx.transforms.transforms`: `cond`, `switch`, `checkify`, `eval_shape`, `make_jaxpr`."""

from bryo_transforms import checkify as checkify
from bryo_transforms import cond as cond
from bryo_transforms import eval_shape as eval_shape
from bryo_transforms import make_jaxpr as make_jaxpr
from bryo_transforms import switch as switch
