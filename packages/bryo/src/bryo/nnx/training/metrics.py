"""`nnx.metrics` (`nnx.training.metrics`): metrics accumulated over batches."""

from bryo_training.metrics import Accuracy as Accuracy
from bryo_training.metrics import Average as Average
from bryo_training.metrics import Metric as Metric
from bryo_training.metrics import MetricState as MetricState
from bryo_training.metrics import MultiMetric as MultiMetric
from bryo_training.metrics import Statistics as Statistics
from bryo_training.metrics import Welford as Welford
