"""Hijax Variables (Flax NNX 0.12's `hijax=True`): plain `jax.jit`, `jax.grad` and
`jax.lax.scan` update them in place; on a JAX without `jax.experimental.hijax` asking for
one raises a ValueError naming the version needed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_graph import (
    BatchStat,
    HijaxVariable,
    Object,
    Param,
    Variable,
    graphdef,
    merge,
    raw_value_getter,
    split,
    var_defaults,
    with_vars,
)
from bryo_graph import _hijax as hijax_module

needs_hijax = pytest.mark.skipif(
    not hijax_module.HIJAX_AVAILABLE, reason="hijax Variables need JAX 0.10 or newer"
)


@pytest.mark.skipif(hijax_module.HIJAX_AVAILABLE, reason="this JAX has hijax")
def test_old_jax_names_the_version_needed():
    with pytest.raises(ValueError, match=r"JAX 0\.10 or newer; this is JAX"):
        Param(jnp.ones(2), hijax=True)
    plain = Param(jnp.ones(2))
    with pytest.raises(ValueError, match=r"`with_vars`.*JAX 0\.10 or newer"):
        with_vars(plain, hijax=True)
    with var_defaults(hijax=True):  # the default is recorded; making a Variable raises
        assert var_defaults().hijax
        with pytest.raises(ValueError, match=r"`Variable\(...\)` asks for a hijax Variable"):
            Variable(1.0)
        assert not Variable(1.0, hijax=False).hijax
    assert not plain.hijax  # left as it was


def test_the_version_check_names_what_asked(monkeypatch):
    monkeypatch.setattr(hijax_module, "HIJAX_AVAILABLE", False)
    with pytest.raises(ValueError, match=r"`Param\(...\)` asks for a hijax Variable.*ref=True"):
        Param(1.0, hijax=True)


@needs_hijax
def test_set_raw_value_of_a_hijax_variable_stores_through_it():
    high = with_vars(Param(jnp.array(1), tag="hi"), hijax=True)
    high.set_raw_value(jnp.array(4))
    assert int(high.raw_value) == 4 and int(high[...]) == 4 and high.tag == "hi"


@needs_hijax
def test_jit_writes_into_a_hijax_variable_in_place():
    low = Param(jnp.array(1), tag="hi")
    high = with_vars(low, hijax=True)
    assert high.hijax and not low.hijax and isinstance(high, Param) and high.var_type is Param
    assert isinstance(high, HijaxVariable) and high.get_metadata()["hijax"]
    high[...] = 2
    assert high[...] == 2 and low[...] == 1

    @jax.jit
    def step(variable, x):
        variable[...] = x
        assert variable.tag == "hi" and variable.hijax  # metadata reads inside the trace
        variable[...] += 5
        return variable + 2

    assert step(high, 10) == 17
    assert high[...] == 15
    back = with_vars(high, hijax=False)
    assert type(back) is Param and not back.hijax and back[...] == 15 and back.tag == "hi"


@needs_hijax
def test_a_dict_value_may_change_structure_inside_jit():
    metrics = Variable({}, hijax=True)
    counts = Variable({"a": jnp.array(0), "b": jnp.array(2)}, hijax=True)

    @jax.jit
    def record(x, metrics, counts):
        metrics["sum"] = jnp.sum(x)
        counts["a"] += 1
        counts["b"] *= 2

    record(jnp.ones((4, 5)), metrics, counts)
    assert metrics["sum"] == 20 and counts["a"] == 1 and counts["b"] == 4


@needs_hijax
def test_a_pytree_module_of_hijax_variables_under_plain_jit():
    class Counter(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones((2, 3)))
            self.count = Variable(jnp.array(0))

    counter = with_vars(Counter(), hijax=True)

    @jax.jit
    def forward(counter, x):
        counter.count[...] += 1
        return x @ counter.w

    assert forward(counter, jnp.ones((1, 2))).shape == (1, 3)
    forward(counter, jnp.ones((1, 2)))
    assert counter.count[...] == 2
    _, state = split(counter)  # hijax Variables are Variables for the graph functions
    assert state["count"] is counter.count


@needs_hijax
def test_grad_and_scan_see_writes_through_the_closure():
    v = Variable(jnp.array(2.0), hijax=True)

    def loss(x):
        v[...] = jax.lax.stop_gradient(x * 3)
        return x**2 + v[...]

    np.testing.assert_allclose(jax.grad(loss)(jnp.array(4.0)), 8.0)
    np.testing.assert_allclose(v[...], 12.0)

    def body(carry, _):
        v[...] = v[...] + 1.0
        return carry, None

    jax.lax.scan(body, None, None, length=5)
    np.testing.assert_allclose(v[...], 17.0)
    assert jax.eval_shape(lambda v: v[...] + 1, v).shape == ()


@needs_hijax
def test_writing_a_differentiated_value_explains_the_fix():
    v = Variable(jnp.array(2.0), hijax=True)

    def loss(x):
        v[...] = x * 3
        return x**2

    with pytest.raises(TypeError, match="stop_gradient"):
        jax.grad(loss)(jnp.array(1.0))


@needs_hijax
@pytest.mark.parametrize("hijax", [True, False])
@pytest.mark.parametrize("ref", [True, False])
def test_flags_from_the_constructor_copy_from_metadata_and_defaults(hijax, ref):
    for v in (
        Variable(jnp.array(1), hijax=hijax, ref=ref),
        Variable(jnp.array(1)).copy(hijax=hijax, ref=ref),
        with_vars(Variable(jnp.array(1)), hijax=hijax, ref=ref),
    ):
        assert (v.hijax, v.ref) == (hijax, ref)
        assert isinstance(v, HijaxVariable) is hijax
        assert isinstance(v.get_raw_value(), jax.Ref) is ref
    made = Param.from_metadata(jnp.array(1), {"a": "hi", "hijax": hijax, "ref": False})
    assert made.hijax is hijax and isinstance(made, Param) and made.a == "hi"
    with var_defaults(hijax=hijax, ref=ref):
        made = Param(1.0)
        assert (made.hijax, made.ref) == (hijax, ref) and isinstance(made, Param)
        assert not Param(1.0, hijax=False).hijax


@needs_hijax
def test_with_vars_converts_only_what_the_filter_selects():
    class Pair(Object):
        def __init__(self) -> None:
            self.a = Param(1)
            self.b = Variable(2)

    pair = with_vars(Pair(), hijax=True, ref=True)
    assert pair.a.hijax and pair.a.ref and pair.b.hijax and pair.b.ref
    mixed = with_vars(pair, hijax=False, only=lambda path, v: path == ("b",))
    assert mixed.a is pair.a and not mixed.b.hijax and mixed.b.ref
    assert repr(pair.a).endswith("hijax=True)")


@needs_hijax
def test_inside_plain_jit_a_hijax_variable_is_an_instance_of_its_class():
    seen = {}

    @jax.jit
    def step(param):
        seen.update(
            param=isinstance(param, Param),
            variable=isinstance(param, Variable),
            hijax=isinstance(param, HijaxVariable),
            other=isinstance(param, BatchStat),
            array=isinstance(jnp.zeros(()) + param[...], Param),
        )
        param[...] += 1

    param = Param(jnp.array(1), hijax=True)
    step(param)
    assert seen == {"param": True, "variable": True, "hijax": True, "other": False, "array": False}
    assert param[...] == 2 and not isinstance(jnp.zeros(()), Variable)


@needs_hijax
def test_split_and_merge_inside_plain_jit_train_a_hijax_model():
    # Flax's hijax optimization step: split under a plain `jax.jit`, differentiate a
    # plain copy of the parameters, write the update into the hijax ones in place
    class Counter(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones((2, 3)))
            self.count = Variable(jnp.array(0))

    model = with_vars(Counter(), hijax=True)
    outside = graphdef(model)
    seen = []

    @jax.jit
    def train_step(model, x):
        graphdef, params, rest = split(model, Param, ...)
        seen.append(graphdef == outside)  # the Variables' classes, not the tracers'
        _, tree_state = split(model, graph=False)
        seen.append(sorted(tree_state.flat_state()) == [("count",), ("w",)])

        def loss(params):
            inner = merge(graphdef, params, rest)
            inner.count[...] += 1
            return jnp.sum(x @ inner.w[...])

        grads = jax.grad(loss)(with_vars(params, hijax=False))
        params["w"][...] -= grads["w"][...]

    train_step(model, jnp.ones((1, 2)))
    np.testing.assert_array_equal(model.w[...], np.zeros((2, 3)))
    assert model.count[...] == 1 and model.w.hijax and seen == [True, True]


@needs_hijax
def test_repr_names_a_hijax_variable_by_its_variable_class():
    class Counter(Object):
        def __init__(self) -> None:
            self.w = Param(jnp.ones(2))
            self.count = Variable(jnp.array(0))

    counter = with_vars(Counter(), hijax=True)
    assert repr(counter.count).startswith("Variable(value=") and repr(counter.count).endswith(
        ", hijax=True)"
    )
    assert repr(Param(2, a=1, hijax=True)) == "Param(value=2, a=1, hijax=True)"
    text = repr(counter)
    assert "Param: 2 (8 B)" in text and "Variable: 1 (4 B)" in text
    assert "count=Variable(" in text and text.count("hijax=True") == 2
    assert "HijaxVariable" not in text


@needs_hijax
def test_raw_value_getter_reads_hijax_variables_through_raw_value():
    """A hijax Variable keeps its contents as leaves: a getter for a list holding one
    reads `raw_value` (the plain one's fast path would read the leaves)."""
    plain, high = Param(jnp.array(1)), Variable(jnp.array(2), hijax=True)
    read = raw_value_getter([plain, high])
    high[...] = 3
    assert [int(read(plain)), int(read(high))] == [1, 3]
