"""bryo_yson: MoX in text YSON, the YTsaurus format, safe to read from untrusted files.

Installing this package registers the `yson` format: `bryo_mox.dumps(mox, format="yson")`,
`bryo_mox.loads(text, format="yson")`, and `dump`/`load` of `.yson` files. Attributes keep
their YSON types (ints, doubles, booleans, strings, lists). The package reads and writes
text YSON itself (a bounded parser, no dependency); files `yt.yson` writes read the same.
"""

from ._yson import MAX_BYTES as MAX_BYTES
from ._yson import dumps as dumps
from ._yson import loads as loads

__version__ = "0.1.0"
