"""`bryo.nnx.transforms`: Flax NNX's `nnx.transforms` layout (`autodiff`, `compilation`,
`iteration`, `transforms`), over `bryo_transforms`."""

from . import autodiff as autodiff
from . import compilation as compilation
from . import iteration as iteration
from . import transforms as transforms
