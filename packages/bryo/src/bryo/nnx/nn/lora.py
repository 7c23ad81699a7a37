"""`nnx.nn.lora`: low-rank adapters."""

from bryo_nnx import LoRA as LoRA
from bryo_nnx import LoRALinear as LoRALinear
from bryo_nnx import LoRAParam as LoRAParam
