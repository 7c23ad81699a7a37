"""bryo_filters: the Filter DSL of seed 000, as predicates over `(path, value)` pairs.

Filters select parts of a model's state: `split(model, Param, BatchStat)` groups values by
the first filter that matches them. `to_predicate` turns any filter literal into a
predicate; the classes below are the predicates themselves, hashable and comparable.
Importing this package declares the `bryo_filter_predicate` hook for new literal kinds
(callables are the core's alone: see `ValuePredicate`).
"""

from bryo_plugins import add_hookspecs as _add_hookspecs

from . import hookspecs as _hookspecs
from ._filters import ACCEPTED_LITERALS as ACCEPTED_LITERALS
from ._filters import All as All
from ._filters import Any as Any
from ._filters import Everything as Everything
from ._filters import Filter as Filter
from ._filters import Not as Not
from ._filters import Nothing as Nothing
from ._filters import OfType as OfType
from ._filters import PathContains as PathContains
from ._filters import PathIn as PathIn
from ._filters import Predicate as Predicate
from ._filters import ValuePredicate as ValuePredicate
from ._filters import WithTag as WithTag
from ._filters import filters_to_predicates as filters_to_predicates
from ._filters import is_builtin_filter as is_builtin_filter
from ._filters import to_predicate as to_predicate

_add_hookspecs(_hookspecs)

__version__ = "0.1.0"
