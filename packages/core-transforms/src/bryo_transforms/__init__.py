"""bryo_transforms: JAX transforms lifted to functions of graph nodes.

`jit`, `vmap`, `grad`, `value_and_grad`, `remat` and the graph-level `scan` take modules
of every backend (and `Rngs`, Variables, containers of them) in and out, as Flax NNX's
transforms do: state changed inside (Variable values, rng counts, batch statistics, new
attributes and Variables) is written back into the caller's objects, references shared
across arguments stay shared, and modules returned are the caller's own objects when
they existed before the call. `StateAxes` maps filters to axes
(`StateAxes({(Param, 'dropout'): 0, ...: None})`) for the parts of a module's state;
`Carry` marks the carry of `scan`.

    >>> @jit
    ... def step(model, x):
    ...     model.count.value += 1
    ...     return model(x)

Every transform runs the same five stages, one module each, in import order:

1. `_layout`: the arguments' layout (arrays, graph roots, static values) and the key
   that identifies a call;
2. `_plan`: the call's `Signature` (static, hashable) and `CallPlan` (live Variables);
3. `_rebuild`: inside the JAX transform, fresh arguments from the traced values;
4. `_collect`: after the user's function, what changed and where it leaves the transform;
5. `_apply`: back outside, the changes written into the caller's objects.

`_call` strings them together (`pure_function`, `lifted_call`), `_axes` holds the axis
vocabulary (`StateAxes`, `Carry`, per-leaf axes) and each transform has its own module
(`_jit`, `_vmap`, `_grad`, `_remat`, `_scan`). A new transform is a new module that
calls `scan_args` and `PlanCache.plan`, wraps `pure_function` (or drives the stages) in
its JAX transform, and `apply`s the result; export it here.
"""

from ._axes import Carry as Carry
from ._axes import StateAxes as StateAxes
from ._axis_metadata import transform_metadata as transform_metadata
from ._checkify import checkify as checkify
from ._cond import cond as cond
from ._cond import switch as switch
from ._custom_vjp import CustomVjp as CustomVjp
from ._custom_vjp import custom_vjp as custom_vjp
from ._errors import ConcurrentUpdateError as ConcurrentUpdateError
from ._errors import TransformError as TransformError
from ._eval_shape import eval_shape as eval_shape
from ._grad import DiffState as DiffState
from ._grad import grad as grad
from ._grad import value_and_grad as value_and_grad
from ._jit import Compiled as Compiled
from ._jit import Jitted as Jitted
from ._jit import Lowered as Lowered
from ._jit import jit as jit
from ._jit import jit_partial as jit_partial
from ._loops import fori_loop as fori_loop
from ._loops import while_loop as while_loop
from ._make_jaxpr import make_jaxpr as make_jaxpr
from ._pmap import pmap as pmap
from ._remat import remat as remat
from ._scan import scan as scan
from ._shard_map import shard_map as shard_map
from ._shardings import StateSharding as StateSharding
from ._shardings import prefix as prefix
from ._vjp import jvp as jvp
from ._vjp import vjp as vjp
from ._vmap import vmap as vmap

__version__ = "0.1.0"
