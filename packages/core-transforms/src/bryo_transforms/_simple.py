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
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from bryo_graph import Variable, check_tree, set_graph_mode, set_graph_updates
from bryo_pytree import broadcast_prefix

from ._axes import raise_inconsistent_aliasing
from ._collect import Static
from ._errors import concurrent_update
from ._options import Prepared
from ._plan import WRITE_LOCK

Pure = Callable[..., tuple]


def graph_updates_on(graph: bool | None, graph_updates: bool | None) -> bool:
    """Whether a transform runs in graph mode with graph updates (bryo's lifting), given
    its `graph=`/`graph_updates=` keywords (None: the thread's defaults)."""
    graph = set_graph_mode.current_value() if graph is None else graph
    updates = set_graph_updates.current_value() if graph_updates is None else graph_updates
    return graph and updates


def tree_mode(graph: bool | None) -> bool:
    """Whether `graph=` (None: the thread's default) asks for tree mode."""
    return not (set_graph_mode.current_value() if graph is None else graph)


def _is_variable(value: object) -> bool:
    return isinstance(value, Variable)


def variables_of(tree: object) -> list[Variable]:
    """The Variables among `tree`'s pytree leaves, in flattening order."""
    return [leaf for leaf in jax.tree.leaves(tree, is_leaf=_is_variable) if _is_variable(leaf)]


def check_no_aliases(name: str, groups: dict[str, object], *, tree: bool = False) -> None:
    """Raise if a Variable is reached twice in `groups` (`{'args': ..., 'out': ...}`),
    naming both paths: simple mode (`graph_updates=False`) has no shared references. With
    `tree`, also the other tree-mode errors (cycles, `pytree=False` objects)."""
    seen: dict[int, str] = {}
    for label, tree_ in groups.items():
        for keypath, leaf in jax.tree_util.tree_leaves_with_path(tree_, is_leaf=_is_variable):
            if not _is_variable(leaf):
                continue
            where = label + jax.tree_util.keystr(keypath)
            first = seen.setdefault(id(leaf), where)
            if first != where:
                raise ValueError(
                    f"Duplicate {type(leaf).__name__}\nfound at paths:\n\n  - {first}\n"
                    f"  - {where}\n\n`{name}` with graph_updates=False (or graph=False) "
                    "does not support Variable aliasing (an argument passed twice, or a "
                    "Variable of the arguments returned). Pass it once, return a copy "
                    "(`clone`), or use graph mode with updates (`graph=True, "
                    "graph_updates=True`)."
                )
    if tree:
        check_tree(tuple(groups.values()), name=name)


class ReadVariables(list):
    """The caller's Variables of one simple-mode call (a list), with the values they held
    when the call read them and the transform's name (for `ConcurrentUpdateError`)."""

    __slots__ = ("before", "name")

    def __init__(self, variables: list[Variable], before: list, name: str) -> None:
        super().__init__(variables)
        self.before = before
        self.name = name


class Inputs:
    """How one simple-mode transform reads a call's inputs: which arguments are static
    (left out of the Variable scan) and whether they must be trees."""

    def __init__(
        self, name: str, tree: bool, static_argnums: Sequence[int] = (), static_argnames=()
    ) -> None:
        self.name = name
        self.tree = tree
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)

    def dynamic(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`(args, kwargs)` without the static ones (they are not traced)."""
        if not self.static_argnums and not self.static_argnames:
            return args, kwargs
        n = len(args)
        static = {i % n if n and i < 0 else i for i in self.static_argnums}
        dyn_args = tuple(None if i in static else a for i, a in enumerate(args))
        return dyn_args, {k: v for k, v in kwargs.items() if k not in self.static_argnames}

    def variables(self, args: tuple, kwargs: dict) -> ReadVariables:
        """The caller's Variables of a call, checked to be a tree in tree mode, with the
        values they hold now (`write_back` checks that nobody wrote them meanwhile)."""
        dynamic = self.dynamic(args, kwargs)
        if self.tree:
            check_tree(dynamic, name=self.name)
        variables = variables_of(dynamic)
        with WRITE_LOCK:
            before = [v.raw_value for v in variables]
        return ReadVariables(variables, before, self.name)

    def with_updates(self, f: Callable, split_aux: bool = False, every: bool = False) -> Pure:
        """`f` returning also the new values of the Variables it changed (of all its
        Variables with `every`), and which changed."""

        def pure(*args: Any, **kwargs: Any) -> tuple:
            inner = variables_of(self.dynamic(args, kwargs))
            before = [v.raw_value for v in inner]
            out = f(*args, **kwargs)
            changed = tuple(v.raw_value is not b for v, b in zip(inner, before, strict=True))
            values = [v.raw_value for v, c in zip(inner, changed, strict=True) if c or every]
            if split_aux:  # grad: (loss, aux) -> loss, (aux, updates)
                loss, aux = out
                return loss, (aux, values, Static(changed))
            return out, values, Static(changed)

        return pure


def write_back(
    variables: list[Variable], values: list, changed: Static, every: bool = False
) -> None:
    """Store the new values into the caller's Variables that changed inside (`values`
    holds those, or one per Variable); `every` stores all of them (their buffers were
    donated)."""
    all_values = len(values) == len(variables)
    with WRITE_LOCK:  # checked, then written, at once
        if isinstance(variables, ReadVariables):
            _check_unwritten(variables, changed, every)
        it = iter(values)
        for variable, was_changed in zip(variables, changed.value, strict=True):
            value = next(it) if all_values or was_changed else None
            if was_changed or every:
                variable.set_raw_value(value)


def _check_unwritten(variables: ReadVariables, changed: Static, every: bool) -> None:
    """Raise `ConcurrentUpdateError` if a Variable about to be written changed since the
    call read it (another thread's call wrote it)."""
    for variable, before, was_changed in zip(
        variables, variables.before, changed.value, strict=True
    ):
        if (was_changed or every) and variable.raw_value is not before:
            where = f"a {type(variable).__name__} of shape {getattr(before, 'shape', ())}"
            raise concurrent_update(variables.name, where)


def simple_jit(
    f: Callable, inputs: Inputs, out_shardings: object, jit_kwargs: dict[str, Any]
) -> Callable[[tuple, dict], Prepared]:
    """`jit` in simple mode: `jax.jit` itself (shardings and donation included). Returns
    the function preparing one call (`Prepared`); with donation every Variable's value
    comes back (the caller's buffers were given away)."""
    if out_shardings is not None:
        jit_kwargs = {**jit_kwargs, "out_shardings": (out_shardings, None, None)}
    donating = bool(jit_kwargs.get("donate_argnums") or jit_kwargs.get("donate_argnames"))
    jitted = jax.jit(
        inputs.with_updates(f, every=donating),
        static_argnums=inputs.static_argnums,
        static_argnames=inputs.static_argnames,
        **jit_kwargs,
    )

    def prepare(args: tuple, kwargs: dict) -> Prepared:
        variables = inputs.variables(args, kwargs)

        def finish(result: tuple) -> Any:
            out, values, changed = result
            write_back(variables, values, changed, every=donating)
            return out

        return Prepared(jitted, args, kwargs, finish)

    return prepare


def simple_vmap(
    f: Callable,
    inputs: Inputs,
    in_axes: object,
    vmap_kwargs: dict,
    map_fn: Callable[..., Callable] = jax.vmap,
) -> Callable:
    """`vmap` in simple mode: `jax.vmap` (or `map_fn`, e.g. `jax.pmap`); changed
    Variables come back on their in axis."""
    pure = inputs.with_updates(f, every=True)
    out_axes = vmap_kwargs.pop("out_axes")

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        variables = inputs.variables(args, kwargs)
        axes = _variable_axes(in_axes, args, kwargs)
        mapped = map_fn(pure, in_axes=in_axes, out_axes=(out_axes, axes, None), **vmap_kwargs)
        out, values, changed = mapped(*args, **kwargs)
        write_back(variables, values, changed)
        return out

    return call


def _variable_axes(in_axes: object, args: tuple, kwargs: dict) -> list[object]:
    """The mapped axis of each Variable of the call, from `in_axes` (kwargs: axis 0)."""
    prefix = in_axes if isinstance(in_axes, tuple | list) else (in_axes,) * len(args)
    if len(prefix) != len(args):
        raise ValueError(
            f"`in_axes` has {len(prefix)} entries for {len(args)} positional arguments; "
            "give one axis (or prefix) per argument."
        )
    axes: list[object] = []
    reached: dict[int, list[tuple[str, object]]] = {}
    kinds: dict[int, str] = {}
    for i, (axis, arg) in enumerate(zip(prefix, args, strict=True)):
        full = broadcast_prefix(axis, arg, is_leaf=_is_variable, name="in_axes")
        leaves = jax.tree_util.tree_structure(arg, is_leaf=_is_variable).flatten_up_to(full)
        flat_args = jax.tree_util.tree_leaves_with_path(arg, is_leaf=_is_variable)
        for ax, (keypath, leaf) in zip(leaves, flat_args, strict=True):
            if _is_variable(leaf):
                axes.append(ax)
                place = f"{i}{jax.tree_util.keystr(keypath)}"
                reached.setdefault(id(leaf), []).append((place, ax))
                kinds[id(leaf)] = type(leaf).__name__
    raise_inconsistent_aliasing(reached, kinds, "in_axes")
    axes += [0] * len(variables_of(kwargs))
    return axes


def simple_grad(
    f: Callable,
    inputs: Inputs,
    argnums: int | Sequence[int],
    has_aux: bool,
    return_value: bool,
    jax_kwargs: dict[str, Any],
) -> Callable:
    """`grad`/`value_and_grad` in simple mode: gradients shaped like the arguments."""
    pure = inputs.with_updates(f if has_aux else with_empty_aux(f), split_aux=True)
    transformed = jax.value_and_grad(pure, argnums=argnums, has_aux=True, **jax_kwargs)

    nums = {argnums} if isinstance(argnums, int) else set(argnums)

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not inputs.tree:
            _check_diff_aliasing(args, nums)
        variables = inputs.variables(args, kwargs)
        (loss, (aux, values, changed)), grads = transformed(*args, **kwargs)
        write_back(variables, values, changed)
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
        for keypath, leaf in jax.tree_util.tree_leaves_with_path(arg, is_leaf=_is_variable):
            if _is_variable(leaf):
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
        out, values, changed = checkpointed(*args, **kwargs)
        write_back(variables, values, changed)
        return out

    return call
