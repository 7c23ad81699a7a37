"""`nnx.nn.dtypes`: the dtype promotion layers use."""

from bryo_nnx.dtypes import PromoteDtypeFn as PromoteDtypeFn
from bryo_nnx.dtypes import canonicalize_dtype as canonicalize_dtype
from bryo_nnx.dtypes import promote_dtype as promote_dtype
