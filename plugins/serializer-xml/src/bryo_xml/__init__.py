"""bryo_xml: MoX in XML (lxml), safe to read from untrusted files.

Installing this package registers the `xml` format: `bryo_mox.dumps(mox, format="xml")`,
`bryo_mox.loads(text, format="xml")`, and `dump`/`load` of `.xml` files. `dumps`/`loads`
here work on `bryo_mox.document.DocNode` trees.
"""

from ._xml import MAX_BYTES as MAX_BYTES
from ._xml import dumps as dumps
from ._xml import loads as loads

__version__ = "0.1.0"
