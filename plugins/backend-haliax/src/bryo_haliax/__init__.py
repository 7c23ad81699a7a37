"""bryo_haliax: real Haliax in bryo's named-axis machinery.

Installing this backend is enough: bryo loads its plugin (entry-point groups
`bryo.scan.haliax` and `bryo.graph.haliax`) the first time it meets a Haliax axis or
NamedArray. `haliax.Axis` is then an axis spec of `bryo_scan.scan`/`fold`/`map`,
`Stacked` and `BlockSeq`; a `haliax.NamedArray` is scanned along its named axis and
stacked with a new named axis in front, as Haliax does; its axis names are its logical
axes for bryo's sharding rules.

bryo's own `NamedArray` (`bryo.hax`, `bryo_named`) and Haliax's are different types. Both
scan and stack side by side in one call; an operation of one library given the other's
array is an error that says to convert it, with `from_haliax` or `to_haliax`:

    >>> import haliax
    >>> x = haliax.ones((haliax.Axis("Batch", 2), haliax.Axis("Embed", 3)))
    >>> from_haliax(x).axis_names
    ('Batch', 'Embed')
"""

from ._convert import from_haliax as from_haliax
from ._convert import to_haliax as to_haliax

__version__ = "0.1.0"
