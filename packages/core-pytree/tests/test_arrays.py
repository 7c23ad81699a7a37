"""`is_array`, `is_array_like`, `is_shaped` and `safe_equal`: the one answer each."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_pytree import is_array, is_array_like, is_shaped, safe_equal

ARRAYS = [jnp.ones(2), np.ones(2), np.float32(1.0), jax.random.key(0)]
NUMBERS = [1, 1.0, True, 1j]
NOT_ARRAYS = ["a", None, (1, 2), [np.ones(2)], jnp.float32, np.ndarray]


@pytest.mark.parametrize("value", ARRAYS)
def test_arrays_are_arrays_of_every_size(value):
    assert is_array(value) and is_array_like(value) and is_shaped(value)


@pytest.mark.parametrize("value", NUMBERS)
def test_python_numbers_are_array_like_only(value):
    assert is_array_like(value) and not is_array(value) and not is_shaped(value)


@pytest.mark.parametrize("value", NOT_ARRAYS)
def test_other_values_and_classes_are_no_arrays(value):
    assert not is_array(value) and not is_array_like(value) and not is_shaped(value)


def test_abstract_arrays_are_shaped_but_not_arrays():
    abstract = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    assert is_shaped(abstract) and not is_array(abstract) and not is_array_like(abstract)


def test_tracers_are_arrays():
    seen = []
    jax.jit(lambda x: seen.append(is_array(x)) or x)(1.0)
    jax.vmap(lambda x: seen.append(is_array(x)) or x)(jnp.ones(2))
    assert seen == [True, True]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (("embed", None), ("embed", None), True),
        (1, 1.0, True),
        ("a", "b", False),
        (np.ones(2), np.ones(2), False),  # ambiguous truth value: not provably equal
        (jnp.ones(3), jnp.ones(3), False),
        (jax.random.split(jax.random.key(0)), jax.random.split(jax.random.key(0)), False),
    ],
)
def test_safe_equal_never_raises_for_arrays(a, b, expected):
    assert safe_equal(a, b) is expected


def test_safe_equal_is_false_for_tracers_and_true_for_identity():
    same = []
    jax.jit(lambda x: same.append((safe_equal(x, x + 0), safe_equal(x, x))) or x)(1.0)
    assert same == [(False, True)]


def test_safe_equal_lets_other_errors_of_a_broken_eq_through():
    class Broken:
        def __eq__(self, other):
            raise RuntimeError("broken __eq__")

        __hash__ = object.__hash__

    with pytest.raises(RuntimeError, match="broken"):
        safe_equal(Broken(), Broken())
