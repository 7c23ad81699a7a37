"""Settings every test of the monorepo runs under (pytest loads this for all test paths)."""

import jax
import numpy as np
import pytest


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
