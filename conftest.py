"""Settings every test of the monorepo runs under (pytest loads this for all test paths).

Strict JAX, as Equinox's suite runs: implicit rank promotion raises (a rank-1 bias added
to a rank-3 output must be broadcast on purpose) and dtypes promote only where the types
agree. Library code must be rank- and dtype-clean under both.
"""

import jax
import numpy as np
import pytest
from hypothesis import settings

# No timing in the test suite: hypothesis's per-example deadline fails a test on a loaded
# machine (CI's 2 cores), so it is off for every property test.
settings.register_profile("bryo", deadline=None)
settings.load_profile("bryo")

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    """Docstring examples (`--doctest-modules`) may use `jax`, `jnp` and `np` unimported."""
    doctest_namespace.update(jax=jax, jnp=jax.numpy, np=np)


@pytest.fixture
def standard_dtype_promotion():
    """JAX's standard dtype promotion for one test whose third-party code is not clean
    under strict promotion (name the third-party call where the fixture is used)."""
    with jax.numpy_dtype_promotion("standard"):
        yield
