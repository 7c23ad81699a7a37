"""Metrics that accumulate over batches: `Average`, `Accuracy`, `Welford`, `MultiMetric`.

A metric is a graph node whose running totals are `MetricState` Variables, so it can be
updated inside `jit` (split it, or pass it to `nnx.jit`) and checkpointed like a model.
Each has `update(**batch)` (in place), `compute()` and `reset()`:

    >>> metrics = MultiMetric(accuracy=Accuracy(), loss=Average())
    >>> metrics.update(logits=logits, labels=labels, values=loss)   # doctest: +SKIP
    >>> metrics.compute()                                            # doctest: +SKIP
    {'accuracy': Array(0.6, dtype=float32), 'loss': Array(2.5, dtype=float32)}

`update` takes keyword arguments only, and every metric ignores the ones it does not
use, so one call feeds a `MultiMetric` of metrics with different inputs. A `mask`
leaves some values out.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bryo_filters import Filter
from bryo_graph import GraphDef, Object, State, Variable, split
from bryo_pytree import pytree_dataclass


class MetricState(Variable):
    """A metric's running total (a count, a sum, a mean)."""

    __slots__ = ()


class Metric(Object):
    """The base of metrics. A subclass defines `update(**kwargs)` (in place, ignoring the
    keywords it does not use), `compute()` and `reset()`, and keeps its totals as
    `MetricState`s."""

    def split(self, *filters: Filter) -> tuple[GraphDef, State] | tuple[Any, ...]:
        """`split(self, *filters)`: this metric's graphdef and state."""
        return split(self, *filters)


def _argument(kwargs: dict[str, Any], argname: str, metric: str) -> Any:
    if argname not in kwargs:
        raise TypeError(
            f"{metric}.update needs the keyword argument {argname!r} (the metric's "
            f"`argname`); got {sorted(kwargs)}."
        )
    return kwargs[argname]


class Average(Metric):
    """The mean of every value seen.

    >>> average = Average()
    >>> average.update(values=jnp.array([1.0, 2.0, 3.0]))
    >>> average.update(values=4.0)
    >>> average.compute()
    Array(2.5, dtype=float32)

    Args:
        argname: the keyword of `update` whose values are averaged (default 'values').
    """

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.total = MetricState(jnp.array(0, dtype=jnp.float32))
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))

    def reset(self) -> None:
        """Forget every value seen."""
        self.total[...] = jnp.array(0, dtype=jnp.float32)
        self.count[...] = jnp.array(0, dtype=jnp.int32)

    def update(self, mask: jax.Array | None = None, **kwargs: Any) -> None:
        """Add `kwargs[argname]` (a number or an array), leaving out where `mask` is False
        (`mask` broadcasts against the values, which must then be an array)."""
        values = _argument(kwargs, self.argname, type(self).__name__)
        if isinstance(values, int | float):
            if mask is not None:
                raise ValueError(
                    f"{type(self).__name__}: with a `mask`, {self.argname!r} should be a jax "
                    f"array, not a Python {type(values).__name__}."
                )
            self.total[...] += values
            self.count[...] += 1
        elif mask is None:
            self.total[...] += values.sum(dtype=self.total.dtype)
            self.count[...] += values.size
        else:
            self.total[...] += (values * mask.astype(values.dtype)).sum(dtype=self.total.dtype)
            self.count[...] += mask.sum(dtype=self.count.dtype)

    def compute(self) -> jax.Array:
        """The average (nan before any value)."""
        return self.total[...] / self.count[...].astype(self.total.dtype)


@pytree_dataclass
class Statistics:
    """What `Welford.compute` returns (a pytree)."""

    mean: jax.Array
    standard_error_of_mean: jax.Array
    standard_deviation: jax.Array


class Welford(Metric):
    """Mean, standard deviation and standard error of every value seen, by Welford's
    streaming algorithm (stable for large values).

    Args:
        argname: the keyword of `update` whose values are counted (default 'values').
    """

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))
        self.mean = MetricState(jnp.array(0, dtype=jnp.float32))
        self.m2 = MetricState(jnp.array(0, dtype=jnp.float32))

    def reset(self) -> None:
        """Forget every value seen."""
        self.count[...] = jnp.array(0, dtype=jnp.int32)
        self.mean[...] = jnp.array(0, dtype=jnp.float32)
        self.m2[...] = jnp.array(0, dtype=jnp.float32)

    def update(self, **kwargs: Any) -> None:
        """Fold in `kwargs[argname]` (a number or an array of values)."""
        values = _argument(kwargs, self.argname, type(self).__name__)
        scalar = isinstance(values, int | float)
        count = 1 if scalar else values.size
        dtype = self.mean.dtype  # counts enter the float arithmetic as this dtype
        previous = self.count[...].astype(dtype)
        self.count[...] += count
        total = self.count[...].astype(dtype)
        mean = values if scalar else values.mean(dtype=dtype)
        delta = mean - self.mean[...]
        self.mean[...] += delta * count / total
        spread = 0.0 if scalar else values.var(dtype=dtype) * count
        self.m2[...] += spread + delta * delta * count * previous / total

    def compute(self) -> Statistics:
        """The statistics so far (nan deviations before two values)."""
        count = self.count[...].astype(self.m2.dtype)
        deviation = (self.m2[...] / count) ** 0.5
        return Statistics(
            mean=self.mean[...],
            standard_error_of_mean=deviation / count**0.5,
            standard_deviation=deviation,
        )


class Accuracy(Average):
    """The fraction of correct predictions.

    Multi-class (`threshold=None`): `logits` of shape `(*batch, classes)` are argmax-ed
    and compared with integer `labels` of shape `(*batch,)`. Binary (`threshold` a
    float): `logits >= threshold` is compared with `labels > 0`, same shapes.

    Args:
        threshold: the binary decision threshold, or None for multi-class.
        *args: `Average`'s arguments.
        **kwargs: `Average`'s keyword arguments.
    """

    def __init__(self, threshold: float | None = None, *args: Any, **kwargs: Any) -> None:
        if threshold is not None and not isinstance(threshold, float):
            raise TypeError(
                f"Accuracy: `threshold` must be a float (or None for multi-class); got "
                f"{type(threshold).__name__}."
            )
        self.threshold = threshold
        super().__init__(*args, **kwargs)

    def update(
        self,
        *,
        logits: jax.Array,
        labels: jax.Array,
        mask: jax.Array | None = None,
        **_: Any,
    ) -> None:
        """Count the batch's correct predictions (where `mask`, if given, is True)."""
        if self.threshold is not None and logits.ndim != labels.ndim:
            raise ValueError(
                "For binary classification, Accuracy needs `logits` and `labels` of the same "
                f"rank; got logits.ndim={logits.ndim} and labels.ndim={labels.ndim}."
            )
        if self.threshold is None and logits.ndim != labels.ndim + 1:
            raise ValueError(
                "For multi-class classification, Accuracy needs `logits` with one axis more "
                f"than `labels` (the classes); got logits.ndim={logits.ndim} and "
                f"labels.ndim={labels.ndim}."
            )
        if labels.dtype in (jnp.int64, np.int32, np.int64):
            labels = jnp.astype(labels, jnp.int32)
        elif labels.dtype != jnp.int32:
            raise ValueError(f"Accuracy: `labels` must be integers; got dtype {labels.dtype}.")
        if self.threshold is not None:
            correct = (logits >= self.threshold) == (labels > 0)
        else:
            correct = logits.argmax(axis=-1) == labels
        super().update(values=correct, mask=mask)


_RESERVED = frozenset({"reset", "update", "compute", "split"})


class MultiMetric(Metric):
    """Several metrics under names, updated and computed together.

    `update(**batch)` passes every keyword to every metric (`mask` may be one array for
    all or a dict `{name: mask}`); `compute()` returns `{name: value}`; each metric is
    also an attribute (`metrics.loss`).

    Args:
        **metrics: the metrics, by name.
    """

    def __init__(self, **metrics: Metric) -> None:
        reserved = sorted(_RESERVED & set(metrics))
        if reserved:
            raise ValueError(
                f"MultiMetric: {reserved} would hide its methods; give those metrics other names."
            )
        self._metric_names = tuple(metrics)
        for name, metric in metrics.items():
            setattr(self, name, metric)

    def reset(self) -> None:
        """Reset every metric."""
        for name in self._metric_names:
            getattr(self, name).reset()

    def update(self, **updates: Any) -> None:
        """Update every metric with `updates` (and its own `mask`, if `mask` is a dict)."""
        mask = updates.pop("mask", None)
        for name in self._metric_names:
            metric_mask = mask.get(name) if isinstance(mask, dict) else mask
            extra = {} if metric_mask is None else {"mask": metric_mask}
            getattr(self, name).update(**updates, **extra)

    def compute(self) -> dict[str, Any]:
        """`{name: metric.compute()}` in the order the metrics were given."""
        return {name: getattr(self, name).compute() for name in self._metric_names}
