"""The Variable types of random state: `RngKey` and `RngCount`, both `RngState`.

Each carries a `tag` metadata entry, the name of its stream, so that a stream name used
as a filter (`'dropout'`) selects that stream's key and count.
"""

from __future__ import annotations

from bryo_graph import Variable
from bryo_pytree import describe_leaf


class RngState(Variable):
    """Base of all random state (`nnx.state(model, RngState)` selects every stream)."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = [f"value={describe_leaf(self.raw_value)}"]
        fields += [f"{k}={v!r}" for k, v in self.get_metadata().items()]
        return f"{type(self).__name__}({', '.join(fields)})"


class RngKey(RngState):
    """A stream's root key: a typed `jax.random.key` array; `tag` is the stream name."""

    __slots__ = ()


class RngCount(RngState):
    """A stream's counter: a `uint32` array shaped like its key; `tag` is the stream name."""

    __slots__ = ()
