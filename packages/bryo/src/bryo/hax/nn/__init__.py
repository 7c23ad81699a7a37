"""`hax.nn`: layers' activations and the scan-over-layers modules (`Stacked`, `BlockSeq`)."""

from bryo_named.nn import gelu as gelu
from bryo_named.nn import log_softmax as log_softmax
from bryo_named.nn import logsumexp as logsumexp
from bryo_named.nn import relu as relu
from bryo_named.nn import sigmoid as sigmoid
from bryo_named.nn import silu as silu
from bryo_named.nn import softmax as softmax
from bryo_named.nn import softplus as softplus
from bryo_scan import BlockFoldable as BlockFoldable
from bryo_scan import BlockSeq as BlockSeq
from bryo_scan import ScanCheckpointPolicy as ScanCheckpointPolicy
from bryo_scan import Stacked as Stacked

from .._missing import missing_name as _missing_name
from . import scan as scan


def __getattr__(name: str) -> object:
    raise _missing_name(__name__, name)
