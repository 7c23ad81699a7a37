"""Variables behave like their values (Flax NNX 0.12): operators, indexing, get/set hooks,
metadata, pytree behaviour, copies and pickling; `VariableState` as the older spelling."""

import copy
import pickle
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_graph import BatchStat, Param, Variable, VariableState, raw_value_getter


def test_equality_and_operators_compare_values():
    a, b = Param(jnp.array(2)), Param(jnp.array(3))
    assert not bool(a == b) and bool(a != b) and bool(a < b)
    assert Param(1) == Param(1) and Param(1) == 1 and Param(1) != 2
    assert int(a + b) == 5 and int(b - a) == 1 and int(3 * a) == 6 and int(-a) == -2
    assert divmod(Param(7), 2) == (3, 1) and round(Param(2.6)) == 3
    np.testing.assert_array_equal(Param(jnp.array([1, 2])) == jnp.array([1, 3]), [True, False])


def test_variables_hash_by_identity():
    a, b = Param(1), Param(1)
    assert a == b and len({a, b}) == 2 and {a: "a"}[a] == "a"


def test_index_assignment_stores_arrays():
    v = Param(jnp.zeros((2, 2)))
    v[...] = 3
    assert isinstance(v.value, jax.Array) and v.value.dtype == jnp.float32
    np.testing.assert_array_equal(v.value, 3.0)
    v[0, 1] = 7
    assert float(v[0, 1]) == 7.0 and float(v[1, 1]) == 3.0
    v[...] += 1
    assert float(v[1, 1]) == 4.0


def test_index_assignment_on_numpy_copies_and_on_scalars_replaces():
    array = np.zeros(3)
    v = Variable(array)
    v[1] = 5.0
    assert array[1] == 0.0 and v.value[1] == 5.0  # the caller's array is not written
    scalar = Variable(0)
    scalar[...] = 3
    assert scalar[...] == 3


def test_in_place_operators_update_the_variable():
    count = Variable(jnp.array(0))
    alias = count
    count += 2
    assert count is alias and int(count.value) == 2


def test_get_and_set_value_with_index():
    v = Param(jnp.arange(4.0))
    assert float(v.get_value(index=2)) == 2.0
    v.set_value(9.0, index=0)
    assert float(v.get_value()[0]) == 9.0
    assert v.get_raw_value() is v.raw_value
    v.set_raw_value(5)
    assert v.value == 5


class Logged(Variable):
    """Redefines `raw_value`: every write of it is logged."""

    writes: typing.ClassVar[list] = []

    @property
    def raw_value(self):
        return Variable.raw_value.fget(self)

    @raw_value.setter
    def raw_value(self, value):
        Logged.writes.append(value)
        Variable.raw_value.fset(self, value)


def test_set_raw_value_goes_through_a_redefined_raw_value():
    logged = Logged(1, tag="t")
    logged.set_raw_value(5)
    assert Logged.writes == [5] and logged.raw_value == 5 and logged.tag == "t"
    plain = Param(1, tag="t")
    plain.set_raw_value(6)
    assert plain.raw_value == 6 and plain.tag == "t"


class Doubled(Variable):
    """Stores half the value it is given, reads it doubled back."""

    def get_value(self, *, index=None):
        value = self.raw_value * 2
        return value if index is None else value[index]

    def set_value(self, value, *, index=None):
        self.set_raw_value(jnp.asarray(value) / 2)


def test_subclass_get_and_set_value_hooks_serve_every_access():
    v = Doubled(jnp.array(3.0))
    assert float(v.value) == 6.0 and float(v + 1) == 7.0 and float(jnp.asarray(v)) == 6.0
    v.value = 10.0
    assert float(v.raw_value) == 5.0 and float(v[...]) == 10.0


def test_metadata_api():
    v = Variable(1.0, tag="a")
    assert v.metadata == {"tag": "a"} and v.get_metadata("tag") == "a"
    assert v.get_metadata("missing", default=None) is None
    with pytest.raises(KeyError, match="has no metadata 'missing'"):
        v.get_metadata("missing")
    v.set_metadata(b=2)
    v.set_metadata("c", 3)
    assert v.metadata == {"tag": "a", "b": 2, "c": 3} and v.has_metadata("b")
    v.set_metadata({"only": True})
    assert v.metadata == {"only": True}
    v.del_metadata("only")
    assert v.metadata == {}
    with pytest.raises(TypeError, match="takes a dict"):
        v.set_metadata(1, 2, 3)
    with pytest.raises(TypeError, match="not a mix"):
        v.set_metadata({"a": 1}, b=2)


def test_metadata_changes_never_touch_copies():
    v = Param(1, tag="a")
    twin = jax.tree.map(lambda x: x, v)
    v.set_metadata(tag="b")
    assert twin.tag == "a" and v.tag == "b"


def test_generic_subscript():
    alias = Param[jax.Array]
    p = alias(jnp.ones(2))
    assert type(p) is Param and p.metadata == {}


def test_pytree_with_one_child_keeps_type_and_metadata():
    p = BatchStat(jnp.ones(2), tag="x")
    assert jax.tree.leaves(p) == [p.value]
    doubled = jax.tree.map(lambda x: x * 2, p)
    assert type(doubled) is BatchStat and doubled.tag == "x" and doubled is not p
    np.testing.assert_array_equal(doubled.value, 2.0)
    np.testing.assert_array_equal(p.value, 1.0)
    grads = jax.grad(lambda q: jnp.sum(q[...] ** 2))(Param(jnp.arange(3.0)))
    assert type(grads) is Param
    np.testing.assert_array_equal(grads.value, [0.0, 2.0, 4.0])
    assert float(jax.jit(lambda q: q * 2)(Param(jnp.array(2.0)))) == 4.0


_WRITES = (
    lambda v, x: setattr(v, "value", x),
    lambda v, x: v.set_value(x),
    lambda v, x: v.__setitem__(..., x),
    lambda v, x: v.set_raw_value(x),
    lambda v, x: setattr(v, "raw_value", x),
    lambda v, x: object.__setattr__(v, "raw_value", x),
    lambda v, x: v.copy_from(Param(x, tag="t")),
    lambda v, x: v.__setstate__({"raw_value": x, "metadata": {"tag": "t"}}),
    lambda v, x: v.__iadd__(x - v.value),
)


@settings(deadline=None, max_examples=40)
@given(
    st.sampled_from([Param, Doubled]),  # Doubled: through get_value/set_value hooks
    st.lists(st.tuples(st.integers(0, len(_WRITES) - 1), st.integers(-9, 9)), max_size=8),
)
def test_the_pytree_child_is_the_raw_value_after_every_kind_of_write(cls, writes):
    """JAX reads a Variable's child where the value is stored (`Held`, no Python code):
    every way of writing the value must be seen by the next flatten, and a round trip
    through JAX gives a Variable of the same class, value and metadata."""
    v = cls(jnp.zeros(2), tag="t")
    for which, x in writes:
        jax.tree.leaves(v)
        _WRITES[which](v, jnp.full(2, float(x)))
        (leaf,) = jax.tree.leaves(v)
        assert leaf is v.raw_value
        again = jax.tree.map(lambda a: a, v)
        assert type(again) is cls and again.metadata == {"tag": "t"}
        assert again.raw_value is v.raw_value and again is not v


class Redefined(Param):
    """A Variable class with a `raw_value` of its own (as hijax Variables have), which
    counts its reads."""

    reads = 0

    @property
    def raw_value(self):
        Redefined.reads += 1
        return Variable.raw_value.__get__(self)

    @raw_value.setter
    def raw_value(self, value):
        Variable.raw_value.__set__(self, value)


@settings(deadline=None, max_examples=40)
@given(
    st.sampled_from([Param, Doubled, Redefined]),
    st.lists(st.tuples(st.integers(0, len(_WRITES) - 1), st.integers(-9, 9)), max_size=8),
)
def test_raw_value_getter_reads_raw_value_after_every_kind_of_write(cls, writes):
    """The getter a transform picks once for its Variables reads what `raw_value` reads,
    however the values were written since; a class that redefines `raw_value` (hijax
    Variables do) is read through it."""
    variables = [Param(jnp.zeros(2)), cls(jnp.zeros(2), tag="t")]
    read = raw_value_getter(variables)
    for which, x in [*writes, (0, 1)]:
        _WRITES[which](variables[1], jnp.full(2, float(x)))
        expected = [v.raw_value for v in variables]
        reads = Redefined.reads
        assert [read(v) for v in variables] == expected
        assert Redefined.reads == reads + (cls is Redefined)


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=5), st.text(max_size=3))
def test_copy_deepcopy_pickle_round_trips(values, tag):
    v = Param(np.array(values, np.float32), tag=tag)
    for twin in (copy.copy(v), copy.deepcopy(v), pickle.loads(pickle.dumps(v)), v.copy()):
        assert type(twin) is Param and twin is not v and twin.metadata == {"tag": tag}
        np.testing.assert_array_equal(twin.value, v.value)


def test_copy_replaces_value_and_metadata():
    v = Param(1, tag="a")
    w = v.copy(2, tag="b")
    assert (v.value, v.tag, w.value, w.tag) == (1, "a", 2, "b") and type(w) is Param


def test_variable_state_builds_variables():
    state = VariableState(type=Param, value=0)
    assert type(state) is Param and state.type is Param and state.value == 0
    assert isinstance(Param(0), VariableState) and issubclass(BatchStat, VariableState)
    assert VariableState(Param, 1, tag="t").tag == "t"
    with pytest.raises(TypeError, match="needs a Variable class as `type`"):
        VariableState(type=int, value=0)


def test_missing_attribute_names_the_metadata():
    with pytest.raises(AttributeError, match=r"no metadata or value attribute 'nope'"):
        Variable(0, tag="t").nope  # noqa: B018


def test_get_metadata_reports_flax_flags_without_storing_them():
    from bryo_graph import use_eager_sharding

    v = Param(jnp.ones(2), tag="w")
    assert v.get_metadata() == {"tag": "w", "hijax": False, "ref": False, "eager_sharding": True}
    assert v.metadata == {"tag": "w"}
    # replacing everything with what get_metadata gave back stores the entries only
    v.set_metadata({**v.get_metadata(), "extra": 1})
    assert v.metadata == {"tag": "w", "extra": 1}
    # a Variable rebuilt from its metadata is like the original
    twin = Param(v.get_value(), **v.get_metadata())
    assert twin.metadata == v.metadata and twin.get_metadata() == v.get_metadata()
    with use_eager_sharding(False):
        assert v.get_metadata("eager_sharding") is False
    assert Param(1.0, eager_sharding=False).get_metadata("eager_sharding") is False
    assert Param(1.0, ref=True).get_metadata()["ref"] is True
    with pytest.raises(ValueError, match="cannot change the `ref`/`hijax` metadata"):
        v.set_metadata({"ref": True})
    assert v.metadata == {"tag": "w", "extra": 1}
