"""Settings every test of the monorepo runs under (pytest loads this for all test paths)."""

import jax
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    """Docstring examples (`--doctest-modules`) may use `jax`, `jnp` and `np` unimported."""
    doctest_namespace.update(jax=jax, jnp=jax.numpy, np=np)
