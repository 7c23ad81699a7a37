"""JAX transforms over graph nodes: `jit`, `vmap`, `grad`, `value_and_grad`, `remat`.

They take modules of every backend (and `Rngs`, Variables, containers of them) in and
out, as Flax NNX's transforms do: state changed inside (Variable values, rng counts,
batch statistics, new attributes and Variables) is written back into the caller's
objects, references shared across arguments stay shared, and modules returned are the
caller's own objects when they existed before the call. `StateAxes` maps filters to axes
(`StateAxes({(Param, 'dropout'): 0, ...: None})`) for the parts of a module's state;
`Carry` marks the scan carry (the graph-level `scan` lives in `bryo_scan`).

    >>> @jit
    ... def step(model, x):
    ...     model.count.value += 1
    ...     return model(x)

Each call of a jitted function reads the model's Variables through a cached plan (the
model's flattening is cached while its structure does not change) and calls one cached
`jax.jit` of a pure function of flat arrays; only the Variables that changed are written.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

from bryo_filters import Filter, filters_to_predicates
from bryo_pytree import Path

from ._graph import GraphError
from ._state import State
from ._transforms_axes import (
    AxisGrouping,
    Carry,
    StateAxes,
    arg_specs,
    check_axis,
    check_sizes,
    leaf_axes,
    sorted_axes,
)
from ._transforms_lift import (
    ARRAY,
    ROOT,
    CallPlan,
    Grouping,
    PlanCache,
    Signature,
    Static,
    TransformError,
    apply,
    collect,
    join_leaves,
    lifted_call,
    rebuild,
    scan_args,
)
from ._variables import Param, Variable, VariableState

F = TypeVar("F", bound=Callable[..., Any])

_raw_value = operator.attrgetter("raw_value")
_JIT_UNSUPPORTED = frozenset(
    {"in_shardings", "out_shardings", "donate_argnums", "donate_argnames", "abstracted_axes"}
)


def _argnums(argnums: int | Sequence[int], name: str = "argnums") -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not all(isinstance(n, int) for n in nums):
        raise TypeError(f"`{name}` must be an int or a sequence of ints; got {argnums!r}.")
    return nums


def _statics(
    args: Sequence, static_argnums: tuple[int, ...], static_argnames: tuple[str, ...]
) -> frozenset:
    if not static_argnums and not static_argnames:
        return frozenset()
    n = len(args)
    positions = frozenset(i % n if n and i < 0 else i for i in static_argnums)
    return positions | frozenset(static_argnames)


def _decorator(transform: Callable, f: Callable | None, **options: Any) -> Any:
    if f is None:
        return functools.partial(transform, **options)
    if not callable(f):
        raise TypeError(
            f"`{transform.__name__}` takes the function first; got {type(f).__name__}. Pass "
            f"options by keyword: `@{transform.__name__}(static_argnums=...)`."
        )
    return None


# jit --------------------------------------------------------------------------------------


def jit(
    f: F | None = None,
    /,
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    **jit_kwargs: Any,
) -> F:
    """`jax.jit` for functions of graph nodes; state changed inside is written back.

    Graph nodes (modules of any backend, `Rngs`, Variables) may sit anywhere in the
    arguments and the output. Arrays and Python numbers are traced, other values are
    static. The compiled function is cached per graph structure and static arguments.

    Args:
        f: the function (or use `@jit(...)` with options).
        static_argnums, static_argnames: arguments that are static (hashable) values.
        **jit_kwargs: passed on to `jax.jit` (`keep_unused`, `device`, `backend`,
            `inline`, `compiler_options`).

    Returns:
        The jitted function.

    Example:
        >>> @jit
        ... def forward(model, x):
        ...     return model(x)
    """
    partial = _decorator(
        jit, f, static_argnums=static_argnums, static_argnames=static_argnames, **jit_kwargs
    )
    if partial is not None:
        return partial
    assert f is not None
    unsupported = sorted(set(jit_kwargs) & _JIT_UNSUPPORTED)
    if unsupported:
        raise TypeError(
            f"`jit` of graph nodes does not take {', '.join(map(repr, unsupported))}: the "
            "compiled function sees flat lists of the models' arrays, not your arguments. "
            "Shard the arrays themselves (`jax.device_put`) before the call instead."
        )
    argnums = _argnums(static_argnums, "static_argnums")
    argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    cache = PlanCache()
    compiled: dict[Signature, Callable] = {}
    grouping = Grouping()

    def compile_for(sig: Signature) -> Callable:
        def pure(var_values: list, raw_values: list, arrays: list) -> tuple:
            args, kwargs, inner = rebuild(sig, join_leaves(sig, var_values, raw_values), arrays)
            groups, direct, out_plan = collect(inner, f(*args, **kwargs), grouping)
            return groups, direct, Static(out_plan)

        fn = compiled[sig] = jax.jit(pure, **jit_kwargs)
        return fn

    @functools.wraps(f)
    def jitted(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs, _statics(args, argnums, argnames))
        plan = cache.plan(key, roots)
        fn = compiled.get(plan.sig) or compile_for(plan.sig)
        groups, direct, static = fn(list(map(_raw_value, plan.variables)), plan.raw_values, arrays)
        out_plan = static.value
        if out_plan.graph is None and out_plan.out is None and not out_plan.set_consts:
            write = plan.write
            group = groups[0]
            for k, _, position in out_plan.sets:
                write(k, group[position])
            return direct
        return apply(plan, out_plan, groups, direct)

    jitted.__wrapped__ = f  # type: ignore[attr-defined]
    return jitted  # type: ignore[return-value]


# vmap -------------------------------------------------------------------------------------


def vmap(
    f: F | None = None,
    /,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
) -> F:
    """`jax.vmap` for functions of graph nodes, with `StateAxes` for their state.

    Args:
        f: the function (or use `@vmap(in_axes=..., out_axes=...)`).
        in_axes: an axis for all positional arguments, or a tuple with a prefix per
            argument: an int, None (broadcast), or for graph nodes a `StateAxes`
            (`StateAxes({'dropout': 0, ...: None})`). Keyword arguments use axis 0.
        out_axes: a prefix of the output: ints, None or `StateAxes` for returned nodes.
        axis_name, axis_size, spmd_axis_name: as for `jax.vmap`.

    Returns:
        The vectorized function. State changed inside comes back with the axis it went
        in with: a broadcast (None) Variable may only be given unbatched values.

    Example:
        >>> @vmap(in_axes=(StateAxes({'dropout': 0, ...: None}), None))
        ... def sample(model, x):
        ...     return model(x)
    """
    partial = _decorator(
        vmap,
        f,
        in_axes=in_axes,
        out_axes=out_axes,
        axis_name=axis_name,
        axis_size=axis_size,
        spmd_axis_name=spmd_axis_name,
    )
    if partial is not None:
        return partial
    assert f is not None
    cache = PlanCache(size=16)

    @functools.wraps(f)
    def mapped(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        root_specs, array_specs = arg_specs(plan.sig, in_axes)
        axes = leaf_axes(plan, root_specs)
        sizes = [
            (size, plan.sig.describe_leaf(k))
            for k, (value, axis) in enumerate(zip(plan.leaf_values(), axes, strict=False))
            if (size := check_axis(value, axis, plan.sig.describe_leaf(k), "in_axes")) is not None
        ]
        sizes += [
            (size, f"the array argument #{i} (shape {tuple(np.shape(value))})")
            for i, (value, axis) in enumerate(zip(arrays, array_specs, strict=False))
            if (size := check_axis(value, axis, f"array argument #{i}", "in_axes")) is not None
        ]
        check_sizes(sizes, "in_axes", axis_size)
        for axis in (*axes, *array_specs):
            if axis is Carry:
                raise TransformError("`in_axes` of `vmap` cannot hold `Carry` (it is for `scan`).")
        group_axes = sorted_axes([*axes, *root_specs, out_axes])
        grouping = AxisGrouping(axes, root_specs, out_axes, group_axes)
        var_axes = [a for a, meta in zip(axes, plan.sig.metas, strict=False) if meta is not None]
        raw_axes = [a for a, meta in zip(axes, plan.sig.metas, strict=False) if meta is None]

        def transform(pure: Callable) -> Callable:
            return jax.vmap(
                pure,
                in_axes=(var_axes, raw_axes, list(array_specs)),
                out_axes=(list(group_axes), None, None),
                axis_name=axis_name,
                axis_size=axis_size,
                spmd_axis_name=spmd_axis_name,
            )

        try:
            return lifted_call(plan, arrays, transform, f, grouping)
        except ValueError as error:
            text = str(error)
            if "out_axes" in text and "None" in text and not isinstance(error, TransformError):
                raise TransformError(
                    "`vmap`: a value that leaves the function unmapped (out_axes None, or "
                    "state broadcast with in_axes None) depends on the mapped inputs. Map "
                    "that state (e.g. `StateAxes({'dropout': 0, ...: None})`) or give it an "
                    f"int out axis. JAX said: {error}"
                ) from error
            raise

    mapped.__wrapped__ = f  # type: ignore[attr-defined]
    return mapped  # type: ignore[return-value]


# grad and value_and_grad ------------------------------------------------------------------


def _diff_leaves(plan: CallPlan, argnums: tuple[int, ...], wrt: Filter) -> tuple[list, dict]:
    """State leaves to differentiate, and per root of a differentiated argument its
    `[(path, k)]` (paths relative to that root)."""
    from ._graph import _flatten

    (predicate,) = filters_to_predicates((wrt,))
    by_var = {id(s.variable): k for k, s in enumerate(plan.sources) if s.variable is not None}
    by_slot = {(id(s.parent), s.key): k for k, s in enumerate(plan.sources) if s.variable is None}
    roots = plan.pair[0]
    chosen: set[int] = set()
    per_root: dict[int, list[tuple[Path, int]]] = {}
    for j, (place, _) in enumerate(plan.sig.root_places):
        if _arg_index(place) not in argnums:
            continue
        root = roots[j]
        if isinstance(root, Variable):
            entries = [((), root, by_var[id(root)])]
        else:
            flat = _flatten(root)
            entries = [
                (path, s.variable, by_var[id(s.variable)])
                if s.variable is not None
                else (path, VariableState(s.leaf_type, s.value), by_slot[(id(s.parent), s.key)])
                for path, s in zip(flat.paths, flat.sources, strict=True)
            ]
        per_root[j] = [(path, k) for path, leaf, k in entries if predicate(path, leaf)]
        chosen.update(k for _, k in per_root[j])
    return sorted(chosen), per_root


def _arg_index(place: str) -> int | str:
    if place.startswith("args["):
        return int(place[5:-1])
    return place


def _array_places(sig: Signature) -> list[int | str]:
    places: list[int | str] = []
    named = [(i, layout) for i, layout in enumerate(sig.layouts)]
    named += [(f"kwargs[{kw!r}]", layout) for kw, layout in sig.kw_layouts]
    for where, layout in named:
        if layout is ARRAY:
            places.append(where)
        elif isinstance(layout, tuple) and layout[0] == "tree":
            places.extend(where for k in layout[2] if k is ARRAY)
    return places


def _grad_state(plan: CallPlan, entries: list[tuple[Path, int]], grads: dict[int, Any]) -> Any:
    flat = {}
    for path, k in entries:
        meta = plan.sig.metas[k]
        leaf_type = meta.type if meta is not None else plan.sources[k].leaf_type
        metadata = meta.metadata if meta is not None else {}
        flat[path] = VariableState(leaf_type, grads[k], **metadata)
    if list(flat) == [()]:
        return flat[()]
    return State._from_flat(flat)


def _assemble_grads(
    plan: CallPlan, argnums: tuple[int, ...], per_root: dict, leaf_grads: dict, array_grads: list
) -> tuple:
    sig = plan.sig
    roots_it = iter(range(len(sig.root_places)))
    arrays_it = iter(array_grads)
    out = []
    for i, layout in enumerate(sig.layouts):

        def root_grad() -> Any:
            return _grad_state(plan, per_root.get(next(roots_it), []), leaf_grads)

        if layout is ROOT:
            value = root_grad()
        elif layout is ARRAY:
            value = next(arrays_it)
        elif layout[0] == "static":
            value = None
        else:
            _, treedef, kinds = layout
            value = treedef.unflatten(
                [
                    root_grad() if k is ROOT else next(arrays_it) if k is ARRAY else None
                    for k in kinds
                ]
            )
        if i in argnums:
            out.append(value)
    return tuple(out)


def _grad_core(
    f: Callable, argnums: int | Sequence[int], has_aux: bool, wrt: Filter, jax_kwargs: dict
) -> Callable:
    nums = _argnums(argnums)
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
        diff_ks, per_root = _diff_leaves(plan, nums, wrt)
        places = _array_places(sig)
        diff_arrays = [i for i, place in enumerate(places) if place in nums]
        leaves = plan.leaf_values()
        diff_values = [leaves[k] for k in diff_ks] + [arrays[i] for i in diff_arrays]
        rest_leaves = list(leaves)
        for k in diff_ks:
            rest_leaves[k] = None
        rest_arrays = list(arrays)
        for i in diff_arrays:
            rest_arrays[i] = None
        grouping = Grouping()

        def pure(diff: list, rest_leaves: list, rest_arrays: list) -> tuple:
            all_leaves, all_arrays = list(rest_leaves), list(rest_arrays)
            for k, value in zip(diff_ks, diff[: len(diff_ks)], strict=False):
                all_leaves[k] = value
            for i, value in zip(diff_arrays, diff[len(diff_ks) :], strict=False):
                all_arrays[i] = value
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

        (loss, (groups, direct, static)), grads = jax.value_and_grad(
            pure, has_aux=True, **jax_kwargs
        )(diff_values, rest_leaves, rest_arrays)
        aux = apply(plan, static.value, groups, direct)
        leaf_grads = dict(zip(diff_ks, grads[: len(diff_ks)], strict=False))
        array_grads = list(arrays)
        for i, g in zip(diff_arrays, grads[len(diff_ks) :], strict=False):
            array_grads[i] = g
        per_arg = _assemble_grads(plan, nums, per_root, leaf_grads, array_grads)
        by_num = dict(zip(sorted(set(nums)), per_arg, strict=False))
        result = by_num[argnums] if isinstance(argnums, int) else tuple(by_num[n] for n in nums)
        return loss, aux, result

    return run


def grad(
    f: F | None = None,
    /,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    wrt: Filter = Param,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., Any]:
    """`jax.grad` for functions of graph nodes: gradients w.r.t. their `wrt` state.

    Args:
        f: a function returning a scalar loss (or `(loss, aux)` with `has_aux`).
        argnums: which positional argument(s) to differentiate.
        has_aux: `f` returns `(loss, aux)`; aux may hold graph nodes.
        wrt: the filter selecting, in graph-node arguments, the state to differentiate
            (Params by default). Array arguments are differentiated whole.
        holomorphic, allow_int: as for `jax.grad`.

    Returns:
        A function returning the gradients (and aux): for a graph-node argument a `State`
        of `VariableState`s shaped like `state(model, wrt)`; for arrays, arrays. Other
        state changed inside (batch statistics, rng counts) is written back.

    Example:
        >>> grads = grad(lambda model, x: model(x).sum())(model, x)   # doctest: +SKIP
        >>> grads['linear']['kernel'].value.shape                     # doctest: +SKIP
    """
    partial = _decorator(
        grad,
        f,
        argnums=argnums,
        has_aux=has_aux,
        wrt=wrt,
        holomorphic=holomorphic,
        allow_int=allow_int,
    )
    if partial is not None:
        return partial
    assert f is not None
    run = _grad_core(f, argnums, has_aux, wrt, {"holomorphic": holomorphic, "allow_int": allow_int})

    @functools.wraps(f)
    def grad_f(*args: Any, **kwargs: Any) -> Any:
        _, aux, grads = run(*args, **kwargs)
        return (grads, aux) if has_aux else grads

    return grad_f


def value_and_grad(
    f: F | None = None,
    /,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    wrt: Filter = Param,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., Any]:
    """Like `grad`, returning `(loss, grads)`, or `((loss, aux), grads)` with `has_aux`.

    Example:
        >>> loss, grads = value_and_grad(loss_fn)(model, x, y)    # doctest: +SKIP
    """
    partial = _decorator(
        value_and_grad,
        f,
        argnums=argnums,
        has_aux=has_aux,
        wrt=wrt,
        holomorphic=holomorphic,
        allow_int=allow_int,
    )
    if partial is not None:
        return partial
    assert f is not None
    run = _grad_core(f, argnums, has_aux, wrt, {"holomorphic": holomorphic, "allow_int": allow_int})

    @functools.wraps(f)
    def value_and_grad_f(*args: Any, **kwargs: Any) -> Any:
        loss, aux, grads = run(*args, **kwargs)
        return ((loss, aux), grads) if has_aux else (loss, grads)

    return value_and_grad_f


# remat ------------------------------------------------------------------------------------


def remat(
    f: F | None = None,
    /,
    *,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
    policy: Callable[..., bool] | None = None,
) -> F:
    """`jax.checkpoint` for functions of graph nodes: recompute `f` in the backward pass.

    Args:
        f: the function (or use `@remat(policy=...)`).
        prevent_cse, policy: as for `jax.checkpoint` (`jax.checkpoint_policies.*`).
        static_argnums: arguments that are static values.

    Returns:
        The checkpointed function; state changed inside is written back.
    """
    partial = _decorator(
        remat, f, prevent_cse=prevent_cse, static_argnums=static_argnums, policy=policy
    )
    if partial is not None:
        return partial
    assert f is not None
    argnums = _argnums(static_argnums, "static_argnums")
    cache = PlanCache(size=16)

    @functools.wraps(f)
    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs, _statics(args, argnums, ()))
        plan = cache.plan(key, roots)

        def transform(pure: Callable) -> Callable:
            return jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)

        return lifted_call(plan, arrays, transform, f, Grouping())

    return checkpointed  # type: ignore[return-value]


__all__ = [
    "Carry",
    "GraphError",
    "StateAxes",
    "TransformError",
    "grad",
    "jit",
    "remat",
    "value_and_grad",
    "vmap",
]
