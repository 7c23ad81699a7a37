"""`nnx.nn.lora`: low-rank adapters."""

from bryo_nnx import Linear as Linear
from bryo_nnx import LoRA as LoRA
from bryo_nnx import LoRALinear as LoRALinear
from bryo_nnx import LoRAParam as LoRAParam
from bryo_nnx import Module as Module
from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
from bryo_nnx.initializers import default_a_initializer as default_a_initializer
from bryo_nnx.initializers import default_b_initializer as default_b_initializer
