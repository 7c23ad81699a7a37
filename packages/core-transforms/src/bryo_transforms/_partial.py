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

import functools
import weakref
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
    _MODULE_TYPES,
    Inputs,
    ReadVariables,
    _forget,
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
        flat: their graph flattening; its watch expires when their structure changes
            (None in a `LeadingModules` binding: it keeps the watch only, since the
            flattening holds the modules, which it holds weakly).
        shape: what the bound function is compiled for, or None: they cannot be bound
            (a Variable reached twice), calls take `jit`'s path until they change.
        variables: the caller's Variables, each once, in pytree leaf order.
        raws: their other pytree leaves (arrays, mostly), as given.
        read: what reads a Variable's `raw_value` (`bryo_graph.raw_value_getter`).
        jitted: the `jax.jit` function compiled for `shape` (`BoundJit` sets it).
    """

    flat: FlatGraph | None
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
        return compile_bound(self.pure, self.jit_kwargs, self.compiled, shape)

    def prepare(self, args: tuple, kwargs: dict) -> Prepared:
        bound = self.bound
        if bound is not None and not bound.flat.watch.is_valid():  # type: ignore[union-attr]  # a bound flattening has a watch
            bound = self.bound = self.bind()
        if bound is None or bound.jitted is None or _holds_graph_leaves(args, kwargs):
            return self.per_call((*self.given, *args), kwargs)
        return bound_call(bound, self.inputs.name, args, kwargs)


def compile_bound(
    pure: Callable[..., tuple],
    jit_kwargs: dict[str, Any],
    compiled: dict[BoundShape, Callable],
    shape: BoundShape,
) -> Callable:
    """`jax.jit` of `pure` for bound arguments of `shape` (rebuilt from their values and
    raw leaves inside the trace), kept in `compiled` (the oldest dropped past a bound)."""

    def bound_pure(values: list, raws: list, *args: Any, **kwargs: Any) -> tuple:
        return pure(*shape.rebuild(values, raws), *args, **kwargs)

    jitted = jax.jit(bound_pure, **jit_kwargs)
    if len(compiled) >= _COMPILED_PER_FUNCTION:
        compiled.pop(next(iter(compiled)))
    compiled[shape] = jitted
    return jitted


def bound_call(bound: Bound, name: str, args: tuple, kwargs: dict) -> Prepared:
    """A call with the bound arguments first: their Variables' values as one flat list,
    their raw leaves, then `args`; the changed values are written back."""
    with WRITE_LOCK:
        values = list(map(bound.read, bound.variables))
    variables = ReadVariables(bound.variables, values, name, repeats=False)

    def finish(result: tuple) -> Any:
        out, new_values, changed = result
        write_back(variables, new_values, changed)
        return resolve_output(out, changed)

    return Prepared(bound.jitted, (values, bound.raws, *args), kwargs, finish)


_BOUND_AFTER = 2
"""Calls in a row that pass the same leading modules, with their structure unchanged,
before `LeadingModules` binds them (doubled, up to `_BOUND_AFTER_AT_MOST`, each time a
binding expires before it served `_PAYS_OFF` calls)."""
_BOUND_AFTER_AT_MOST = 1024
_PAYS_OFF = 64  # bound calls that save about what binding costs (a scan of the modules)


class _Binding:
    """`LeadingModules`' binding: weak references to the modules it binds, and their
    `Bound` without its flattening (which holds the modules), only the flattening's
    watch; `uses` counts the calls it served."""

    __slots__ = ("bound", "modules", "uses", "watch")

    def __init__(self, modules: tuple[weakref.ref, ...], watch: Any, bound: Bound | None) -> None:
        self.modules = modules
        self.watch = watch
        self.bound = bound  # None: the modules cannot be bound (calls take jit's path)
        self.uses = 0

    def passed(self, args: tuple) -> bool:
        """Whether a call whose leading arguments are `args` passes the bound modules."""
        if len(args) < len(self.modules):
            return False
        return all(ref() is arg for ref, arg in zip(self.modules, args, strict=False))


class _Stable(NamedTuple):
    """The leading modules of the last calls that took jit's path, the watch of that
    path's kept scan of them, and how many calls in a row passed them unchanged."""

    modules: tuple[weakref.ref, ...]
    watch: Any
    calls: int


class LeadingModules:
    """A simple-mode `jit` (`graph=False`, no static, donated or sharded arguments) that
    binds the modules its calls pass first (a model, an optimizer) as `jit_partial`
    binds them, once calls in a row pass the same ones with the same structure: a call
    then passes JAX their Variables' values as one flat list, and neither bryo nor JAX
    walks the modules. The binding holds while the calls pass the same module objects
    first and nothing inside them changes structure (the watch of their graph
    flattening); other calls, the first ones with new modules, and `lower` take
    `per_call`, `jit`'s own path, which checks the arguments. A binding costs about a
    scan of the modules: when one expires before it paid off, the next waits for longer
    runs of unchanged calls. The modules are held weakly: dropping them drops the binding.
    """

    def __init__(
        self,
        inputs: Inputs,
        pure: Callable[..., tuple],
        jit_kwargs: dict[str, Any],
        per_call: Callable[[tuple, dict], Prepared],
    ) -> None:
        self.inputs = inputs
        self.pure = pure
        self.jit_kwargs = jit_kwargs
        self.per_call = per_call
        self.compiled: dict[BoundShape, Callable] = {}
        self.bound_after = _BOUND_AFTER
        # the binding and the last unbound calls' modules, each in a list that a
        # module's weak reference empties when it is dropped
        self._binding: list[_Binding] = []
        self._stable: list[_Stable] = []

    def prepare(self, args: tuple, kwargs: dict) -> Prepared:
        binding = next(iter(self._binding), None)  # (another thread may empty the list)
        if binding is not None and binding.passed(args):
            if binding.watch.is_valid():
                rest = args[len(binding.modules) :]
                if binding.bound is not None and not _holds_graph_leaves(rest, kwargs):
                    binding.uses += 1
                    return bound_call(binding.bound, self.inputs.name, rest, kwargs)
                return self.per_call(args, kwargs)
            self._expire(binding)
        prepared = self.per_call(args, kwargs)  # checked as jit checks a call
        self._count(args)
        return prepared

    def _expire(self, binding: _Binding) -> None:
        """Drop a binding whose modules changed structure; if it served too few calls to
        pay for itself, wait for twice as many unchanged calls before the next one."""
        self._binding[:] = []
        if binding.bound is not None and binding.uses < _PAYS_OFF:
            self.bound_after = min(2 * self.bound_after, _BOUND_AFTER_AT_MOST)

    def _count(self, args: tuple) -> None:
        """After a call through `per_call`: count the calls in a row that passed its
        leading modules with their structure unchanged (the kept scan's watch), and bind
        the modules when there were enough."""
        count = 0
        while count < len(args) and isinstance(args[count], _MODULE_TYPES):
            count += 1
        given = args[:count]
        watch = self.inputs.kept_watch(given) if count else None  # what `per_call` kept
        if watch is None:
            self._stable[:] = []
            return
        stable = next(iter(self._stable), None)
        calls = 1
        if stable is not None and stable.watch is watch and watch.is_valid():
            calls = stable.calls + 1
        if calls < self.bound_after:
            forget = functools.partial(_forget, self._stable)
            refs = tuple(weakref.ref(m, forget) for m in given)
            self._stable[:] = [_Stable(refs, watch, calls)]
            return
        self._stable[:] = []
        self._bind(given)

    def _bind(self, given: tuple) -> None:
        bound = bind(given, self.inputs)
        watch = bound.flat.watch if bound is not None and bound.flat is not None else None
        if bound is None or watch is None:  # modules bryo cannot watch: never bound
            return
        if bound.shape is not None:
            jitted = self.compiled.get(bound.shape) or compile_bound(
                self.pure, self.jit_kwargs, self.compiled, bound.shape
            )
            bound = bound._replace(jitted=jitted)
        forget = functools.partial(_forget, self._binding)
        modules = tuple(weakref.ref(m, forget) for m in given)
        kept = bound._replace(flat=None) if bound.shape is not None else None
        self._binding[:] = [_Binding(modules, watch, kept)]
