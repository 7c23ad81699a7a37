"""treescope renders graph Objects, Variables and States through `__treescope_repr__`."""

import jax.numpy as jnp
import pytest

from bryo_graph import Object, Param, State, Variable, VariableState, object_attributes, split

treescope = pytest.importorskip("treescope")


class Block(Object):
    def __init__(self) -> None:
        self.weight = Param(jnp.ones((2, 3)), sharding=("embed", "mlp"))
        self.count = Variable(jnp.zeros(()))
        self.size = 3
        self._hidden = "private"


class Model(Object):
    def __init__(self) -> None:
        self.block = Block()
        self.name = "model"


def test_objects_render_their_public_attributes_and_nested_nodes():
    text = treescope.render_to_text(Model())
    assert text.startswith("Model(")
    assert "block=Block(" in text and "name='model'" in text
    assert "weight=Param(" in text and "sharding=('embed', 'mlp')" in text
    assert "_hidden" not in text


def test_variables_render_type_value_and_metadata():
    variable = Param(jnp.arange(3.0), sharding=("mlp",))
    built = VariableState(type=Param, value=jnp.arange(3.0), sharding=("mlp",))  # a Param
    for node in (variable, built):
        text = treescope.render_to_text(node)
        assert text.startswith("Param(")
        assert "value=" in text and "sharding=('mlp',)" in text


def test_states_render_as_their_nested_mapping():
    _, state = split(Model())
    text = treescope.render_to_text(state)
    assert text.startswith("State(")
    assert "'block'" in text and "'weight'" in text and "Param(" in text
    assert isinstance(state, State)
    empty = treescope.render_to_text(State({}))
    assert empty.startswith("State(")


def test_rendering_leaves_the_nodes_unchanged():
    model = Model()
    before = jnp.array(model.block.weight.value)
    treescope.render_to_text(model)
    treescope.render_to_text(VariableState(Param, jnp.ones(2)))
    assert jnp.array_equal(model.block.weight.value, before)
    # Rendering may fill the flattening caches (`_object__*` bookkeeping), never attributes.
    assert [name for name, _ in object_attributes(model)] == ["block", "name"]
