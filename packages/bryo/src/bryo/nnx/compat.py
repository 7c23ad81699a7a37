"""`bryo.nnx.compat`: the graph-mode spellings of Flax NNX's `nnx.compat`.

Each function here is its `bryo.nnx` namesake with `graph=True` (and, for the
transforms and the in-place rng helpers, `graph_updates=True`) as its default, whatever
`set_graph_mode`/`set_graph_updates` say: code written for graph-mode NNX keeps its
meaning when the thread's default is tree mode. Keywords given explicitly still win.

    >>> from bryo import nnx
    >>> with nnx.set_graph_mode(False):
    ...     graphdef, state = nnx.compat.split(nnx.Rngs(0))
    >>> type(graphdef).__name__
    'GraphDef'
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import bryo_graph
import bryo_nnx
import bryo_rngs
import bryo_transforms


def _graph_defaults(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` with `graph=True` (and `graph_updates=True` where `f` takes it) by default."""
    parameters = inspect.signature(f).parameters
    defaults = {"graph": True}
    if "graph_updates" in parameters:
        defaults["graph_updates"] = True

    @functools.wraps(f)
    def with_defaults(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **{**defaults, **kwargs})

    return with_defaults


# graph
split = _graph_defaults(bryo_graph.split)
state = _graph_defaults(bryo_graph.state)
clone = _graph_defaults(bryo_graph.clone)
graphdef = _graph_defaults(bryo_graph.graphdef)
flatten = _graph_defaults(bryo_graph.flatten)
cached_partial = _graph_defaults(bryo_graph.cached_partial)
iter_graph = _graph_defaults(bryo_graph.iter_graph)
recursive_map = _graph_defaults(bryo_graph.recursive_map)
iter_children = _graph_defaults(bryo_graph.iter_children)

# modules
view = _graph_defaults(bryo_nnx.view)
view_info = _graph_defaults(bryo_nnx.view_info)
iter_modules = _graph_defaults(bryo_nnx.iter_modules)

# rngs
split_rngs = _graph_defaults(bryo_rngs.split_rngs)
fork_rngs = _graph_defaults(bryo_rngs.fork_rngs)
reseed = _graph_defaults(bryo_rngs.reseed)

# transforms
jit = _graph_defaults(bryo_transforms.jit)
shard_map = _graph_defaults(bryo_transforms.shard_map)
grad = _graph_defaults(bryo_transforms.grad)
value_and_grad = _graph_defaults(bryo_transforms.value_and_grad)
remat = _graph_defaults(bryo_transforms.remat)
vmap = _graph_defaults(bryo_transforms.vmap)
scan = _graph_defaults(bryo_transforms.scan)
pmap = _graph_defaults(bryo_transforms.pmap)
while_loop = _graph_defaults(bryo_transforms.while_loop)
fori_loop = _graph_defaults(bryo_transforms.fori_loop)
eval_shape = _graph_defaults(bryo_transforms.eval_shape)
cond = _graph_defaults(bryo_transforms.cond)
switch = _graph_defaults(bryo_transforms.switch)
checkify = _graph_defaults(bryo_transforms.checkify)

# sharding
get_abstract_model = _graph_defaults(bryo_graph.get_abstract_model)
