"""`nnx.transforms.autodiff`: `grad`, `value_and_grad`, `vjp`, `jvp`, `custom_vjp`, `remat`."""

from bryo_transforms import DiffState as DiffState
from bryo_transforms import custom_vjp as custom_vjp
from bryo_transforms import grad as grad
from bryo_transforms import jvp as jvp
from bryo_transforms import remat as remat
from bryo_transforms import value_and_grad as value_and_grad
from bryo_transforms import vjp as vjp
