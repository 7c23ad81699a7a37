"""Metrics: values against numpy, masks, resets, `MultiMetric` routing, split/merge under
`jax.jit`, and the argument errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import bryo_graph as graph
from bryo_training import metrics

LOGITS = jnp.array([[-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, -1.0]])
LABELS = jnp.array([1, 1, 0, 1, 0])


def test_average_with_and_without_masks():
    average = metrics.Average()
    assert jnp.isnan(average.compute())
    average.update(values=jnp.array([1.0, 2.0, 3.0]))
    average.update(values=4)
    assert float(average.compute()) == 2.5
    average.update(values=jnp.array([100.0, 5.0]), mask=jnp.array([False, True]))
    assert float(average.compute()) == 3.0
    average.reset()
    assert int(average.count[...]) == 0
    with pytest.raises(ValueError, match="should be a jax array"):
        average.update(values=1.0, mask=jnp.ones(1))
    with pytest.raises(TypeError, match="needs the keyword argument 'values'"):
        average.update(loss=1.0)


def test_accuracy_multi_class_and_binary():
    accuracy = metrics.Accuracy()
    accuracy.update(logits=LOGITS, labels=LABELS)
    assert float(accuracy.compute()) == pytest.approx(0.6)
    binary = metrics.Accuracy(threshold=0.5)
    binary.update(logits=jnp.array([0.4, 0.7, 0.2, 0.6]), labels=jnp.array([0, 1, 1, 1]))
    assert float(binary.compute()) == 0.75
    with pytest.raises(
        ValueError, match="multi-class classification, Accuracy needs `logits` with one axis more"
    ):
        accuracy.update(logits=LOGITS, labels=LOGITS.astype(jnp.int32))
    with pytest.raises(ValueError, match="`labels` must be integers"):
        accuracy.update(logits=LOGITS, labels=LABELS.astype(jnp.float32))
    with pytest.raises(TypeError, match="`threshold` must be a float"):
        metrics.Accuracy(threshold=1)


@settings(max_examples=20, deadline=None)
@given(
    batches=st.lists(
        arrays(np.float32, st.integers(1, 6), elements=st.floats(-1e3, 1e3, width=32)),
        min_size=1,
        max_size=4,
    )
)
def test_welford_matches_numpy_over_any_batching(batches):
    welford = metrics.Welford()
    for batch in batches:
        welford.update(values=jnp.asarray(batch))
    values = np.concatenate(batches).astype(np.float64)
    stats = welford.compute()
    np.testing.assert_allclose(stats.mean, values.mean(), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(stats.standard_deviation, values.std(), rtol=1e-3, atol=1e-2)
    expected_sem = values.std() / np.sqrt(values.size)
    np.testing.assert_allclose(stats.standard_error_of_mean, expected_sem, rtol=1e-3, atol=1e-2)


def test_multi_metric_routes_keywords_and_masks():
    multi = metrics.MultiMetric(accuracy=metrics.Accuracy(), loss=metrics.Average())
    loss = jnp.array([1.0, 2.0, 3.0, 4.0])
    multi.update(logits=LOGITS, labels=LABELS, values=loss, mask={"loss": loss > 1})
    values = multi.compute()
    assert list(values) == ["accuracy", "loss"]
    assert float(values["accuracy"]) == pytest.approx(0.6) and float(values["loss"]) == 3.0
    multi.reset()
    assert jnp.isnan(multi.loss.compute())
    with pytest.raises(ValueError, match=r"\['update'\] would hide its methods"):
        metrics.MultiMetric(update=metrics.Average())


def test_metrics_split_and_merge_under_jit():
    multi = metrics.MultiMetric(loss=metrics.Average("loss"), welford=metrics.Welford("loss"))
    graphdef, state = multi.split()
    hash(graphdef)

    @jax.jit
    def step(state, loss):
        metric = graph.merge(graphdef, state)
        metric.update(loss=loss)
        return graph.split(metric)[1]

    state = step(state, jnp.array([1.0, 3.0]))
    state = step(state, jnp.array(5.0))
    merged = graph.merge(graphdef, state)
    assert float(merged.compute()["loss"]) == 3.0
    assert float(merged.welford.compute().mean) == 3.0
