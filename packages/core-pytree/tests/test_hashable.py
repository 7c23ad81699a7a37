"""The wrappers that let unhashable statics sit in treedefs: by value for plain
containers of hashable values, by identity for anything else."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bryo_pytree import ByIdentity, ByValue, hashable, unwrap_hashable


def test_hashable_wraps_only_unhashable_values():
    assert hashable(3) == 3 and hashable((1, "a")) == (1, "a")
    value = [1, 2]
    wrapped = hashable(value)
    assert isinstance(wrapped, ByValue) and unwrap_hashable(wrapped) is value
    assert wrapped == hashable([1, 2]) and hash(wrapped) == hash(hashable([1, 2]))
    assert wrapped != hashable((1, 2)) and wrapped != hashable([2, 1])  # type and order count


def test_containers_of_unhashable_values_and_arrays_compare_by_identity():
    array = np.ones(2)
    for value, twin in ((array, array.copy()), ([array], [array]), ({"w": array}, {"w": array})):
        wrapped = hashable(value)
        assert isinstance(wrapped, ByIdentity) and unwrap_hashable(wrapped) is value
        assert wrapped == hashable(value) and wrapped != hashable(twin)


@given(
    st.recursive(
        st.integers() | st.text(max_size=3) | st.none(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
        max_leaves=8,
    )
)
def test_equal_nested_configs_wrap_equal(config):
    import copy

    twin = copy.deepcopy(config)
    assert hashable(config) == hashable(twin) and hash(hashable(config)) == hash(hashable(twin))
    assert unwrap_hashable(hashable(config)) is config
