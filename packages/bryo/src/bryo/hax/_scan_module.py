"""`hax.nn.scan`: the module-stack types (seed 003 names `hax.nn.scan.BlockFoldable`)."""

from bryo_scan import BlockFoldable as BlockFoldable
from bryo_scan import BlockSeq as BlockSeq
from bryo_scan import Stacked as Stacked
