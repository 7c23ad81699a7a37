"""The Flax backend's hooks: Linen and Flax NNX module calls that `make_mox` can see, and
Flax NNX blocks that `Stacked`/`BlockSeq` can stack.

Both hooks are optional: bryo-mox-ir and bryo-core-scan need not be installed for this
backend to load (the extras `bryo-backend-flax[mox,scan]` add them). bryo loads it lazily
through the entry-point groups `bryo.mox.flax` and `bryo.scan.flax`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

from flax import nnx

from bryo_plugins import hookimpl

from . import _linen, _nnx


@contextlib.contextmanager
def intercept(handler: Callable[..., object]) -> Iterator[None]:
    """Route Linen and Flax NNX module calls to `handler` inside the block."""
    with _linen.intercept(handler), _nnx.intercept(handler):
        yield


@hookimpl(optionalhook=True)
def bryo_mox_interceptor() -> Callable:
    return intercept


@hookimpl(optionalhook=True)
def bryo_scan_block_splitters() -> Mapping[type, Callable[[nnx.Module], tuple]]:
    return {nnx.Module: _nnx.split_block}
