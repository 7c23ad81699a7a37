"""`nnx.nn.normalization`: normalization layers and the weight-normalising wrappers."""

from bryo_nnx import BatchNorm as BatchNorm
from bryo_nnx import GroupNorm as GroupNorm
from bryo_nnx import InstanceNorm as InstanceNorm
from bryo_nnx import LayerNorm as LayerNorm
from bryo_nnx import Module as Module
from bryo_nnx import RMSNorm as RMSNorm
from bryo_nnx import SpectralNorm as SpectralNorm
from bryo_nnx import WeightNorm as WeightNorm
from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
