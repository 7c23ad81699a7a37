"""`nnx.metrics`: the metrics namespace (`Average`, `Accuracy`, `Welford`, `MultiMetric`, ...)."""

from ._metrics import Accuracy as Accuracy
from ._metrics import Average as Average
from ._metrics import Metric as Metric
from ._metrics import MetricState as MetricState
from ._metrics import MultiMetric as MultiMetric
from ._metrics import Statistics as Statistics
from ._metrics import Welford as Welford
