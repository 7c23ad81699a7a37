"""`clear_caches`: give back, at once, what bryo_mox keeps between calls.

What bryo_mox caches for one MoX lives with it and dies with it: the one-equation jaxprs
`eval_mox` binds (keyed weakly by the equation node) and the element view `query` reads
(`Mox.memo`). What it shares between MoXes is bounded and holds no MoX: the equations
`loads` traced (`_load.TRACES`, keyed by content, 4,096 at most), compiled XPath
expressions (512), the texts of attribute values, the (primitive, param names) pairs
`loads` lowered (`_lowering.LOWERED`, 4,096), the tree specs it parsed
(`_treespec.PARSED`, 16) and the attribute texts it decoded (`document._DECODED_ATTRS`,
4,096). `clear_caches` empties them all.
"""

from __future__ import annotations

from ._codec import _encode_str
from ._eval import clear_equation_cache
from ._load import TRACES
from ._lowering import LOWERED
from ._treespec import PARSED
from ._view import compile_xpath
from .document import _DECODED_ATTRS


def clear_caches() -> None:
    """Drop every cache bryo_mox keeps, for all MoXes at once.

    Deleting a MoX already frees what was cached for it, so this is rarely needed: it
    gives back the bounded caches shared between MoXes (what `loads` traced, compiled
    XPath expressions), e.g. after loading many untrusted files. Compiled functions are
    jax's own: `jax.clear_caches()` drops those. Later calls fill the caches again; no
    result changes.

    Example:
        >>> import bryo_mox
        >>> bryo_mox.clear_caches()
    """
    TRACES.clear()
    LOWERED.clear()
    PARSED.clear()
    _DECODED_ATTRS.clear()
    compile_xpath.cache_clear()
    _encode_str.cache_clear()
    clear_equation_cache()
