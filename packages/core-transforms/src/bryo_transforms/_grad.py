"""`grad` and `value_and_grad` for functions of graph nodes: gradients w.r.t. their state.

The State leaves the `wrt` filter selects in the differentiated arguments, and the
array arguments among them, are the inputs of `jax.value_and_grad`; everything else is
passed through. Gradients come back shaped like the arguments: a `State` of
`VariableState`s for a graph node, arrays for arrays, None for static values.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Container, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import jax

from bryo_filters import Filter, filters_to_predicates
from bryo_graph import Param, State, VariableState
from bryo_pytree import Path

from ._apply import apply
from ._axes import state_leaf
from ._collect import Grouping, Static, collect
from ._layout import ARRAY, scan_args
from ._options import as_argnums, decorator_or_none
from ._plan import CallPlan, PlanCache, Signature
from ._prefixes import check_prefix
from ._rebuild import rebuild
from ._simple import Inputs, graph_updates_on, simple_grad, tree_mode

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class DiffState:
    """An entry of `grad`'s `argnums`: differentiate argument `argnum` with respect to
    the state `filter` selects (instead of `wrt`).

    Example:
        >>> grad(loss, argnums=(DiffState(0, LoRAParam), 1))     # doctest: +SKIP
    """

    argnum: int
    filter: Filter


def _argnum_filters(
    argnums: int | DiffState | Sequence[int | DiffState], wrt: Filter
) -> tuple[int | tuple[int, ...], dict[int, Filter]]:
    """`argnums` as ints (one int stays one), and the filter of each differentiated one."""
    single = isinstance(argnums, int | DiffState)
    items = [argnums] if single else list(argnums)
    filters: dict[int, Filter] = {}
    for item in items:
        if isinstance(item, DiffState):
            filters[item.argnum] = item.filter
        elif isinstance(item, int):
            filters[item] = wrt
        else:
            raise TypeError(f"`argnums` takes ints and `DiffState(argnum, filter)`s; got {item!r}.")
    nums = tuple(item.argnum if isinstance(item, DiffState) else item for item in items)
    return (nums[0] if single else nums), filters


class StateEntry(NamedTuple):
    """A State leaf of a differentiated argument: its path below the argument's root, the
    leaf (a Variable, or a VariableState for a plain leaf) and its index `k` in the plan."""

    path: Path
    leaf: object
    k: int


def state_entries(plan: CallPlan, argnums: tuple[int, ...]) -> dict[int, list[StateEntry]]:
    """Per root (index) of an argument in `argnums`, its State leaves."""
    sig = plan.sig
    return {
        j: [StateEntry(path, state_leaf(plan, k), k) for path, k in sig.root_leaves(j)]
        for j, place in enumerate(sig.root_places)
        if place.argument in argnums
    }


def _everything(path: Path, leaf: object) -> bool:
    return True


def select_leaves(
    plan: CallPlan, entries: dict[int, list[StateEntry]], filters: dict[int, Filter]
) -> tuple[list[int], dict[int, list[tuple[Path, int]]]]:
    """State leaves to differentiate, and per root of a differentiated argument its
    `[(path, k)]`; `filters` selects them per argument (its position). A State is no
    model whose Params are chosen: all of it is differentiated (as in Flax NNX, where a
    State is a pytree that `jax.grad` sees whole; `nnx.split(model, ...)` then `grad` of
    the States is the functional style)."""
    predicates: dict[int | str, Callable] = dict(
        zip(filters, filters_to_predicates(tuple(filters.values())), strict=True)
    )
    chosen: set[int] = set()
    per_root: dict[int, list[tuple[Path, int]]] = {}
    for j, root_entries in entries.items():
        predicate = predicates[plan.sig.root_places[j].argument]
        if isinstance(plan.roots[j], State):  # a pytree of state, not a model: all of it
            predicate = _everything
        per_root[j] = [(e.path, e.k) for e in root_entries if predicate(e.path, e.leaf)]
        chosen.update(k for _, k in per_root[j])
    return sorted(chosen), per_root


def diff_state_leaves(
    plan: CallPlan, argnums: tuple[int, ...], filters: dict[int, Filter]
) -> tuple[list[int], dict[int, list[tuple[Path, int]]]]:
    """State leaves to differentiate, and per root of a differentiated argument its
    `[(path, k)]` (paths relative to that root); `filters` selects them per argument."""
    return select_leaves(plan, state_entries(plan, argnums), filters)


def array_places(sig: Signature) -> list[int | str]:
    """Per array argument leaf, the argument it is in (position or keyword name)."""
    return [
        argument
        for argument, layout in sig.named_layouts()
        for kind in layout.leaf_kinds
        if kind is ARRAY
    ]


class DiffSplit(NamedTuple):
    """A call's inputs split for differentiation: the differentiated State leaves
    (`diff_ks`, indices into the plan's leaves) and array arguments (`diff_arrays`), their
    `values` (leaves first), and the rest (`rest_leaves`, `rest_arrays`: None where
    differentiated)."""

    diff_ks: list[int]
    diff_arrays: list[int]
    values: list
    rest_leaves: list
    rest_arrays: list

    def merge(self, diff_values: list, rest_leaves: list, rest_arrays: list) -> tuple[list, list]:
        """`(leaves, arrays)` of the call with `diff_values` put back into the rest."""
        leaves, arrays = list(rest_leaves), list(rest_arrays)
        n = len(self.diff_ks)
        for k, value in zip(self.diff_ks, diff_values[:n], strict=True):
            leaves[k] = value
        for i, value in zip(self.diff_arrays, diff_values[n:], strict=True):
            arrays[i] = value
        return leaves, arrays


def split_diff(
    plan: CallPlan, arrays: list, diff_ks: list[int], nums: Container[int | str]
) -> DiffSplit:
    """Split a call's State leaves and array arguments: `diff_ks` from
    `diff_state_leaves`, the array arguments of the arguments in `nums`."""
    diff_arrays = [i for i, place in enumerate(array_places(plan.sig)) if place in nums]
    leaves = plan.leaf_values()
    rest_leaves = list(leaves)
    for k in diff_ks:
        rest_leaves[k] = None
    rest_arrays = list(arrays)
    for i in diff_arrays:
        rest_arrays[i] = None
    values = [leaves[k] for k in diff_ks] + [arrays[i] for i in diff_arrays]
    return DiffSplit(diff_ks, diff_arrays, values, rest_leaves, rest_arrays)


def grad_state(plan: CallPlan, entries: list[tuple[Path, int]], grads: dict[int, Any]) -> Any:
    flat = {}
    for path, k in entries:
        meta = plan.sig.metas[k]
        if meta is None:  # a raw leaf: its State's metadata (a Haliax array's axis names)
            source = plan.sources[k]
            leaf_metadata = source.metadata
            flat[path] = (
                source.leaf_type.from_metadata(grads[k], leaf_metadata)
                if leaf_metadata
                else VariableState(source.leaf_type, grads[k])
            )
            continue
        flat[path] = VariableState(meta.type, grads[k], **meta.metadata)
    if list(flat) == [()]:
        return flat[()]
    return State.from_flat_path(flat)


def first_places(per_root: dict[int, list[tuple[Path, int]]]) -> dict[int, list[tuple[Path, int]]]:
    """`per_root` with each State leaf kept at the first root (in argument order) that
    holds it: a Variable reached through two differentiated roots (`{'a': p, 'b': p}`, or
    one model passed twice) has its gradient at its first place and none at the later
    ones, as Flax NNX splits the roots jointly and a model's State lists a shared Variable
    once. `update(model, state(grads))` then writes each gradient once."""
    seen: set[int] = set()
    kept: dict[int, list[tuple[Path, int]]] = {}
    for j in sorted(per_root):
        kept[j] = [(path, k) for path, k in per_root[j] if k not in seen]
        seen.update(k for _, k in per_root[j])
    return kept


def _assemble_grads(
    plan: CallPlan, argnums: tuple[int, ...], per_root: dict, leaf_grads: dict, array_grads: list
) -> tuple:
    """Per differentiated argument, its gradients shaped like it (None for statics); a
    later place of a State leaf met before gets an empty State (see `first_places`)."""
    per_root = first_places(per_root)
    root_grads = (
        grad_state(plan, per_root.get(j, []), leaf_grads) for j in range(len(plan.sig.root_places))
    )
    arrays = iter(array_grads)
    per_arg = [layout.rebuild(root_grads, arrays, statics=False) for layout in plan.sig.layouts]
    return tuple(grads for i, grads in enumerate(per_arg) if i in argnums)


def _grad_core(
    f: Callable,
    argnums: int | DiffState | Sequence[int | DiffState],
    has_aux: bool,
    wrt: Filter,
    jax_kwargs: dict,
) -> Callable:
    argnums, filters = _argnum_filters(argnums, wrt)
    nums = as_argnums(argnums)
    cache = PlanCache(size=16)

    def run(*args: Any, **kwargs: Any) -> tuple:
        if any(n >= len(args) for n in nums):
            raise TypeError(
                f"`argnums` {argnums!r} names an argument the call did not get: it passed "
                f"{len(args)} positional arguments."
            )
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        sig = plan.sig
        diff_ks, per_root = diff_state_leaves(plan, nums, filters)
        split = split_diff(plan, arrays, diff_ks, nums)
        grouping = Grouping()

        def pure(diff: list, rest_leaves: list, rest_arrays: list) -> tuple:
            all_leaves, all_arrays = split.merge(diff, rest_leaves, rest_arrays)
            args, kwargs, inner = rebuild(sig, all_leaves, all_arrays)
            out = f(*args, **kwargs)
            if has_aux:
                if not isinstance(out, tuple) or len(out) != 2:
                    raise TypeError(
                        "with `has_aux=True` the function must return a pair `(loss, aux)`; "
                        f"it returned {type(out).__name__}."
                    )
                loss, aux = out
            else:
                loss, aux = out, None
            groups, direct, out_plan = collect(inner, aux, grouping)
            return loss, (groups, direct, Static(out_plan))

        try:
            (loss, (groups, direct, static)), grads = jax.value_and_grad(
                pure, has_aux=True, **jax_kwargs
            )(split.values, split.rest_leaves, split.rest_arrays)
        except TypeError as error:
            _explain_integer_inputs(error, plan, split, per_root, jax_kwargs)
            raise
        aux = apply(plan, static.value, groups, direct)
        leaf_grads = dict(zip(diff_ks, grads[: len(diff_ks)], strict=False))
        array_grads = list(arrays)
        for i, g in zip(split.diff_arrays, grads[len(diff_ks) :], strict=False):
            array_grads[i] = g
        per_arg = _assemble_grads(plan, nums, per_root, leaf_grads, array_grads)
        by_num = dict(zip(sorted(set(nums)), per_arg, strict=False))
        result = by_num[argnums] if isinstance(argnums, int) else tuple(by_num[n] for n in nums)
        return loss, aux, result

    return run


def _explain_integer_inputs(
    error: TypeError, plan: CallPlan, split: DiffSplit, per_root: dict, jax_kwargs: dict
) -> None:
    """Raise a `TypeError` naming the differentiated State leaf that is not a float (JAX's
    own error names no path), if there is one; return otherwise (the caller re-raises)."""
    if jax_kwargs.get("allow_int") or jax_kwargs.get("holomorphic"):
        return
    values = dict(zip(split.diff_ks, split.values, strict=False))
    for j, entries in sorted(per_root.items()):
        for path, k in entries:
            dtype = getattr(values.get(k), "dtype", None)
            if dtype is not None and not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
                argument = plan.sig.root_places[j].argument
                raise TypeError(
                    f"`grad` would differentiate the state at path {path!r} of argument "
                    f"{argument!r}, an array of {dtype}, and JAX differentiates only "
                    "floating-point values. Leave it out with `wrt=` (a filter that does not "
                    "select it; for an Equinox model `wrt=eqx.is_inexact_array` differentiates "
                    "what `eqx.filter_grad` does), or pass `allow_int=True`."
                ) from error


def _plain_argnums(argnums: int | DiffState | Sequence[int | DiffState]) -> int | Sequence[int]:
    """`argnums` for simple mode, which takes no `DiffState`."""
    return cast("int | Sequence[int]", argnums)  # `check_prefix` refused DiffStates here


def _grad_transform(
    transform: Callable,
    f: Callable | None,
    *,
    with_value: bool,
    argnums: int | DiffState | Sequence[int | DiffState],
    has_aux: bool,
    wrt: Filter,
    holomorphic: bool,
    allow_int: bool,
    graph: bool | None,
    graph_updates: bool | None,
) -> Callable[..., Any]:
    """`grad` (or, `with_value`, `value_and_grad`) of `f`; `transform` is the public
    function (for decorator use and errors), the keywords are its own."""
    options = {"argnums": argnums, "has_aux": has_aux, "wrt": wrt, "graph": graph}
    options |= {"holomorphic": holomorphic, "allow_int": allow_int, "graph_updates": graph_updates}
    partial = decorator_or_none(transform, f, **options)
    if partial is not None:
        return partial
    assert f is not None
    jax_kwargs = {"holomorphic": holomorphic, "allow_int": allow_int}
    updates = graph_updates_on(graph, graph_updates)
    check_prefix(argnums, "argnums", "grad", graph_updates=updates, mappings=(DiffState,))
    if not updates:
        plain_argnums = _plain_argnums(argnums)
        first = (plain_argnums,) if isinstance(plain_argnums, int) else tuple(plain_argnums)
        inputs = Inputs("grad", tree_mode(graph), first=first)
        return simple_grad(f, inputs, plain_argnums, has_aux, with_value, jax_kwargs)
    run = _grad_core(f, argnums, has_aux, wrt, jax_kwargs)

    @functools.wraps(f)
    def grad_f(*args: Any, **kwargs: Any) -> Any:
        loss, aux, grads = run(*args, **kwargs)
        if with_value:
            return ((loss, aux), grads) if has_aux else (loss, grads)
        return (grads, aux) if has_aux else grads

    return grad_f


def grad(
    f: F | None = None,
    /,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    *,
    wrt: Filter = Param,
    holomorphic: bool = False,
    allow_int: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """`jax.grad` for functions of graph nodes: gradients w.r.t. their `wrt` state.

    Args:
        f: a function returning a scalar loss (or `(loss, aux)` with `has_aux`).
        argnums: which positional argument(s) to differentiate; a `DiffState(argnum,
            filter)` entry differentiates that argument w.r.t. the state `filter`
            selects (graph mode).
        has_aux: `f` returns `(loss, aux)`; aux may hold graph nodes.
        wrt: the filter selecting, in graph-node arguments, the state to differentiate
            (Params by default). Array arguments are differentiated whole.
        holomorphic: as for `jax.grad`.
        allow_int: as for `jax.grad`.
        graph: with `graph_updates`, graph mode with updates (both True, the default), or
            simple mode (`jax.grad` over the arguments as pytrees: gradients shaped like
            them, all their inexact leaves differentiated, `wrt` unused), see `jit`.
        graph_updates: see `graph`.

    Returns:
        A function returning the gradients (and aux): for a graph-node argument a `State`
        of `VariableState`s shaped like `state(model, wrt)`; for arrays, arrays. Other
        state changed inside (batch statistics, rng counts) is written back.

    Example:
        >>> grads = grad(lambda model, x: model(x).sum())(model, x)   # doctest: +SKIP
        >>> grads.linear.kernel.value.shape                           # doctest: +SKIP
    """
    return _grad_transform(
        grad,
        f,
        with_value=False,
        argnums=argnums,
        has_aux=has_aux,
        wrt=wrt,
        holomorphic=holomorphic,
        allow_int=allow_int,
        graph=graph,
        graph_updates=graph_updates,
    )


def value_and_grad(
    f: F | None = None,
    /,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    *,
    wrt: Filter = Param,
    holomorphic: bool = False,
    allow_int: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """Like `grad`, returning `(loss, grads)`, or `((loss, aux), grads)` with `has_aux`.

    Example:
        >>> loss, grads = value_and_grad(loss_fn)(model, x, y)    # doctest: +SKIP
    """
    return _grad_transform(
        value_and_grad,
        f,
        with_value=True,
        argnums=argnums,
        has_aux=has_aux,
        wrt=wrt,
        holomorphic=holomorphic,
        allow_int=allow_int,
        graph=graph,
        graph_updates=graph_updates,
    )
