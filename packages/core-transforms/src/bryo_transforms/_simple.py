"""Simple mode (`graph=False` or `graph_updates=False`): JAX's own transform over the
arguments as pytrees, with the values of changed Variables written back.

Modules, `Rngs` and Variables are pytrees, so in simple mode, as in Flax NNX 0.12, a
transform is plain `jax.jit`/`vmap`/`grad`/`checkpoint` applied to the arguments as they
are: the function sees fresh copies of the modules, the caller's modules keep their
structure (attributes added inside are dropped), modules returned are new objects, and
gradients come back shaped like the differentiated arguments. The values of the caller's
Variables that the function changed are written back after the call. With `graph=False`
(tree mode) the arguments must be trees: a Variable reached twice, a cycle, or an Object
of a `pytree=False` class is an error naming the paths.

With `graph=True` what the arguments share stays shared inside, and what the output
shares stays shared outside, as Flax's graph-mode simple transforms convert them jointly
(`to_tree2`/`from_tree2`): a module, `List`, `Dict` or Variable met a second time is
given to JAX as an `Alias` of its first place (static, so the aliasing is part of what
`jax.jit` caches on) and the function sees one object; `f(model, model)` gets `a is b`,
and `return m, m` gives `m1 is m2`. The prefixes (`in_axes`, `out_axes`, shardings) of
a shared Variable's places must agree. The per-call check looks for repeated Variables
(the arguments' scan reads them anyway): a node holding no Variable that is the only
thing the arguments share is given as copies, which differ from one object by identity
alone.

Reading a call's arguments (the tree-mode check, the scan for their Variables) is done
once per structure: while the call passes the same modules as the last one (and plain
values besides), and nothing inside them changed structure (`bryo_graph.flat_graph`'s
watch), the Variables found last time are the ones to read and write back.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import jax
from jax.core import Tracer

from bryo_graph import (
    Dict,
    FlatGraph,
    HijaxVariable,
    List,
    Object,
    Variable,
    check_tree,
    flat_graph,
    is_array_ref,
    made_in_another_trace,
    raw_value_getter,
    set_graph_mode,
    set_graph_updates,
)
from bryo_pytree import broadcast_prefix

from ._axes import raise_inconsistent_aliasing
from ._collect import Static
from ._errors import concurrent_update
from ._options import Prepared
from ._plan import WRITE_LOCK, raw_value
from ._prefixes import expand_tree_states, tree_state_prefixes

Pure = Callable[..., tuple]
T = TypeVar("T")


_CARRIED = object()
"""In place of a hijax Variable's value before a call: JAX itself carries what the call
writes into a hijax Variable (the function sees a tracer of it), so none is written back."""


def graph_updates_on(graph: bool | None, graph_updates: bool | None) -> bool:
    """Whether a transform runs in graph mode with graph updates (bryo's lifting), given
    its `graph=`/`graph_updates=` keywords (None: the thread's defaults)."""
    graph = set_graph_mode.current_value() if graph is None else graph
    updates = set_graph_updates.current_value() if graph_updates is None else graph_updates
    return graph and updates


def tree_mode(graph: bool | None) -> bool:
    """Whether `graph=` (None: the thread's default) asks for tree mode."""
    return not (set_graph_mode.current_value() if graph is None else graph)


def is_variable(value: object) -> bool:
    """Whether `value` is a Variable (the `is_leaf` of the transforms' pytree walks)."""
    return isinstance(value, Variable)


def variables_of(tree: object) -> list[Variable]:
    """The Variables among `tree`'s pytree leaves, in flattening order."""
    return [leaf for leaf in jax.tree.leaves(tree, is_leaf=is_variable) if is_variable(leaf)]


def check_no_aliases(
    name: str,
    groups: dict[str, object],
    *,
    tree: bool = False,
    only: str | None = None,
    shared_out: bool = False,
) -> None:
    """Raise if a Variable is reached twice in `groups` (`{'args': ..., 'out': ...}`),
    naming both paths: simple mode (`graph_updates=False`) has no shared references. With
    `only`, only a second place in that group counts (the arguments may share Variables
    in graph mode, the output may not hold theirs); with `shared_out` too, only a second
    place in `only` whose first place is in another group (in graph mode the output may
    share its own Variables). With `tree`, also the other tree-mode errors (cycles,
    `pytree=False` objects)."""
    seen: dict[int, tuple[str, str]] = {}
    for label, tree_ in groups.items():
        for keypath, leaf in jax.tree_util.tree_leaves_with_path(tree_, is_leaf=is_variable):
            if not is_variable(leaf):
                continue
            where = label + jax.tree_util.keystr(keypath)
            first_label, first = seen.setdefault(id(leaf), (label, where))
            if first == where or (only is not None and label != only):
                continue
            if shared_out and first_label == label:
                continue
            raise ValueError(
                f"Duplicate {type(leaf).__name__}\nfound at paths:\n\n  - {first}\n"
                f"  - {where}\n\n`{name}` with graph_updates=False (or graph=False) "
                "does not support Variable aliasing (an argument passed twice in tree mode, "
                "or a Variable of the arguments returned). Pass it once, return a copy "
                "(`clone`), or use graph mode with updates (`graph=True, "
                "graph_updates=True`)."
            )
    if tree:
        check_tree(tuple(groups.values()), name=name)


# What an `Alias` may stand for: the graph nodes and Variables whose identity simple
# graph mode keeps (plain tuples, lists and dicts are pytrees, copied as JAX copies them).
SHARED_TYPES = (Variable, Object, List, Dict)
_MODULE_TYPES = (Object, List, Dict)  # the arguments whose scan a call keeps (`Inputs._keep`)


@dataclasses.dataclass(frozen=True)
class Alias:
    """In the arguments JAX traces (or an output it returns): the place of a graph node
    or Variable met earlier, the `first`-th one met in a pre-order walk (in `scan` order
    for the arguments). Static: it carries no array, so the aliasing is part of the
    structure `jax.jit` caches on."""

    first: int


jax.tree_util.register_static(Alias)


class Walk(NamedTuple):
    """One pre-order walk of a tree: its Variables, each once, and whether a graph node or
    Variable is reached more than once (the tree then needs `mark_aliases`)."""

    variables: list[Variable]
    repeats: bool


def walk(tree: object) -> Walk:
    """The Variables of `tree`, each once in pre-order, and whether anything repeats."""
    seen: set[int] = set()
    variables: list[Variable] = []
    repeats = False

    def stop(value: object) -> bool:
        nonlocal repeats
        if not isinstance(value, SHARED_TYPES):
            return False
        if id(value) in seen:
            repeats = True
            return True
        seen.add(id(value))
        if isinstance(value, Variable):
            variables.append(value)
            return True
        return False

    jax.tree_util.tree_flatten(tree, is_leaf=stop)
    return Walk(variables, repeats)


def mark_aliases(tree: T, prefix: Any = None) -> tuple[T, Any]:
    """`tree` with every graph node or Variable met a second time replaced by an `Alias`
    of its first place (`tree` itself if none repeats), and `prefix`, a tree with
    `tree`'s structure down to its Variables (`vmap`'s expanded `in_axes`, `jvp`'s
    tangents), with the same `Alias`es in the same places (JAX's prefixes must match the
    marked structure; the places an `Alias` takes carry no array)."""
    index: dict[int, int] = {}

    def stop(value: object) -> bool:
        if not isinstance(value, SHARED_TYPES):
            return False
        if id(value) in index:
            return True
        index[id(value)] = len(index)
        return isinstance(value, Variable)

    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=stop)
    placed: set[int] = set()
    aliased: list[int] = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, SHARED_TYPES):
            continue
        if isinstance(leaf, Variable) and id(leaf) not in placed:
            placed.add(id(leaf))  # a Variable's first place is a leaf too
            continue
        leaves[i] = Alias(index[id(leaf)])
        aliased.append(i)
    if not aliased:
        return tree, prefix
    if prefix is not None:
        prefixes = treedef.flatten_up_to(prefix)
        for i in aliased:
            prefixes[i] = leaves[i]
        prefix = treedef.unflatten(prefixes)
    return treedef.unflatten(leaves), prefix


def resolve_aliases(tree: T) -> T:
    """`tree` with every `Alias` replaced by the graph node or Variable (or gradient) at
    its first place; the nodes on the way are rebuilt (fresh copies), Variables kept."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=_is_alias)
    if not any(isinstance(leaf, Alias) for leaf in leaves):
        return tree
    met: list[object] = []

    def rebuild(value: object) -> object:
        if isinstance(value, Alias):
            return met[value.first]
        if isinstance(value, Variable):
            met.append(value)
            return value
        children, treedef = jax.tree_util.tree_flatten(value, is_leaf=lambda x: x is not value)
        if children and children[0] is value:
            return value  # an array or other leaf
        slot = len(met) if isinstance(value, SHARED_TYPES) else None
        if slot is not None:
            met.append(None)  # numbered before its children, as `mark_aliases` numbers
        new = treedef.unflatten([rebuild(child) for child in children])
        if slot is not None:
            met[slot] = new
        return new

    return rebuild(tree)  # type: ignore[return-value]  # the same structure, rebuilt


def fresh_copy(tree: T) -> T:
    """`tree` with fresh copies of its pytree nodes (Variables and modules among them);
    the arrays are shared, `Alias`es kept."""
    return jax.tree.map(_same, tree, is_leaf=_is_alias)


def _copy_resolved(tree: list) -> list:
    """Fresh copies of the pytree nodes and Variables of `tree`, `Alias`es resolved."""
    return resolve_aliases(fresh_copy(tree))


def _same(value: object) -> object:
    return value


def _is_alias(value: object) -> bool:
    return isinstance(value, Alias)


def scan(args: tuple, kwargs: dict, order: Sequence[int]) -> list:
    """The arguments in the order Variables are numbered for `Alias`es: the positions in
    `order` first (grad's argnums, in the order its gradients come back, so that the
    gradients resolve their own `Alias`es), then the others, then the keyword arguments."""
    rest = [i for i in range(len(args)) if i not in order]
    return [*(args[i] for i in order if i < len(args)), *(args[i] for i in rest), kwargs]


def unscan(scanned: list, args: tuple, order: Sequence[int]) -> tuple[tuple, dict]:
    """`(args, kwargs)` from a `scan` list (the inverse of `scan`)."""
    positions = [i for i in order if i < len(args)]
    positions += [i for i in range(len(args)) if i not in order]
    new_args = list(args)
    for i, value in zip(positions, scanned, strict=False):
        new_args[i] = value
    return tuple(new_args), scanned[-1]


_PLAIN_TYPES = frozenset({int, float, bool, complex, str, type(None)})


def concrete_array(value: object) -> bool:
    """Whether `value` is a JAX array that is no tracer (a traced array may be a ref)."""
    return isinstance(value, jax.Array) and not isinstance(value, Tracer)


def _plain(value: object) -> bool:
    """Whether `value` is an argument that holds no graph node, Variable or array ref and
    has no structure: a scalar, a string, None or a concrete JAX array."""
    return type(value) in _PLAIN_TYPES or (concrete_array(value) and not is_array_ref(value))


def watched_variables(flat: FlatGraph) -> set[int] | None:
    """The ids of the Variables whose changes expire `flat`'s watch, or None when the watch
    is expired already or bryo cannot watch the graph (a node of a backend that does not
    report its changes)."""
    if flat.watch is None or not flat.watch.is_valid():
        return None
    return {id(source.variable) for source in flat.sources if source.variable is not None}


class _Scanned(NamedTuple):
    """The Variables a call's arguments hold (each once) and whether one repeats, kept
    while `watch` is valid and the call passes the same modules (`nodes`: per dynamic
    argument, positional then keyword, a weak reference to its module, or None for a
    plain value) with the same keyword names."""

    nodes: tuple[weakref.ref | None, ...]
    names: tuple[str, ...]
    watch: Any
    variables: list[Variable]
    repeats: bool
    read: Callable[[Variable], object]  # their `raw_value` reader (`raw_value_getter`)


def _scanned_again(scanned: _Scanned | None, values: tuple, names: tuple) -> bool:
    """Whether `scanned` still holds for a call whose dynamic arguments are `values`."""
    if scanned is None or names != scanned.names or len(values) != len(scanned.nodes):
        return False
    if not scanned.watch.is_valid():
        return False
    for value, node in zip(values, scanned.nodes, strict=True):
        if (node() is not value) if node is not None else not _plain(value):
            return False
    return True


def _forget(kept: list, _dropped: weakref.ref) -> None:
    """A module of the kept scan was dropped: drop the scan (and its Variables) too."""
    kept.clear()


class ReadVariables(list):
    """The caller's Variables of one simple-mode call (a list), with the values they held
    when the call read them, the transform's name (for `ConcurrentUpdateError`) and
    `repeats`: whether one is reached more than once (graph mode only; the arguments
    then need `Inputs.shared`)."""

    __slots__ = ("before", "name", "repeats")

    def __init__(self, variables: list[Variable], before: list, name: str, repeats: bool) -> None:
        super().__init__(variables)
        self.before = before
        self.name = name
        self.repeats = repeats


class Inputs:
    """How one simple-mode transform reads a call's inputs: which arguments are static
    (left out of the Variable scan) and whether they must be trees."""

    def __init__(
        self,
        name: str,
        tree: bool,
        static_argnums: Sequence[int] = (),
        static_argnames=(),
        first: Sequence[int] = (),
    ) -> None:
        self.name = name
        self.tree = tree
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        self.first = tuple(first)  # positions whose Variables are numbered first (grad's)
        # the last call's scan, kept while its structure holds (in a list, which a
        # module's weak reference empties when the module is dropped)
        self._scanned: list[_Scanned] = []

    def dynamic(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`(args, kwargs)` without the static ones (they are not traced)."""
        if not self.static_argnums and not self.static_argnames:
            return args, kwargs
        static = self._static_positions(len(args))
        dyn_args = tuple(None if i in static else a for i, a in enumerate(args))
        return dyn_args, {k: v for k, v in kwargs.items() if k not in self.static_argnames}

    def variables(self, args: tuple, kwargs: dict) -> ReadVariables:
        """The caller's Variables of a call, checked to be a tree in tree mode, with the
        values they hold now (`write_back` checks that nobody wrote them meanwhile).
        Scanned once per structure (see the module docstring)."""
        dyn_args, dyn_kwargs = self.dynamic(args, kwargs)
        values, names = (*dyn_args, *dyn_kwargs.values()), tuple(dyn_kwargs)
        last = next(iter(self._scanned), None)  # (another thread may empty the list)
        if _scanned_again(last, values, names):
            variables, repeats, read = last.variables, last.repeats, last.read  # type: ignore[union-attr]  # checked by _scanned_again
        else:
            variables, repeats = self._scan(dyn_args, dyn_kwargs)
            read = self._keep(values, names, variables, repeats)
        with WRITE_LOCK:
            before = list(map(read, variables))
        return ReadVariables(variables, before, self.name, repeats)

    def _scan(self, args: tuple, kwargs: dict) -> tuple[list[Variable], bool]:
        """The Variables of the dynamic arguments, each once, and whether one repeats
        (graph mode); in tree mode the arguments are checked to be a tree."""
        if self.tree:
            check_tree((args, kwargs), name=self.name)
        scanned = scan(args, kwargs, self.first)
        # the cheap scan first (`walk` costs a third more per call): a shared node
        # holding Variables repeats them; one holding none is copied per place, alike
        variables = variables_of(scanned)
        repeats = not self.tree and len({id(v) for v in variables}) != len(variables)
        if repeats:
            variables = walk(scanned).variables  # each once
        return variables, repeats

    def _keep(
        self, values: tuple, names: tuple, variables: list[Variable], repeats: bool
    ) -> Callable[[Variable], object]:
        """Keep a call's scan for the next calls, if its arguments are modules bryo can
        watch and plain values (other arguments are scanned on every call). Returns what
        reads the Variables' values (the kept scan's own reader, chosen once)."""
        nodes = [v for v in values if not _plain(v)]
        if not nodes or not all(isinstance(v, _MODULE_TYPES) for v in nodes):
            return raw_value
        flat = flat_graph(tuple(nodes), keep=False)
        watched = watched_variables(flat)
        if watched is None or not {id(v) for v in variables} <= watched:
            return raw_value
        forget = functools.partial(_forget, self._scanned)
        refs = tuple(None if _plain(v) else weakref.ref(v, forget) for v in values)
        read = raw_value_getter(variables)
        self._scanned[:] = [_Scanned(refs, names, flat.watch, variables, repeats, read)]
        return read

    def shared(
        self, args: tuple, kwargs: dict, variables: ReadVariables, prefix: list | None = None
    ) -> tuple[tuple, dict]:
        """The arguments to give JAX: in graph mode, a graph node or Variable they share
        is given once, its other places hold an `Alias` (see `mark_aliases`). With
        `prefix` (a list like `scan`'s, of the arguments' full prefixes), its entries are
        marked alike, in place."""
        if not variables.repeats:
            return args, kwargs

        def mark(tree: list) -> list:
            marked, marked_prefix = mark_aliases(tree, prefix)
            if prefix is not None:
                prefix[:] = marked_prefix
            return marked

        return self._rewrite(args, kwargs, mark)

    def inside(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Inside the transform: the arguments as the function sees them, fresh copies
        (`jax.grad` passes the arguments it does not differentiate through as they are,
        and the caller's Variables must change only by `write_back`), each `Alias` back
        to its Variable."""
        return self._rewrite(args, kwargs, _copy_resolved)

    def _rewrite(
        self, args: tuple, kwargs: dict, rewrite: Callable[[list], list]
    ) -> tuple[tuple, dict]:
        """`(args, kwargs)` with their dynamic part, in `scan` order, passed through `rewrite`."""
        dyn_args, dyn_kwargs = self.dynamic(args, kwargs)
        new_args, new_kwargs = unscan(
            rewrite(scan(dyn_args, dyn_kwargs, self.first)), dyn_args, self.first
        )
        static = self._static_positions(len(args))
        merged = tuple(
            old if i in static else new
            for i, (old, new) in enumerate(zip(args, new_args, strict=True))
        )
        return merged, {**kwargs, **new_kwargs}

    def _static_positions(self, n: int) -> set[int]:
        return {i % n if n and i < 0 else i for i in self.static_argnums}

    def with_updates(
        self,
        f: Callable,
        split_aux: bool = False,
        every: bool = False,
        output: Callable[[Any], object] = _same,
    ) -> Pure:
        """`f` returning also the new values of the Variables it changed (of all its
        Variables with `every`), and which changed. `output(result)` is the part of its
        result that may hold none of the arguments' Variables (custom_vjp's `fwd`: not
        the residual)."""

        def pure(*args: Any, **kwargs: Any) -> tuple:
            args, kwargs = self.inside(args, kwargs)
            inner = walk(scan(*self.dynamic(args, kwargs), self.first)).variables
            before = [_CARRIED if isinstance(v, HijaxVariable) else v.raw_value for v in inner]
            out = f(*args, **kwargs)
            out, out_aliases = self._checked_output(args, kwargs, out, output)
            flags = tuple(
                b is not _CARRIED and v.raw_value is not b
                for v, b in zip(inner, before, strict=True)
            )
            values = [v.raw_value for v, c in zip(inner, flags, strict=True) if c or every]
            positions = tuple(i for i, c in enumerate(flags) if c)
            changed = Static(Changes(flags, out_aliases, positions))
            if split_aux:  # grad: (loss, aux) -> loss, (aux, updates)
                loss, aux = out
                return loss, (aux, values, changed)
            return out, values, changed

        return pure

    def _checked_output(
        self, args: tuple, kwargs: dict, out: object, output: Callable[[Any], object]
    ) -> tuple[Any, bool]:
        """`f`'s output checked to hold none of the arguments' Variables, and whether it
        needed `Alias`es: in graph mode a graph node or Variable it returns at several
        places comes back as one object (`resolve_output`), as Flax's `to_tree2` keeps it;
        in tree mode that is an error."""
        returned = output(out)
        groups = {"args": args, "kwargs": kwargs, "out": returned}
        if self.tree or output is not _same:
            returned_variables = variables_of(returned)
            if returned_variables:
                check_no_aliases(self.name, groups, only="out")
                check_not_captured(self.name, returned, returned_variables)
            return out, False
        shape = walk(returned)
        if shape.variables:
            check_no_aliases(self.name, groups, only="out", shared_out=True)
            check_not_captured(self.name, returned, shape.variables)
        if not shape.repeats:
            return out, False
        return mark_aliases(out)[0], True


def check_not_captured(name: str, returned: object, variables: list[Variable]) -> None:
    """Raise if the function returns a Variable it reached through its closure (made
    outside the transform, neither an argument nor made inside), naming its path: JAX
    would hand back a copy, cut off from the caller's model (Flax NNX 0.12 refuses it)."""
    captured = next((v for v in variables if made_in_another_trace(v)), None)
    if captured is None:
        return
    where = "out"
    for keypath, leaf in jax.tree_util.tree_leaves_with_path(returned, is_leaf=is_variable):
        if leaf is captured:
            where += jax.tree_util.keystr(keypath)
            break
    raise ValueError(
        f"Cannot return captured Variable: the {type(captured).__name__} at {where} was "
        f"made outside `{name}` and reached through the function's closure, so `{name}` "
        "cannot return it. Pass the module holding it as an argument, or return a copy "
        "made inside (`nnx.clone(module)`)."
    )


class Changes(NamedTuple):
    """What a simple-mode trace reports statically: which of the arguments' Variables
    it changed (`flags`, in `walk` order; `positions`, the indices of those that did)
    and whether its output holds `Alias`es."""

    flags: tuple[bool, ...]
    out_aliases: bool
    positions: tuple[int, ...]


def resolve_output(out: T, changed: Static[Changes]) -> T:
    """The output of a simple-mode call, a graph node or Variable it returned at several
    places one object again."""
    return resolve_aliases(out) if changed.value.out_aliases else out


def write_back(
    variables: list[Variable], values: list, changed: Static, every: bool = False
) -> None:
    """Store the new values into the caller's Variables that changed inside (`values`
    holds those, or one per Variable); `every` stores all of them (their buffers were
    donated). Only those are visited: a call that changed few Variables of a large model
    costs little."""
    positions: Sequence[int] = range(len(variables)) if every else changed.value.positions
    if not positions:
        return
    if len(values) == len(variables):  # one value per Variable
        values = [values[i] for i in positions]
    with WRITE_LOCK:  # checked, then written, at once
        if isinstance(variables, ReadVariables):
            _check_unwritten(variables, positions)
        for i, value in zip(positions, values, strict=True):
            variables[i].set_raw_value(value)


def _check_unwritten(variables: ReadVariables, positions: Sequence[int]) -> None:
    """Raise `ConcurrentUpdateError` if a Variable about to be written (at `positions`)
    changed since the call read it (another thread's call wrote it)."""
    for i in positions:
        variable, before = variables[i], variables.before[i]
        if variable.raw_value is not before:
            where = f"a {type(variable).__name__} of shape {getattr(before, 'shape', ())}"
            raise concurrent_update(variables.name, where)


class SimpleJit(NamedTuple):
    """`jit` in simple mode (`simple_jit`): `prepare` prepares one call (`Prepared`);
    `pure` is the function of the arguments it compiles (returning the output, the new
    values of the Variables it changed and which changed), `jit_kwargs` what it passes
    `jax.jit` besides the static arguments."""

    prepare: Callable[[tuple, dict], Prepared]
    pure: Pure
    jit_kwargs: dict[str, Any]


def simple_jit(
    f: Callable, inputs: Inputs, out_shardings: object, jit_kwargs: dict[str, Any]
) -> SimpleJit:
    """`jit` in simple mode: `jax.jit` itself (shardings and donation included); with
    donation every Variable's value comes back (the caller's buffers were given away)."""
    if out_shardings is not None:
        out_shardings = tree_state_prefixes(out_shardings)
        jit_kwargs = {**jit_kwargs, "out_shardings": (out_shardings, None, None)}
    if jit_kwargs.get("in_shardings") is not None:  # `prefix(..., graph=True)`'s, as made
        jit_kwargs = {**jit_kwargs, "in_shardings": tree_state_prefixes(jit_kwargs["in_shardings"])}
    donating = bool(jit_kwargs.get("donate_argnums") or jit_kwargs.get("donate_argnames"))
    pure = inputs.with_updates(f, every=donating)
    jitted = jax.jit(
        pure,
        static_argnums=inputs.static_argnums,
        static_argnames=inputs.static_argnames,
        **jit_kwargs,
    )

    in_shardings = jit_kwargs.get("in_shardings")

    def prepare(args: tuple, kwargs: dict) -> Prepared:
        variables = inputs.variables(args, kwargs)
        if in_shardings is not None and variables.repeats:
            static = inputs._static_positions(len(args))
            kept = tuple(a for i, a in enumerate(args) if i not in static)
            _variable_axes(in_shardings, kept, {}, "in_shardings")  # one sharding per Variable
        args, kwargs = inputs.shared(args, kwargs, variables)

        def finish(result: tuple) -> Any:
            out, values, changed = result
            write_back(variables, values, changed, every=donating)
            return resolve_output(out, changed)

        return Prepared(jitted, args, kwargs, finish)

    return SimpleJit(prepare, pure, jit_kwargs)


def simple_vmap(
    f: Callable,
    inputs: Inputs,
    in_axes: object,
    vmap_kwargs: dict,
    map_fn: Callable[..., Callable] = jax.vmap,
    option: str = "in_axes",
) -> Callable:
    """`vmap` in simple mode: `jax.vmap` (or `map_fn`, e.g. `jax.pmap`); changed
    Variables come back on their in axis. `option`: the name errors give `in_axes`
    (`shard_map`'s is `in_specs`; its `out_axes` are then `out_specs`)."""
    out_axes = vmap_kwargs.pop("out_axes")
    out_option = "out_specs" if option == "in_specs" else "out_axes"
    pure = inputs.with_updates(
        f if inputs.tree else _checking_out_axes(f, out_axes, out_option), every=True
    )
    jax_out_axes = tree_state_prefixes(out_axes)

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        variables = inputs.variables(args, kwargs)
        axes = _variable_axes(in_axes, args, kwargs, option)
        # JAX gets the axes expanded to the arguments' own structure (a State prefix whose
        # keys come in another order lines up by key), marked as the arguments are.
        prefix = [*axes.per_argument, broadcast_prefix(0, kwargs, is_leaf=is_variable)]
        shared_args, shared_kwargs = inputs.shared(args, kwargs, variables, prefix)
        mapped = map_fn(
            pure,
            in_axes=tuple(prefix[:-1]),
            out_axes=(jax_out_axes, axes.variables, None),
            **vmap_kwargs,
        )
        out, values, changed = mapped(*shared_args, **shared_kwargs)
        write_back(variables, values, changed)
        return resolve_output(out, changed)

    return call


def _checking_out_axes(f: Callable, out_axes: object, option: str) -> Callable:
    """`f`, its output checked to give a graph node or Variable it returns at several
    places one out axis."""

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        out = f(*args, **kwargs)
        if walk(out).repeats:
            _variable_axes((out_axes,), (out,), {}, option, label="out")
        return out

    return checked


class CallAxes(NamedTuple):
    """A simple-mode map's axes: `variables`, each Variable's, once (positional arguments
    in order, then kwargs: axis 0); `per_argument`, `in_axes` expanded to each positional
    argument's full structure."""

    variables: list[object]
    per_argument: tuple[object, ...]


def _variable_axes(
    in_axes: object, args: tuple, kwargs: dict, name: str = "in_axes", label: str | None = None
) -> CallAxes:
    """The mapped axis of each Variable of the call, from `in_axes` (kwargs: axis 0);
    a Variable reached at several places must get one axis (`name`: the option's name;
    `label`: how errors name the arguments, their position when None)."""
    prefix = in_axes if isinstance(in_axes, tuple | list) else (in_axes,) * len(args)
    if len(prefix) != len(args):
        raise ValueError(
            f"`{name}` has {len(prefix)} entries for {len(args)} positional arguments; "
            "give one axis (or prefix) per argument."
        )
    axes: list[object] = []
    per_argument: list[object] = []
    reached: dict[int, list[tuple[str, object]]] = {}
    kinds: dict[int, str] = {}
    for i, (axis, arg) in enumerate(zip(prefix, args, strict=True)):
        full = broadcast_prefix(expand_tree_states(axis, arg), arg, is_leaf=is_variable, name=name)
        per_argument.append(full)
        leaves = jax.tree_util.tree_structure(arg, is_leaf=is_variable).flatten_up_to(full)
        flat_args = jax.tree_util.tree_leaves_with_path(arg, is_leaf=is_variable)
        for ax, (keypath, leaf) in zip(leaves, flat_args, strict=True):
            if is_variable(leaf):
                if id(leaf) not in reached:
                    axes.append(ax)
                place = f"{label if label is not None else i}{jax.tree_util.keystr(keypath)}"
                reached.setdefault(id(leaf), []).append((place, ax))
                kinds[id(leaf)] = type(leaf).__name__
    raise_inconsistent_aliasing(reached, kinds, name)
    axes += [0 for v in walk(kwargs).variables if id(v) not in reached]
    return CallAxes(axes, tuple(per_argument))


def simple_grad(
    f: Callable,
    inputs: Inputs,
    argnums: int | Sequence[int],
    has_aux: bool,
    return_value: bool,
    jax_kwargs: dict[str, Any],
) -> Callable:
    """`grad`/`value_and_grad` in simple mode: gradients shaped like the arguments (a
    Variable the arguments share gets one gradient Variable, shared alike)."""
    pure = inputs.with_updates(f if has_aux else with_empty_aux(f), split_aux=True)
    transformed = jax.value_and_grad(pure, argnums=argnums, has_aux=True, **jax_kwargs)

    nums = {argnums} if isinstance(argnums, int) else set(argnums)

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        variables = inputs.variables(args, kwargs)
        if variables.repeats:  # the walk only when one may differ
            _check_diff_aliasing(args, nums)
        shared_args, shared_kwargs = inputs.shared(args, kwargs, variables)
        (loss, (aux, values, changed)), grads = transformed(*shared_args, **shared_kwargs)
        write_back(variables, values, changed)
        loss, aux = resolve_output((loss, aux), changed)
        grads = resolve_aliases(grads)
        if return_value:
            return ((loss, aux), grads) if has_aux else (loss, grads)
        return (grads, aux) if has_aux else grads

    return call


def _check_diff_aliasing(args: tuple, argnums: set[int]) -> None:
    """Raise if a Variable is reached both in a differentiated argument and in another
    one: it cannot be differentiated and held constant at once."""
    reached: dict[int, list[tuple[str, object]]] = {}
    kinds: dict[int, str] = {}
    for i, arg in enumerate(args):
        role = "differentiated" if i in argnums else "not differentiated"
        for keypath, leaf in jax.tree_util.tree_leaves_with_path(arg, is_leaf=is_variable):
            if is_variable(leaf):
                reached.setdefault(id(leaf), []).append(
                    (f"args[{i}]{jax.tree_util.keystr(keypath)}", role)
                )
                kinds[id(leaf)] = type(leaf).__name__
    raise_inconsistent_aliasing(reached, kinds, "argnums")


def with_empty_aux(f: Callable) -> Callable:
    @functools.wraps(f)
    def with_aux(*args: Any, **kwargs: Any) -> tuple:
        return f(*args, **kwargs), None

    return with_aux


def simple_remat(f: Callable, inputs: Inputs, checkpoint_kwargs: dict[str, Any]) -> Callable:
    """`remat` in simple mode: `jax.checkpoint` itself."""
    checkpointed = jax.checkpoint(
        inputs.with_updates(f), static_argnums=inputs.static_argnums, **checkpoint_kwargs
    )

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        variables = inputs.variables(args, kwargs)
        shared_args, shared_kwargs = inputs.shared(args, kwargs, variables)
        out, values, changed = checkpointed(*shared_args, **shared_kwargs)
        write_back(variables, values, changed)
        return resolve_output(out, changed)

    return call
