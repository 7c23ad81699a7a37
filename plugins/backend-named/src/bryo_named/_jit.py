"""`named_jit`: Haliax's jit for functions of NamedArrays and other Python values.

Arrays (and the arrays inside NamedArrays) are traced; every other leaf of the arguments
(Python numbers, axes, strings, functions) is static, part of the compilation key, as in
Haliax and `equinox.filter_jit`. Axis resources (axis name -> mesh axis) shard the inputs
and the result by their axis names through this package's `shard`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

from bryo_pytree import is_array

from ._axis import AxisError
from ._sharding import AxisMapping, shard


class _Static(NamedTuple):
    """The non-array leaves of a tree, by position, with the tree's structure."""

    treedef: Any
    leaves: tuple[tuple[int, Any], ...]


def _partition(tree: Any, what: str) -> tuple[list[Any], _Static]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    arrays = [leaf for leaf in leaves if is_array(leaf)]
    static = tuple((i, leaf) for i, leaf in enumerate(leaves) if not is_array(leaf))
    for i, leaf in static:
        try:
            hash(leaf)
        except TypeError:
            raise TypeError(
                f"`named_jit`: {what} holds an unhashable {type(leaf).__name__} ({leaf!r:.60}) "
                f"at leaf {i}; non-array values are static (part of the compilation key) and "
                "must be hashable. Pass it as an array, or make it a pytree of arrays."
            ) from None
    return arrays, _Static(treedef, static)


def _combine(arrays: list[Any], static: _Static) -> Any:
    fixed = dict(static.leaves)
    array_iter = iter(arrays)
    count = len(arrays) + len(fixed)
    leaves = [fixed[i] if i in fixed else next(array_iter) for i in range(count)]
    return jax.tree_util.tree_unflatten(static.treedef, leaves)


def _donation_mask(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], donate_args: Any, donate_kwargs: Any
) -> tuple[tuple[bool, ...], dict[str, bool]]:
    if donate_args is None or isinstance(donate_args, bool):
        positional = (bool(donate_args),) * len(args)
    elif isinstance(donate_args, tuple | list) and all(isinstance(d, bool) for d in donate_args):
        if len(donate_args) > len(args):
            raise TypeError(
                f"`donate_args` has {len(donate_args)} entries for {len(args)} positional "
                "arguments; give one bool per argument (missing ones are not donated)."
            )
        positional = tuple(donate_args) + (False,) * (len(args) - len(donate_args))
    else:
        raise TypeError(
            f"`donate_args` must be a bool or a tuple of bools, one per positional argument; "
            f"got {donate_args!r}."
        )
    donate_kwargs = donate_kwargs or {}
    if not isinstance(donate_kwargs, Mapping) or not all(
        isinstance(d, bool) for d in donate_kwargs.values()
    ):
        raise TypeError(f"`donate_kwargs` must map keyword names to bools; got {donate_kwargs!r}.")
    return positional, {name: donate_kwargs.get(name, False) for name in kwargs}


def _current_mesh() -> Any:
    get_abstract_mesh = getattr(jax.sharding, "get_abstract_mesh", None)
    mesh = get_abstract_mesh() if get_abstract_mesh is not None else None
    if mesh is None or getattr(mesh, "empty", False) or not getattr(mesh, "axis_names", ()):
        return None
    return mesh


def named_jit(
    fn: Callable[..., Any] | None = None,
    axis_resources: AxisMapping | None = None,
    *,
    in_axis_resources: AxisMapping | None = None,
    out_axis_resources: AxisMapping | None = None,
    donate_args: Any = None,
    donate_kwargs: Mapping[str, bool] | None = None,
    mesh: Any = None,
    **jit_kwargs: Any,
) -> Any:
    """`jax.jit` for functions of NamedArrays, with Haliax's signature.

    Args:
        fn: the function (or use `@named_jit(...)` as a decorator factory).
        axis_resources: axis name -> mesh axis; the default for `out_axis_resources`.
        in_axis_resources: shards the arguments' NamedArrays by their axis names.
        out_axis_resources: shards the result's NamedArrays (defaults to `axis_resources`).
        donate_args: a bool, or one bool per positional argument: donate its arrays.
        donate_kwargs: keyword name -> bool, the same for keyword arguments.
        mesh: the mesh the resources refer to (bryo's addition); by default the current
            one (`jax.set_mesh` / `jax.sharding.use_mesh`).
        **jit_kwargs: passed to `jax.jit` (`keep_unused`, `backend`, `inline`, ...).

    Arrays are traced; every other argument leaf (a Python float, an `Axis`) is static
    and must be hashable. The result may hold non-array values too.

    Example:
        >>> from bryo_named import NamedArray
        >>> f = named_jit(lambda x, scale: x * scale)
        >>> f(NamedArray(jnp.ones(2), {"B": 2}), 3.0).array.tolist()
        [3.0, 3.0]
    """
    if fn is None:
        return functools.partial(
            named_jit,
            axis_resources=axis_resources,
            in_axis_resources=in_axis_resources,
            out_axis_resources=out_axis_resources,
            donate_args=donate_args,
            donate_kwargs=donate_kwargs,
            mesh=mesh,
            **jit_kwargs,
        )
    out_resources = out_axis_resources if out_axis_resources is not None else axis_resources

    # The result's static part, per compilation key and argument shapes: recorded while
    # tracing (this wrapper's own table, so it lives no longer than the wrapper).
    results: dict[Any, _Static] = {}

    def run(donated: list[Any], kept: list[Any], static: tuple[_Static, tuple[bool, ...]]):
        spec, mask = static
        donated_iter, kept_iter = iter(donated), iter(kept)
        arrays = [next(donated_iter) if d else next(kept_iter) for d in mask]
        fn_, args, kwargs = _combine(arrays, spec)
        if in_axis_resources is not None:
            args, kwargs = shard((args, kwargs), in_axis_resources, _resolve_mesh(mesh))
        out = fn_(*args, **kwargs)
        if out_resources is not None:
            out = shard(out, out_resources, _resolve_mesh(mesh))
        out_arrays, results[static, _avals(arrays)] = _partition(out, "the result")
        return out_arrays

    jitted = jax.jit(run, static_argnums=(2,), donate_argnums=(0,), **jit_kwargs)

    def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Prepared:
        positional, named = _donation_mask(args, kwargs, donate_args, donate_kwargs)
        mask = [False] * _count_arrays(fn)
        for i, arg in enumerate(args):
            mask += [positional[i]] * _count_arrays(arg)
        for name in sorted(kwargs):  # a dict's leaves come in sorted key order
            mask += [named[name]] * _count_arrays(kwargs[name])
        arrays, spec = _partition((fn, args, kwargs), "an argument")
        donated = [a for a, d in zip(arrays, mask, strict=True) if d]
        kept = [a for a, d in zip(arrays, mask, strict=True) if not d]
        return _Prepared(donated, kept, (spec, tuple(mask)), _avals(arrays))

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        ready = prepare(args, kwargs)
        out_arrays = jitted(ready.donated, ready.kept, ready.key)
        return _combine(out_arrays, results[ready.key, ready.avals])

    def lower(*args: Any, **kwargs: Any) -> Any:
        """`jax.jit(...).lower` of the call with these arguments."""
        ready = prepare(args, kwargs)
        return jitted.lower(ready.donated, ready.kept, ready.key)

    call.lower = lower  # type: ignore[attr-defined]  # as Haliax's wrapper has
    return call


class _Prepared(NamedTuple):
    donated: list[Any]
    kept: list[Any]
    key: tuple[_Static, tuple[bool, ...]]
    avals: tuple[tuple[tuple[int, ...], str], ...]


def _count_arrays(tree: Any) -> int:
    return sum(1 for leaf in jax.tree_util.tree_leaves(tree) if is_array(leaf))


def _avals(arrays: list[Any]) -> tuple[tuple[tuple[int, ...], str], ...]:
    return tuple((tuple(a.shape), str(a.dtype)) for a in arrays)


def _resolve_mesh(mesh: Any) -> Any:
    found = mesh if mesh is not None else _current_mesh()
    if found is None:
        raise AxisError(
            "`named_jit` was given axis resources but there is no mesh to map them onto: pass "
            "`mesh=` or call it under `jax.set_mesh(mesh)` (`jax.sharding.use_mesh`)."
        )
    return found
