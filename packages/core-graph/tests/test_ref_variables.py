"""Array-ref backed Variables (Flax 0.12's `ref=True`), `var_defaults` and `with_vars`;
hijax Variables have their own tests (test_hijax.py)."""

import copy
import pickle
import threading
import warnings

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from bryo_graph import (
    BatchStat,
    Object,
    Param,
    State,
    VarDefaults,
    Variable,
    clone,
    merge,
    split,
    state,
    update,
    var_defaults,
    vars_as,
    with_metadata,
    with_vars,
)


class Counter(Object):
    def __init__(self) -> None:
        self.w = Param(jnp.ones(2))
        self.count = BatchStat(jnp.zeros((), jnp.int32))


def is_ref(x: object) -> bool:
    return type(x) is jax.Ref


@pytest.fixture(autouse=True)
def _defaults_restored():
    before = var_defaults()
    yield
    var_defaults(hijax=before.hijax, ref=before.ref)


# Ref-backed Variables ----------------------------------------------------------------


def test_ref_variable_keeps_its_value_in_a_ref_and_says_so():
    v = Param(jnp.arange(3.0), ref=True, tag="w")
    assert v.ref and not v.hijax
    assert is_ref(v.get_raw_value())
    assert v.metadata == {"tag": "w", "ref": True}
    assert isinstance(v[...], jax.Array) and isinstance(v.value, jax.Array)
    np.testing.assert_array_equal(v[1:], [1.0, 2.0])
    plain = Param(jnp.arange(3.0))
    assert not plain.ref and plain.metadata == {}


def test_writes_go_into_the_ref_seen_by_its_holders():
    v = Param(jnp.zeros(2), ref=True)
    ref = v.get_raw_value()
    v[...] = jnp.ones(2)
    v[0] = 5.0
    v.value = v.value + 1  # the setter writes into the ref too
    assert v.get_raw_value() is ref
    np.testing.assert_array_equal(ref[...], [6.0, 2.0])


def test_jax_jit_updates_a_ref_variable_in_place():
    v = BatchStat(jnp.zeros((), jnp.int32), ref=True)

    @jax.jit
    def bump(v):
        v[...] += 1

    bump(v)
    bump(v)
    assert int(v[...]) == 2


def test_pytree_round_trip_keeps_the_ref_flag():
    v = Param(jnp.ones(2), ref=True)
    (leaf,), treedef = jax.tree.flatten(v)
    assert leaf is v.get_raw_value()
    plain = jax.tree.unflatten(treedef, [jnp.zeros(2)])
    assert plain.ref and not is_ref(plain.get_raw_value())
    np.testing.assert_array_equal(plain[...], [0.0, 0.0])


def test_copy_of_a_ref_variable_has_its_own_ref():
    v = Param(jnp.ones(2), ref=True)
    w = v.copy()
    assert w.ref and is_ref(w.get_raw_value()) and w.get_raw_value() is not v.get_raw_value()
    w[...] = jnp.zeros(2)
    np.testing.assert_array_equal(v[...], [1.0, 1.0])
    out = v.copy(ref=False)
    assert not out.ref and not is_ref(out.get_raw_value()) and out.metadata == {}
    np.testing.assert_array_equal(out[...], [1.0, 1.0])
    back = out.copy(ref=True)
    assert back.ref and is_ref(back.get_raw_value())


def test_deepcopy_and_pickle_give_a_ref_of_their_own():
    v = Param(jnp.ones(2), ref=True, tag="w")
    for twin in (copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
        assert twin.ref and twin.tag == "w" and is_ref(twin.get_raw_value())
        assert twin.get_raw_value() is not v.get_raw_value()
        twin[...] = jnp.zeros(2)
        np.testing.assert_array_equal(v[...], [1.0, 1.0])


def test_from_metadata_drops_false_flags():
    v = Param.from_metadata(1, {"a": "hi", "hijax": False, "ref": False})
    assert v.metadata == {"a": "hi"} and not v.ref and not v.hijax


def test_with_metadata_can_ask_for_a_ref():
    init = with_metadata(lambda: jnp.ones(2), ref=True)
    v = Param(init())
    assert v.ref and is_ref(v.get_raw_value())
    with pytest.raises(ValueError, match="`ref` given twice"):
        Param(init(), ref=False)


def test_bad_ref_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match=r"got a `jax\.Ref` as its value; pass the array"):
        Param(jax.new_ref(jnp.ones(2)))
    with pytest.raises(TypeError, match="takes one array or number; got a dict"):
        Param({"a": jnp.ones(2)}, ref=True)
    with pytest.raises(TypeError, match="`ref` of `Param"):
        Param(1.0, ref=1)  # type: ignore[arg-type]  # the wrong type under test


def test_ref_flag_cannot_change_in_place():
    v = Param(jnp.ones(2), ref=True, tag="a")
    for change in (
        lambda: v.set_metadata(ref=False),
        lambda: v.del_metadata("ref"),
        lambda: setattr(v, "hijax", True),
    ):
        with pytest.raises(ValueError, match=r"with_vars\(node, ref=...\)"):
            change()
    assert v.metadata == {"tag": "a", "ref": True} and is_ref(v.get_raw_value())
    v.set_metadata(tag="b")  # other metadata still changes
    assert v.metadata == {"tag": "b", "ref": True}


# var_defaults -------------------------------------------------------------------------


def test_var_defaults_reads_as_a_mapping():
    defaults = var_defaults()
    assert isinstance(defaults, VarDefaults)
    assert dict(defaults) == {"hijax": False, "ref": False}
    assert list(defaults) == ["hijax", "ref"] and len(defaults) == 2
    with pytest.raises(KeyError):
        defaults["mode"]


def test_var_defaults_as_context_nests_and_restores():
    with var_defaults(ref=True):
        assert Variable(1.0).ref
        with var_defaults(ref=False):
            assert not Variable(1.0).ref
        assert var_defaults().ref
        assert not Variable(1.0, ref=False).ref  # an explicit keyword wins
    assert not var_defaults().ref and not Variable(1.0).ref


def test_var_defaults_restores_after_an_error():
    with pytest.raises(RuntimeError), var_defaults(ref=True):
        raise RuntimeError
    assert not var_defaults().ref


def test_var_defaults_called_sets_the_default():
    var_defaults(ref=True)
    assert Variable(1.0).ref  # the fixture restores the default


def test_var_defaults_as_decorator_holds_only_during_the_call():
    @var_defaults(ref=True)
    def make() -> Variable:
        return Variable(1.0)

    assert not var_defaults().ref
    assert make().ref
    assert not var_defaults().ref


def test_var_defaults_are_per_thread():
    seen = []
    with var_defaults(ref=True):
        thread = threading.Thread(target=lambda: seen.append(var_defaults().ref))
        thread.start()
        thread.join()
    assert seen == [False]


def test_var_defaults_refuses_bad_values():
    with pytest.raises(TypeError, match="`ref` of `var_defaults` takes True or False"):
        var_defaults(ref="yes")  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(TypeError, match="decorates a function"):
        var_defaults(ref=True)(3)  # type: ignore[arg-type]  # the wrong type under test
    assert not var_defaults().ref


# with_vars -------------------------------------------------------


def test_with_vars_converts_and_back():
    model = Counter()
    refs = with_vars(model, ref=True)
    assert refs is not model and refs.w.ref and is_ref(refs.count.get_raw_value())
    assert not model.w.ref  # the original is untouched
    plain = with_vars(refs, ref=False)
    assert not plain.w.ref and not is_ref(plain.w.get_raw_value())
    np.testing.assert_array_equal(plain.w[...], model.w[...])


def test_with_vars_only_copies_what_it_converts():
    model = Counter()
    refs = with_vars(model, ref=True, only=BatchStat)
    assert refs.count.ref and refs.w is model.w
    again = with_vars(refs, ref=True)  # the BatchStat is a ref already: shared
    assert again.count is refs.count and again.w is not refs.w


def test_with_vars_on_a_bare_variable_a_list_and_a_state():
    assert with_vars(Param(1.0), ref=True).ref
    node = [Variable(1.0), Variable(2.0)]
    mixed = with_vars(node, ref=True, only=lambda path, v: path[0] == 0)
    assert mixed[0].ref and mixed[1] is node[1]
    converted = with_vars(state(Counter()), ref=True)
    assert isinstance(converted, State) and converted["w"].ref


def test_with_vars_refuses_shared_variables_and_leaves_the_model_alone():
    model = Counter()
    model.alias = model.w
    with pytest.raises(ValueError, match=r"Found duplicate at paths alias, w"):
        with_vars(model, ref=True)
    assert not model.w.ref and model.alias is model.w
    assert with_vars(model, ref=True, only=BatchStat).count.ref  # not the shared one
    converted = with_vars(model, ref=True, allow_duplicates=True)
    assert converted.w.ref and converted.alias.ref


def test_with_vars_refuses_bad_flags():
    with pytest.raises(TypeError, match="`ref` of `with_vars` takes True or False"):
        with_vars(Counter(), ref="yes")  # type: ignore[arg-type]  # the wrong type under test


def test_vars_as_is_the_deprecated_name():
    with pytest.warns(DeprecationWarning, match="use `with_vars`"):
        assert vars_as(Param(1.0), ref=True).ref


# Graph operations --------------------------------------------------------------------


def test_split_merge_state_keep_ref_variables():
    model = with_vars(Counter(), ref=True)
    graphdef, params = split(model)
    assert is_ref(params["w"].get_raw_value())
    rebuilt = merge(graphdef, params)
    assert rebuilt.w is model.w  # merge uses the Variables it is given (Flax 0.12)
    rebuilt.count[...] += 1
    assert int(model.count[...]) == 1


def test_update_writes_into_the_refs():
    model = with_vars(Counter(), ref=True)
    ref = model.w.get_raw_value()
    update(model, state(Counter()).replace_by_pure_dict({"w": jnp.full(2, 3.0)}))
    assert model.w.get_raw_value() is ref
    np.testing.assert_array_equal(ref[...], [3.0, 3.0])
    update(model, {"count": jnp.array(7, jnp.int32)})  # a raw value too
    assert int(model.count[...]) == 7 and model.count.ref


def test_clone_gives_new_refs():
    model = with_vars(Counter(), ref=True)
    copy = clone(model)
    assert copy.w.ref and copy.w.get_raw_value() is not model.w.get_raw_value()
    copy.w[...] = jnp.zeros(2)
    np.testing.assert_array_equal(model.w[...], [1.0, 1.0])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=4))
def test_with_vars_round_trip_keeps_values(values):
    model = {"v": Param(jnp.asarray(values, jnp.float32)), "n": BatchStat(jnp.zeros(()))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = with_vars(with_vars(model, ref=True), ref=False)
    assert not back["v"].ref and back["v"].metadata == {}
    np.testing.assert_array_equal(back["v"][...], np.asarray(values, np.float32))
