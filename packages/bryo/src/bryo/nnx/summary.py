"""`bryo.nnx.summary`: Flax NNX's `nnx.summary` names (`tabulate`), over `bryo_nnx`."""

from bryo_nnx import CallInfo as CallInfo
from bryo_nnx import tabulate as tabulate
