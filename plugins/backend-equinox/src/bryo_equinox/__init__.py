"""bryo_equinox: bryo on `equinox.Module` models, with nothing rewritten.

Importing nothing is needed: bryo loads this plugin through its entry points the first time
it meets an Equinox class, and `bryo.split(model, Param, ...)`, `merge`, `state`, `graphdef`
and `clone` then work on Equinox models, with paths made of field names (`('layers', 0,
'weight')`). Array leaves are `Param`s, the initial and current values of stateful layers
(`eqx.nn.StateIndex`, `eqx.nn.State`) are `BatchStat`s, and static fields stay in the
GraphDef. Equinox predicates (`eqx.is_array`) are bryo filters (a core rule:
`bryo_filters.ValuePredicate`, re-exported here), and `filter_spec`/`partition` turn bryo
filters into Equinox filter specs. Equinox models are immutable: `bryo.update` refuses them,
`updated` returns an updated copy.
"""

from bryo_filters import ValuePredicate as ValuePredicate

from ._filters import filter_spec as filter_spec
from ._filters import partition as partition
from ._nodes import FrozenDict as FrozenDict
from ._nodes import FrozenList as FrozenList
from ._nodes import FrozenTuple as FrozenTuple
from ._nodes import PytreeView as PytreeView
from ._update import updated as updated

__version__ = "0.1.0"
