"""treescope renders MoX nodes: the root, module calls (with attributes) and equations."""

import jax
import jax.numpy as jnp
import pytest

from bryo_mox import make_mox, query
from bryo_mox.testing import MLP

treescope = pytest.importorskip("treescope")


@pytest.fixture
def traced(toy):
    model = MLP((3, 4, 2), key=jax.random.key(0))
    return make_mox(lambda m, v: m(v))(model, jnp.ones((2, 3)))


def test_the_root_renders_its_types_and_folds_down_to_equations(traced):
    text = treescope.render_to_text(traced)
    assert text.startswith("Mox(")
    assert "inputs=[" in text and "'f32[2,3]'" in text and "outputs=['f32[2,2]']" in text
    assert "ModuleCall(" in text and "type='bryo_mox.testing.MLP'" in text
    assert "primitive='dot_general'" in text


def test_a_module_call_renders_its_attributes_and_state_counts(traced):
    (call,) = query("//module_call[@name='layers/0']", traced)
    text = treescope.render_to_text(call)
    assert text.startswith("ModuleCall(")
    assert "name='layers/0'" in text and "'features': 4" in text and "n_state=2" in text


def test_an_equation_renders_primitive_params_and_types(traced):
    (dot, *_) = query("//dot_general", traced)
    text = treescope.render_to_text(dot)
    assert text.startswith("Equation(")
    assert "primitive='dot_general'" in text and "'dimension_numbers'" in text
    (relu,) = query("//custom_jvp_call", traced)
    assert "'call_jaxpr'" not in treescope.render_to_text(relu)  # regions are not params
