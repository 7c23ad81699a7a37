"""`make_jaxpr` over graph nodes: simple mode only, arguments left unchanged."""

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Variable
from bryo_transforms import make_jaxpr


class Counter(Object):
    def __init__(self) -> None:
        self.count = Variable(jnp.array(0))

    def __call__(self) -> jnp.ndarray:
        self.count.value = self.count.value + 1
        return self.count.value


@pytest.mark.parametrize("modes", [{"graph_updates": False}, {"graph": False}])
def test_traces_without_changing_the_arguments(modes):
    counter = Counter()
    jaxpr = make_jaxpr(lambda m: m(), **modes)(counter)
    assert [eqn.primitive.name for eqn in jaxpr.eqns] == ["add"]
    assert int(counter.count.value) == 0
    if modes.get("graph") is False:  # tree mode refuses sharing
        with pytest.raises(ValueError, match="Duplicate Variable"):
            make_jaxpr(lambda a, b: a.value, **modes)(counter.count, counter.count)
    else:  # graph simple mode traces one Variable
        jaxpr = make_jaxpr(lambda a, b: a.value + b.value, **modes)(counter.count, counter.count)
        assert len(jaxpr.in_avals) == 1


def test_graph_updates_are_refused_with_the_way_out():
    with pytest.raises(ValueError, match="Pass `graph_updates=False`"):
        make_jaxpr(lambda m: m())(Counter())
