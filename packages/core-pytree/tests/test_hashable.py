"""The identity wrapper that lets unhashable statics sit in treedefs."""

from bryo_pytree import ByIdentity, hashable


def test_hashable_wraps_only_unhashable_values():
    assert hashable(3) == 3
    value = [1, 2]
    wrapped = hashable(value)
    assert isinstance(wrapped, ByIdentity) and wrapped.value is value
    assert hash(wrapped) == hash(hashable(value)) and wrapped == hashable(value)
    assert wrapped != hashable([1, 2])  # equal contents, other object
