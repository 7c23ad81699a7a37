"""Hypothesis strategies shared by core-pytree's tests, handed out as a session fixture.

Trees are nested dicts (str keys), lists and tuples over small int leaves, with `None`
and empty containers in the mix: jax treats those as nodes without leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import strategies as st

LEAVES = st.integers(min_value=-9, max_value=9)
KEYS = st.text(alphabet="abcxyz_", min_size=1, max_size=3)


def trees(leaves: st.SearchStrategy = LEAVES, *, with_empty: bool = True) -> st.SearchStrategy:
    """Random nested dict/list/tuple trees over `leaves`."""
    base = st.one_of(leaves, st.none()) if with_empty else leaves
    min_size = 0 if with_empty else 1

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.dictionaries(KEYS, children, min_size=min_size, max_size=4),
            st.lists(children, min_size=min_size, max_size=4),
            st.lists(children, min_size=min_size, max_size=4).map(tuple),
        )

    return st.recursive(base, extend, max_leaves=12)


@dataclass(frozen=True)
class Strategies:
    trees = staticmethod(trees)
    leaves = LEAVES
    keys = KEYS


@pytest.fixture(scope="session")
def strategies() -> Strategies:
    return Strategies()
