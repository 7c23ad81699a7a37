"""`jit_partial` in simple mode: the given arguments read once per structure, not per call.

A simple-mode `jit` call reads its arguments whole: the tree-mode checks, the scan for
the Variables to write back, and JAX's flatten of every module, Variable and `List`.
The arguments `jit_partial` binds (a model and its optimizer, usually) change values from
call to call but rarely structure, so they are bound once: their pytree structure with
Variables as leaves, their Variables, and their other leaves. A call passes JAX the
Variables' values as one flat list, the other bound leaves and the call's own arguments;
the traced function rebuilds the given arguments from them (fresh Variables, fresh
modules: what simple mode's function sees anyway) and the values it changed are written
back, as `simple_jit` writes them.

The binding holds while the graph flattening of the given arguments would be the same:
a change of structure or of a Variable's metadata anywhere inside them (an attribute
set, a `List` appended to, a Variable replaced) expires its watch (`bryo_graph.flat_graph`)
and the next call binds them again, checked as a call would check them. Containers given
directly (a plain dict or list of models) are not watched: like Flax's `jit_partial`,
their items are the ones given. A call whose own arguments hold graph nodes or Variables,
given arguments that reach a Variable twice (graph mode gives those to JAX as `Alias`es)
or hold a hijax Variable (JAX carries its writes when it is passed whole), nodes whose
changes bryo cannot watch, and the options that name argument positions
(static arguments, donation, `in_shardings`) take the per-call path of `jit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from bryo_graph import (
    FlatGraph,
    Variable,
    VariableMeta,
    check_tree,
    flat_graph,
    is_array_ref,
    raw_value_getter,
)

from ._layout import is_graph_leaf
from ._options import Prepared
from ._plan import WRITE_LOCK, raw_value
from ._simple import (
    Inputs,
    ReadVariables,
    concrete_array,
    is_variable,
    resolve_output,
    watched_variables,
    write_back,
)

_COMPILED_PER_FUNCTION = 16  # structures a bound function keeps compiled (oldest dropped)


class BoundShape:
    """What a bound function is compiled for: the given arguments' pytree structure with
    their Variables as leaves, and per leaf its Variable's `VariableMeta` (None for a raw
    leaf). Hashable: arguments bound again to the same structure reuse the compilation."""

    __slots__ = ("_hash", "metas", "treedef")

    def __init__(self, treedef: Any, metas: tuple[VariableMeta | None, ...]) -> None:
        self.treedef = treedef
        self.metas = metas
        self._hash = hash((treedef, metas))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, BoundShape)
            and self._hash == other._hash
            and self.metas == other.metas
            and self.treedef == other.treedef
        )

    def rebuild(self, values: list, raws: list) -> tuple:
        """The given arguments inside the trace: Variables holding `values` (rebuilt from
        their metadata), the raw leaves `raws`, in fresh nodes."""
        next_value, next_raw = iter(values).__next__, iter(raws).__next__
        leaves = [
            next_raw() if meta is None else meta.type.from_metadata(next_value(), meta.metadata)
            for meta in self.metas
        ]
        return self.treedef.unflatten(leaves)


class Bound(NamedTuple):
    """The given arguments of a `jit_partial`, bound while `flat`'s watch is valid.

    Attributes:
        flat: their graph flattening; its watch expires when their structure changes.
        shape: what the bound function is compiled for, or None: they cannot be bound
            (a Variable reached twice), calls take `jit`'s path until they change.
        variables: the caller's Variables, each once, in pytree leaf order.
        raws: their other pytree leaves (arrays, mostly), as given.
        read: what reads a Variable's `raw_value` (`bryo_graph.raw_value_getter`).
        jitted: the `jax.jit` function compiled for `shape` (`BoundJit` sets it).
    """

    flat: FlatGraph
    shape: BoundShape | None
    variables: list[Variable]
    raws: list
    read: Callable[[Variable], object] = raw_value
    jitted: Callable | None = None


def bind(given: tuple, inputs: Inputs) -> Bound | None:
    """`given`, the arguments `jit_partial` binds, checked as `jit` checks a call's (tree
    mode: no shared Variable, cycle or `pytree=False` Object), or None when bryo cannot
    watch them for changes (a node of a backend that does not report its changes)."""
    if inputs.tree:
        check_tree(given, name=inputs.name)
    flat = flat_graph(given, keep=False)
    watched = watched_variables(flat)
    if watched is None:
        return None
    leaves, treedef = jax.tree_util.tree_flatten(given, is_leaf=is_variable)
    variables = [leaf for leaf in leaves if isinstance(leaf, Variable)]
    ids = {id(v) for v in variables}
    if len(ids) != len(variables) or not ids <= watched or any(v.hijax for v in variables):
        # a Variable twice, one the graph walk missed, or a hijax one (JAX carries its
        # writes itself when the call passes it whole)
        return Bound(flat, None, [], [])
    metas = tuple(
        VariableMeta(type(leaf), leaf.metadata) if isinstance(leaf, Variable) else None
        for leaf in leaves
    )
    raws = [leaf for leaf in leaves if not isinstance(leaf, Variable)]
    return Bound(flat, BoundShape(treedef, metas), variables, raws, raw_value_getter(variables))


def _holds_graph_leaves(args: tuple, kwargs: dict) -> bool:
    """Whether a call's own arguments hold a graph node, a Variable or an array ref (then
    the call is read whole, as `jit` reads it)."""
    if not kwargs and all(concrete_array(arg) for arg in args):
        return False  # the usual call: a batch of arrays
    leaves = jax.tree_util.tree_leaves((args, kwargs), is_leaf=is_graph_leaf)
    return any(is_graph_leaf(leaf) or is_array_ref(leaf) for leaf in leaves)


class BoundJit:
    """A simple-mode `jit` with its first arguments (`given`) bound: call `prepare`
    with the remaining ones. `pure` is the function of all arguments `simple_jit`
    compiles (it returns the output, the changed Variables' values and which changed);
    `per_call` prepares a call of all arguments the way `jit` does."""

    def __init__(
        self,
        given: tuple,
        inputs: Inputs,
        pure: Callable[..., tuple],
        jit_kwargs: dict[str, Any],
        per_call: Callable[[tuple, dict], Prepared],
    ) -> None:
        self.given = given
        self.inputs = inputs
        self.pure = pure
        self.jit_kwargs = jit_kwargs
        self.per_call = per_call
        self.compiled: dict[BoundShape, Callable] = {}
        self.bound = self.bind()

    def bind(self) -> Bound | None:
        """The given arguments bound now, with the function compiled for their shape."""
        bound = bind(self.given, self.inputs)
        if bound is None or bound.shape is None:
            return bound
        jitted = self.compiled.get(bound.shape) or self.compile_for(bound.shape)
        return bound._replace(jitted=jitted)

    def compile_for(self, shape: BoundShape) -> Callable:
        pure = self.pure

        def bound_pure(values: list, raws: list, *args: Any, **kwargs: Any) -> tuple:
            return pure(*shape.rebuild(values, raws), *args, **kwargs)

        jitted = jax.jit(bound_pure, **self.jit_kwargs)
        if len(self.compiled) >= _COMPILED_PER_FUNCTION:
            self.compiled.pop(next(iter(self.compiled)))
        self.compiled[shape] = jitted
        return jitted

    def prepare(self, args: tuple, kwargs: dict) -> Prepared:
        bound = self.bound
        if bound is not None and not bound.flat.watch.is_valid():  # type: ignore[union-attr]  # a bound flattening has a watch
            bound = self.bound = self.bind()
        if bound is None or bound.jitted is None or _holds_graph_leaves(args, kwargs):
            return self.per_call((*self.given, *args), kwargs)
        with WRITE_LOCK:
            values = list(map(bound.read, bound.variables))
        variables = ReadVariables(bound.variables, values, self.inputs.name, repeats=False)

        def finish(result: tuple) -> Any:
            out, new_values, changed = result
            write_back(variables, new_values, changed)
            return resolve_output(out, changed)

        return Prepared(bound.jitted, (values, bound.raws, *args), kwargs, finish)
