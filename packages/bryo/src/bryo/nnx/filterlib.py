"""`bryo.nnx.filterlib`: Flax NNX's `nnx.filterlib` names, over `bryo_filters`."""

from bryo_filters import ACCEPTED_LITERALS as ACCEPTED_LITERALS
from bryo_filters import All as All
from bryo_filters import Any as Any
from bryo_filters import Everything as Everything
from bryo_filters import Filter as Filter
from bryo_filters import Not as Not
from bryo_filters import Nothing as Nothing
from bryo_filters import OfType as OfType
from bryo_filters import PathContains as PathContains
from bryo_filters import PathIn as PathIn
from bryo_filters import Predicate as Predicate
from bryo_filters import ValuePredicate as ValuePredicate
from bryo_filters import WithTag as WithTag
from bryo_filters import filters_to_predicates as filters_to_predicates
from bryo_filters import is_builtin_filter as is_builtin_filter
from bryo_filters import to_predicate as to_predicate
