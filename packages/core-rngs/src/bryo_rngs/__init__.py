"""bryo_rngs: randomness as model state — named key streams with counters in Variables.

`Rngs(0, params=1)` holds one `RngStream` per name (`default` is the fallback for names
it lacks). A stream draws `fold_in(key, count)` and counts up; its key and count are
`RngKey`/`RngCount` Variables tagged with the stream name, so `'dropout'` or `RngState`
select them as filters, and `split`/`merge` and the lifted transforms carry them like any
other state. `fork`, `reseed`, `split_rngs`/`fork_rngs` (decorators and context managers)
and the in-place `split_rngs_in_place`/`restore_rngs` manage them across `vmap` and `scan`.
"""

from ._reseed import ReseedPolicy as ReseedPolicy
from ._reseed import reseed as reseed
from ._rngs import SAMPLER_NAMES as SAMPLER_NAMES
from ._rngs import Rngs as Rngs
from ._rngs import RngStream as RngStream
from ._rngs import RngTraceError as RngTraceError
from ._rngs import RngValue as RngValue
from ._rngs import Splits as Splits
from ._rngs import UnknownStreamError as UnknownStreamError
from ._rngs import as_key as as_key
from ._rngs import split_rules as split_rules
from ._rngs import stream_matches as stream_matches
from ._split import RngSplit as RngSplit
from ._split import fork_rngs as fork_rngs
from ._split import iter_streams as iter_streams
from ._split import restore_rngs as restore_rngs
from ._split import split_rngs as split_rngs
from ._split import split_rngs_in_place as split_rngs_in_place
from ._variables import RngCount as RngCount
from ._variables import RngKey as RngKey
from ._variables import RngState as RngState
from ._with_rngs import with_rngs as with_rngs

__version__ = "0.1.0"
