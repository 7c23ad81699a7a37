"""`hax.nn.scan`: the scan-over-layers modules, where Haliax keeps them.

`from haliax.nn.scan import BlockSeq, ScanCheckpointPolicy, Stacked` becomes
`from bryo.hax.nn.scan import ...`; seed 003 also names `hax.nn.scan.BlockFoldable`.
"""

from bryo_scan import BlockFoldable as BlockFoldable
from bryo_scan import BlockSeq as BlockSeq
from bryo_scan import ScanCheckpointPolicy as ScanCheckpointPolicy
from bryo_scan import Stacked as Stacked
