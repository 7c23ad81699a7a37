"""bryo_yson: MoX in YSON, the YTsaurus format (`yt.yson` from ytsaurus-client).

Installing this package registers the `yson` format: `bryo_mox.dumps(mox, format="yson")`,
`bryo_mox.loads(text, format="yson")`, and `dump`/`load` of `.yson` files. Attributes keep
their YSON types (ints, doubles, booleans, strings, lists).
"""

from ._yson import MAX_BYTES as MAX_BYTES
from ._yson import dumps as dumps
from ._yson import loads as loads

__version__ = "0.1.0"
