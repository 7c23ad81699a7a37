"""`hax.util`: the predicates Haliax code imports from `haliax.util`, e.g. as `is_scanned=`."""

from bryo_named import is_jax_or_hax_array_like as is_jax_or_hax_array_like
from bryo_named import is_named_array as is_named_array
