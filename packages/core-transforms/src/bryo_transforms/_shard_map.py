"""`shard_map`: `jax.shard_map` for functions of graph nodes, with `StateSharding` specs.

In graph mode the `in_specs` prefix is expanded per State leaf and array argument the
way `jit`'s `in_shardings` is (`_shardings.LeafOptions`): a `PartitionSpec` for a whole
node, or a `StateSharding({filter: spec, ...})` choosing by path and Variable. The
function sees each device's shard; every State leaf of the arguments comes back with
its in-spec (so the caller's Variables hold the sharded global arrays afterwards), and
outputs take `out_specs`. In simple mode (`graph_updates=False` or `graph=False`) it is
`jax.shard_map` over the arguments as pytrees (specs from `prefix`), with the values of
changed Variables written back. An unspecified leaf (None) is replicated (`P()`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Set
from typing import Any, TypeVar

import jax
from jax.sharding import PartitionSpec

from bryo_pytree import Path

from ._axes import prefix_per_leaf
from ._call import lifted_call
from ._collect import Grouping
from ._errors import TransformError
from ._layout import scan_args
from ._options import decorator_or_none
from ._plan import PlanCache
from ._shardings import LeafOptions, StateSharding
from ._simple import Inputs, graph_updates_on, simple_vmap, tree_mode

F = TypeVar("F", bound=Callable[..., Any])

_REPLICATED = PartitionSpec()


def _spec(spec: object) -> object:
    return _REPLICATED if spec is None else spec


def _is_spec_leaf(value: object) -> bool:
    return value is None or isinstance(value, PartitionSpec | StateSharding)


def _replicate_unspecified(specs: object) -> object:
    return jax.tree.map(_spec, specs, is_leaf=lambda x: x is None)


class _SpecGrouping(Grouping):
    """One output group per distinct spec: input leaves keep theirs (all come back),
    outputs take `out_specs`."""

    direct_ok = False

    def __init__(self, leaf_specs: list, out_specs: object) -> None:
        self.leaf_specs = leaf_specs
        self.out_specs = out_specs
        self.specs: list = []
        self.index: dict = {}
        # every group exists before tracing: the collector sizes its groups up front
        for spec in (None, *leaf_specs):
            self._group(spec)
        for leaf in jax.tree.leaves(out_specs, is_leaf=_is_spec_leaf):
            for spec in leaf.shardings if isinstance(leaf, StateSharding) else (leaf,):
                self._group(spec)

    def _group(self, spec: object) -> int:
        spec = _spec(spec)
        if spec not in self.index:
            self.index[spec] = len(self.specs)
            self.specs.append(spec)
        return self.index[spec]

    @property
    def n_groups(self) -> int:
        return len(self.specs)

    def input_group(self, k: int) -> int:
        return self._group(self.leaf_specs[k])

    def always_returned(self, k: int) -> bool:
        return True

    def new_input_group(self, root: int, path: Path, leaf: object) -> int:
        raise TransformError(
            f"`shard_map`: the function added a {type(leaf).__name__} at "
            f"{'/'.join(map(str, path))} to an argument; inside `shard_map` change values "
            "only. Create new attributes and Variables before calling it."
        )

    def output_group(self, spec: object, path: Path, leaf: object) -> int:
        if isinstance(spec, StateSharding):
            spec = spec.for_leaf(path, leaf)
        return self._group(spec)

    def output_specs(self, out: object, treedef: Any) -> list:
        return prefix_per_leaf(self.out_specs, treedef, _is_spec_leaf, "out_specs")


def _without_static(pure: Callable[..., tuple]) -> tuple[Callable[..., tuple], list]:
    """`pure` returning its last (static, leafless) output through a list instead: JAX's
    `shard_map` needs a spec for every output node."""
    static: list = []

    def two(*args: Any, **kwargs: Any) -> tuple:
        *values, last = pure(*args, **kwargs)
        static.append(last)
        return tuple(values)

    return two, static


def _jax_shard_map(mesh: Any, axis_names: Set[Any], check_vma: bool) -> Callable[..., Callable]:
    """A `map_fn` for `simple_vmap`: `jax.shard_map` with `in_axes`/`out_axes` as specs."""

    def map_fn(pure: Callable, *, in_axes: object, out_axes: tuple) -> Callable:
        two, static = _without_static(pure)
        options: dict[str, Any] = {"mesh": mesh, "check_vma": check_vma}
        if axis_names:
            options["axis_names"] = set(axis_names)
        in_specs = _replicate_unspecified(in_axes)
        out_specs = _replicate_unspecified(tuple(out_axes[:-1]))
        mapped = jax.shard_map(two, in_specs=in_specs, out_specs=out_specs, **options)

        def run(*args: Any, **kwargs: Any) -> tuple:
            return (*mapped(*args, **kwargs), static[-1])

        return run

    return map_fn


def shard_map(
    f: F | None = None,
    /,
    *,
    mesh: Any,
    in_specs: object,
    out_specs: object,
    axis_names: Set[Any] = frozenset(),
    check_vma: bool = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """`jax.shard_map` for functions of graph nodes: each device runs `f` on its shards.

    Args:
        f: the function (or use `@shard_map(mesh=..., in_specs=..., out_specs=...)`).
        mesh: the device mesh.
        in_specs: a spec for all positional arguments or a tuple with a prefix per
            argument: `PartitionSpec`s, None (replicated), and in graph mode a
            `StateSharding({filter: spec})` at a graph node.
        out_specs: a prefix of the output, as `in_specs`.
        axis_names: the mesh axes `f` is manual over (all by default), as for JAX.
        check_vma: as for `jax.shard_map`.
        graph: graph mode (default) or tree mode, see `jit`.
        graph_updates: graph mode with updates (default), or simple mode (`jax.shard_map`
            over the arguments as pytrees; specs from `prefix`).

    Returns:
        The sharded function. In graph mode every State leaf of the arguments comes back
        sharded by its in-spec into the caller's Variables.

    Example:
        >>> @shard_map(mesh=mesh, in_specs=(StateSharding({...: P("data")}), P("data")),
        ...            out_specs=P("data"))                               # doctest: +SKIP
        ... def forward(model, x):
        ...     return model(x)
    """
    partial = decorator_or_none(
        shard_map,
        f,
        mesh=mesh,
        in_specs=in_specs,
        out_specs=out_specs,
        axis_names=axis_names,
        check_vma=check_vma,
        graph=graph,
        graph_updates=graph_updates,
    )
    if partial is not None:
        return partial
    assert f is not None
    map_fn = _jax_shard_map(mesh, axis_names, check_vma)
    if not graph_updates_on(graph, graph_updates):
        inputs = Inputs("shard_map", tree_mode(graph))
        return simple_vmap(f, inputs, in_specs, {"out_axes": out_specs}, map_fn, "in_specs")  # type: ignore[return-value]  # the mapped function takes f's arguments
    cache = PlanCache(size=16)

    @functools.wraps(f)
    def sharded(*args: Any, **kwargs: Any) -> Any:
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        options = LeafOptions.of(
            plan, args, kwargs, in_specs, lambda _: False, frozenset(), "in_specs"
        )
        var_specs = iter(options.var_shardings)
        raw_specs = iter(options.raw_shardings)
        leaf_specs = [next(raw_specs if m is None else var_specs) for m in plan.sig.metas]
        grouping = _SpecGrouping(leaf_specs, out_specs)

        def transform(pure: Callable) -> Callable:
            n_groups = grouping.n_groups

            def run(var_values: list, raw_values: list, array_values: list) -> tuple:
                in_axes = (options.var_shardings, options.raw_shardings, options.array_shardings)
                group_specs = [grouping.specs[g] for g in range(n_groups)]
                mapped = map_fn(pure, in_axes=in_axes, out_axes=(group_specs, None, None))
                return mapped(var_values, raw_values, array_values)

            return run

        return lifted_call(plan, arrays, transform, f, grouping)

    sharded.__wrapped__ = f
    return sharded  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)
