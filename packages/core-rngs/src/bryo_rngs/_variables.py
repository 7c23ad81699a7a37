"""The Variable types of random state: `RngKey` and `RngCount`, both `RngState`.

Each carries a `tag` metadata entry, the name of its stream, so that a stream name used
as a filter (`'dropout'`) selects that stream's key and count.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from bryo_graph import Variable
from bryo_pytree import describe_leaf


class RngState(Variable):
    """Base of all random state (`nnx.state(model, RngState)` selects every stream)."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = [f"value={describe_leaf(self.raw_value)}"]
        fields += [f"{k}={v!r}" for k, v in self.metadata.items()]
        return f"{type(self).__name__}({', '.join(fields)})"


RngState.stats_type = RngState  # a module's repr counts keys and counts together, as Flax


class PickledKey(NamedTuple):
    """A typed key array as pickle stores it: its key data and the name of its PRNG impl."""

    data: np.ndarray
    impl: str


class RngKey(RngState):
    """A stream's root key: a typed `jax.random.key` array; `tag` is the stream name.

    Pickled as `PickledKey`: JAX 0.8 cannot pickle typed key arrays, and key data with an
    impl name loads on every supported JAX. A deep copy keeps the key array itself.
    """

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, object]) -> RngKey:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        Variable.__setstate__(clone, copy.deepcopy(Variable.__getstate__(self), memo))
        return clone

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()
        key = state["raw_value"]
        if (
            isinstance(key, jax.Array)
            and not isinstance(key, Tracer)
            and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        ):
            impl = str(jax.random.key_impl(key))
            state["raw_value"] = PickledKey(np.asarray(jax.random.key_data(key)), impl)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        key = state["raw_value"]
        if isinstance(key, PickledKey):
            state = {
                **state,
                "raw_value": jax.random.wrap_key_data(jnp.asarray(key.data), impl=key.impl),
            }
        super().__setstate__(state)


class RngCount(RngState):
    """A stream's counter: a `uint32` array shaped like its key; `tag` is the stream name."""

    __slots__ = ()

    #: A count prints as any Variable: a concrete scalar count with its value
    #: (`RngCount(value=Array(0, dtype=uint32), tag='default')`, as Flax shows it); a
    #: split one by its shape (`u32[5]`).
    __repr__ = Variable.__repr__
