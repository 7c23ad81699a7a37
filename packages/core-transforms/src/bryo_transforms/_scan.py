"""`scan`: the graph-level scan (Flax NNX's `nnx.scan`) over functions of graph nodes.

`scan(f, in_axes=(Carry, 0), out_axes=(Carry, 0))` scans a function of graph
nodes: each argument is the carry (`Carry`), scanned over an axis (an int), or broadcast
(None); a module's state can be divided with `StateAxes({'recurrent_dropout': None,
...: Carry})`. It runs on core-scan's array-level engine (the same one `scan`/`fold` and
`Stacked` use), so checkpoint policies (`remat=`) apply here too. State that changes
inside is written back: the carry's final value, scanned state stacked back on its axis,
and broadcast state with its value after the last step (an rng stream broadcast so that
every step draws the same mask still moves on by one draw per call). In simple mode
(`graph_updates=False`), as in Flax NNX, broadcast Variables are threaded like the carry:
each step sees what the step before left. Outputs are always stacked (`out_axes=None` is
refused), and the carry keeps its structure: a new Variable put in place of a carried one
is carried in its place (graph mode with updates), a carried attribute deleted is an error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple, TypeVar

import jax
import jax.core
import jax.numpy as jnp

from bryo_graph import Variable, check_tree
from bryo_pytree import BoundedCache, is_array_like
from bryo_scan import Remat, ScanCheckpointPolicy, checkpointed_scan

from ._apply import apply
from ._axes import (
    Carry,
    StateAxes,
    arg_specs,
    check_axis,
    check_consistent_aliasing,
    check_sizes,
    filter_repr,
    is_axis_leaf,
    is_int,
    leaf_axes,
    prefix_per_leaf,
    sorted_axes,
    state_leaf,
)
from ._axis_metadata import with_axis_metadata
from ._collect import Grouping, InGroup, InTree, KeptLeaf, NewLeaf, OutPlan, collect
from ._errors import TransformError
from ._layout import ArgLayout, is_graph_leaf, scan_args
from ._options import positional, refuse_bound_method
from ._plan import CallPlan, PairPath, PlanCache
from ._prefixes import check_prefix, tree_state_prefixes
from ._rebuild import Inner, rebuild
from ._simple import check_no_aliases, graph_updates_on, tree_mode, variables_of

F = TypeVar("F", bound=Callable[..., Any])

try:  # JAX 0.8+
    from jax.extend.core import get_opaque_trace_state
except ImportError:  # JAX 0.7
    from jax.core import get_opaque_trace_state  # type: ignore[attr-defined,no-redef]  # moved in 0.8

_EAGER = get_opaque_trace_state()  # modules are imported eagerly


class _ScanGrouping(Grouping):
    """Group 0 is the carry; every other group is stacked, one per output axis."""

    direct_ok = False

    def __init__(self, scan: _Scan, axes: list) -> None:
        self.scan = scan
        self.leaf_axes = scan.leaf_axes
        self.axes = axes
        self.root_specs = scan.root_specs
        self.index = {axis: i for i, axis in enumerate(axes)}
        self.n_groups = len(axes)
        self.y_axes: object = None
        self.replaced: list[int] = []  # carried leaves replaced by a new Variable, in order

    def input_group(self, k: int) -> int:
        return self.index[self.leaf_axes[k]]

    def new_input_group(self, root: int, path: tuple, leaf: object) -> int:
        """A Variable the body adds to an argument is stacked along the int axis its
        argument's `StateAxes` gives it (as `sow` does); one replacing a carried Variable
        is carried in its place; other new carried or broadcast state is refused."""
        k = self.scan.leaf_at(root, path)
        if k is not None and self.leaf_axes[k] is Carry:
            self.scan.check_replacement(k, leaf)
            self.replaced.append(k)
            return 0
        spec = self.root_specs[root]
        try:
            axis = spec.axis_of(path, leaf) if isinstance(spec, StateAxes) else spec
        except LookupError:
            raise TransformError(
                f"`scan`: the scanned function added a {type(leaf).__name__} at "
                f"{'/'.join(map(str, path))} to an argument whose `in_axes` ({spec!r}) have no "
                "filter for it (an `nnx.prefix` lists the paths that existed before the scan); "
                "new state can only be stacked: give that argument a StateAxes with a filter "
                "for it, e.g. `StateAxes({Intermediate: 0, ...: None})`, or create it before "
                "the scan."
            ) from None
        if isinstance(axis, int) and axis in self.index:
            return self.index[axis]
        raise TransformError(
            f"`scan`: the scanned function added a {type(leaf).__name__} at "
            f"{'/'.join(map(str, path))} to an argument whose `in_axes` give it "
            f"{'Carry' if axis is Carry else repr(axis)}; new state can only be stacked (an "
            "int axis, e.g. `StateAxes({Intermediate: 0, ...: Carry})`). Create it before "
            "the scan, or give it an int axis."
        )

    def output_group(self, spec: object, path: tuple, leaf: object) -> int:
        if isinstance(spec, StateAxes):
            try:
                spec = spec.axis_of(path, leaf)
            except LookupError:
                raise TransformError(
                    f"`out_axes`: {spec!r} has no filter for the {type(leaf).__name__} at "
                    f"{'/'.join(map(str, path))}; end it with `...: 0`."
                ) from None
        if spec is Carry:
            raise TransformError("`out_axes` may hold `Carry` only at the top level.")
        return self.index[spec]

    def output_specs(self, out: object, treedef: Any) -> list:
        return prefix_per_leaf(self.y_axes, treedef, is_axis_leaf, "out_axes")


def _carry_position(out_axes: object) -> object:
    """'all', an index into the output tuple, or None (no carry in the output)."""
    if out_axes is Carry:
        return "all"
    if isinstance(out_axes, tuple):
        found = [i for i, axes in enumerate(out_axes) if axes is Carry]
        if len(found) > 1:
            raise TransformError("`out_axes` may hold `Carry` once.")
        return found[0] if found else None
    return None


def _check_out_axes(out_axes: object) -> None:
    """Raise if `out_axes` broadcasts an output (None) or carries part of a node's state
    (`StateAxes({...: Carry})`): every output of a step is stacked (as in Flax NNX)."""
    for keypath, axes in jax.tree_util.tree_leaves_with_path(out_axes, is_leaf=is_axis_leaf):
        where = "out_axes" + jax.tree_util.keystr(keypath)
        if axes is None:
            raise TransformError(
                f"Cannot broadcast output state. Got out_axes=None at: {where}. Every step's "
                "outputs are stacked along an int axis: return a value computed once from "
                "outside the scan, or thread a changing one through the carry."
            )
        if isinstance(axes, StateAxes):
            for filter, axis in axes.items():
                if axis is None or axis is Carry:
                    verb = "broadcast" if axis is None else "carry"
                    raise TransformError(
                        f"Cannot {verb} output state. Got {axes!r} at: {where} (for the "
                        f"filter {filter_repr(filter)}). Give every filter of an output's "
                        "StateAxes an int axis; carried state comes back through the carry "
                        "argument."
                    )


def _check_carry_in_both(in_axes: object, out_axes: object, position: object) -> None:
    """Raise unless `in_axes` has one top-level `Carry` exactly when `out_axes` has one."""
    n_carry = sum(a is Carry for a in in_axes) if isinstance(in_axes, tuple | list) else 0
    if n_carry > 1:
        raise TransformError(
            f"Found multiple Carry definitions in in_axes={in_axes!r}: one argument is the "
            "carry. Put the carried values in one argument (a tuple or a module)."
        )
    if (in_axes is Carry or n_carry == 1) != (position is not None):
        raise TransformError(
            "If one of in_axes or out_axes has Carry, the other must also have Carry: the "
            f"carry goes in and comes out of every step. Got in_axes={in_axes!r}, "
            f"out_axes={out_axes!r}."
        )


def _split_output(out: object, position: object, out_axes: object) -> tuple[object, object, object]:
    """`(carry, ys, ys' axes)` of the function's output."""
    if position == "all":
        return out, None, None
    if position is None:
        return None, out, out_axes
    if not isinstance(out, tuple) or len(out) != len(out_axes):  # type: ignore[arg-type]  # out_axes is a tuple when the carry is at `position`
        raise TransformError(
            f"`out_axes` {out_axes!r} says the function returns a tuple of "
            f"{len(out_axes)} with the carry at {position}; it returned "  # type: ignore[arg-type]  # out_axes is a tuple when the carry is at `position`
            f"{type(out).__name__}{'' if not isinstance(out, tuple) else f' of {len(out)}'}."
        )
    rest = tuple(o for i, o in enumerate(out) if i != position)
    rest_axes = tuple(a for i, a in enumerate(out_axes) if i != position)  # type: ignore[arg-type]  # out_axes is a tuple when the carry is at `position`
    if len(rest) == 1:
        return out[position], rest[0], rest_axes[0]  # type: ignore[index]  # position is an int index into the output tuple
    return out[position], rest, rest_axes  # type: ignore[index]  # position is an int index into the output tuple


def _join_output(carry: object, ys: object, position: object, out_axes: object) -> object:
    if position == "all":
        return carry
    if position is None:
        return ys
    rest = [ys] if len(out_axes) == 2 else list(ys)  # type: ignore[arg-type]  # out_axes is a tuple when the carry is at `position`
    rest.insert(position, carry)  # type: ignore[arg-type]  # position is an int index into the output tuple
    return tuple(rest)


def scan(
    f: F | None = None,
    /,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    in_axes: object = (Carry, 0),
    out_axes: object = (Carry, 0),
    remat: Remat = False,
    transform_metadata: Mapping[str, object] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """`jax.lax.scan` for functions of graph nodes (Flax NNX's `nnx.scan`).

    Args:
        f: the function to scan (or use `@scan(in_axes=..., out_axes=...)`).
        length: the number of steps (needed when nothing is scanned over).
        reverse: run from the last step to the first (outputs stay in order).
        unroll: `jax.lax.scan`'s unroll.
        in_axes: one entry per positional argument: `Carry` (the argument is the carry),
            an int (scanned over that axis), None (broadcast), or for graph nodes a
            `StateAxes` whose axes may also be `Carry`. Keyword arguments are broadcast.
        out_axes: `Carry` (the function returns only the carry), a tuple with `Carry` in
            one place and an axis (or prefix) for the other outputs (`(Carry, 1)`), or an
            axis prefix when there is no carry. Outputs are stacked along their axis
            (None, broadcasting an output, is refused as in Flax NNX).
        remat: a checkpoint policy for each step (as for `bryo_scan.scan`): False, True,
            "nested", "offload", "save_all" or a `ScanCheckpointPolicy`.
        transform_metadata: `{PARTITION_NAME: name}` (`bryo_graph.PARTITION_NAME`): inside,
            the scanned axis is taken out of the Variables' sharding metadata
            (`out_sharding`), outside it is there with `name`, as Flax NNX does.
        graph: with `graph=False` the arguments must be trees (no shared Variables).
            The scan itself always runs lifted, writing state changes back; `graph=False`
            is simple mode.
        graph_updates: `False` is simple mode: broadcast Variables the body changes are
            threaded from step to step, and a carried Variable cannot be replaced.

    Returns:
        The scanned function. State changed inside is written back into the arguments.

    Example:
        >>> axes = StateAxes({'recurrent_dropout': None, ...: Carry})
        >>> @scan(in_axes=(axes, Carry, 1), out_axes=(Carry, 1))
        ... def unroll(cell, h, x):
        ...     h, y = cell(h, x)
        ...     return h, y
    """
    if f is None:
        return functools.partial(  # type: ignore[return-value]  # scan(f=None, ...) is a decorator: the partial takes f
            scan,
            length=length,
            reverse=reverse,
            unroll=unroll,
            in_axes=in_axes,
            out_axes=out_axes,
            remat=remat,
            transform_metadata=transform_metadata,
            graph=graph,
            graph_updates=graph_updates,
        )
    refuse_bound_method("scan", f)
    for name, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
        updates = graph_updates_on(graph, graph_updates)
        check_prefix(axes, name, "scan", graph_updates=updates, mappings=(StateAxes,))
    # `prefix(..., graph=True)`'s TreeStates: scan (lifted) reads module-shaped prefixes
    in_axes, out_axes = tree_state_prefixes(in_axes), tree_state_prefixes(out_axes)
    fn = with_axis_metadata(f, in_axes, out_axes, transform_metadata)
    policy = ScanCheckpointPolicy.from_remat(remat)
    trees = tree_mode(graph)
    position = _carry_position(out_axes)
    _check_carry_in_both(in_axes, out_axes, position)
    _check_out_axes(out_axes)
    carry_only = in_axes is Carry
    thread_broadcast = not graph_updates_on(graph, graph_updates)
    cache = PlanCache(size=16)
    traces: BoundedCache[StepTrace] = BoundedCache(16)

    @functools.wraps(fn)
    def scanned(*args: Any, **kwargs: Any) -> Any:
        if kwargs and isinstance(in_axes, tuple | list) and len(args) < len(in_axes):
            args, kwargs = positional(fn, "scan", args, kwargs), {}  # in_axes names them
        if carry_only and (len(args) != 1 or kwargs):
            raise TransformError(
                "When in_axes=Carry, the function must take exactly one argument, the carry; "
                f"it was called with {len(args)} positional and {len(kwargs)} keyword "
                "arguments. Give one axis per argument instead: `in_axes=(Carry, 0)`."
            )
        if trees:
            check_tree((args, kwargs), name="scan")
        key, roots, arrays = scan_args(args, kwargs)
        plan = cache.plan(key, roots)
        axes = (Carry,) if carry_only else in_axes
        return _Scan(plan, arrays, fn, axes, out_axes, position, length, thread_broadcast).run(
            policy, reverse, unroll, traces
        )

    return scanned  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)


class _Scan:
    """One call of a lifted scan: the inputs sorted into carry, scanned and broadcast."""

    def __init__(
        self,
        plan: CallPlan,
        arrays: list,
        f: Callable,
        in_axes: object,
        out_axes: object,
        position: object,
        length: int | None,
        thread_broadcast: bool,
    ) -> None:
        self.plan, self.arrays, self.f = plan, arrays, f
        self.out_axes, self.position = out_axes, position
        sig = plan.sig
        in_carry_args = [
            i
            for i, spec in enumerate(in_axes if isinstance(in_axes, tuple | list) else ())
            if spec is Carry
        ]
        self.carry_arg = in_carry_args[0] if in_carry_args else None
        root_specs, array_specs = arg_specs(sig, in_axes, kwargs_axis=None)
        self.root_specs = root_specs
        self.leaf_axes: list = leaf_axes(plan, root_specs)
        self.simple = thread_broadcast
        if thread_broadcast:  # simple mode: each step sees the state the step before left
            self.leaf_axes = [Carry if axis is None else axis for axis in self.leaf_axes]
        self._leaf_index: dict[tuple[int, tuple], int] | None = None
        check_consistent_aliasing(plan, root_specs)
        self.array_axes = array_specs
        self.values = plan.leaf_values()
        sizes = []
        for k, (value, axis) in enumerate(zip(self.values, self.leaf_axes, strict=False)):
            size = check_axis(value, axis, sig.describe_leaf(k), "in_axes")
            if size is not None:
                sizes.append((size, sig.describe_leaf(k)))
        for i, (value, axis) in enumerate(zip(arrays, array_specs, strict=False)):
            size = check_axis(value, axis, f"array argument #{i}", "in_axes")
            if size is not None:
                sizes.append((size, f"the array argument #{i}"))
        length = check_sizes(sizes, "in_axes", length)
        if length is None:
            raise TransformError(
                "`scan` has nothing to scan over (no input has an int axis in `in_axes`); "
                "pass `length=`."
            )
        self.length: int = length
        self.carry_ks = [k for k, axis in enumerate(self.leaf_axes) if axis is Carry]
        self.carry_arrays = [i for i, axis in enumerate(array_specs) if axis is Carry]
        self.carry_roots = self._carry_roots(root_specs)

    def _carry_roots(self, root_specs: list) -> list[int]:
        return [j for j, spec in enumerate(root_specs) if spec is Carry]

    def leaf_at(self, root: int, path: tuple) -> int | None:
        """The input State leaf at `path` in input root `root`, or None."""
        if self._leaf_index is None:
            places = (PairPath.of(path) for path in self.plan.sig.paths)
            self._leaf_index = {(p.root, p.inner): k for k, p in enumerate(places)}
        return self._leaf_index.get((root, path))

    def check_replacement(self, k: int, leaf: object) -> None:
        """Raise unless `leaf`, a new Variable the body put where carried leaf `k` was,
        can be carried in its place: graph mode with updates, same type, shape and dtype."""
        where = self.plan.sig.describe_leaf(k)
        old = state_leaf(self.plan, k)
        if self.simple:
            raise TransformError(
                f"scan Variable identity must be preserved across iterations: the scanned "
                f"function replaced the carried {type(old).__name__} {where} with a new "
                f"{type(leaf).__name__}. With graph_updates=False (or graph=False) set its "
                "value instead (`module.w.value = ...`)."
            )
        value: Any = leaf.raw_value if isinstance(leaf, Variable) else leaf
        before: Any = self.values[k]
        if type(leaf) is not type(old) or (jnp.shape(value), jnp.result_type(value)) != (
            jnp.shape(before),
            jnp.result_type(before),
        ):
            raise TransformError(
                f"`scan`: the scanned function replaced the carried {type(old).__name__} "
                f"{where} ({jnp.result_type(before)}{list(jnp.shape(before))}) with a "
                f"{type(leaf).__name__} ({jnp.result_type(value)}{list(jnp.shape(value))}); "
                "the carry must keep its structure from step to step: give the new "
                "Variable the same type, shape and dtype."
            )

    def _check_carry_kept(self, out_plan: OutPlan, replaced: list[int]) -> None:
        """Raise if the body removed a carried State leaf from the graphs."""
        if out_plan.graph is None:
            return
        kept = {p.k for p in out_plan.graph.leaf_plans if isinstance(p, KeptLeaf)}
        for k in self.carry_ks:
            if k not in kept and k not in replaced:
                kind = type(state_leaf(self.plan, k)).__name__
                raise TransformError(
                    "`scan`: the carry must keep its structure from step to step; the "
                    f"scanned function removed the carried {kind} "
                    f"{self.plan.sig.describe_leaf(k)}. Set it to a new value instead, or "
                    "delete it outside the scan."
                )

    def run(
        self,
        policy: ScanCheckpointPolicy,
        reverse: bool,
        unroll: int | bool,
        traces: BoundedCache[StepTrace] | None = None,
    ) -> Any:
        plan, sig = self.plan, self.plan.sig
        y_specs_axes = self._y_axes()
        stack_axes = sorted(
            {a for a in self.leaf_axes if a is not Carry}
            | set(y_specs_axes)
            | {a for a in sorted_axes(self.root_specs) if isinstance(a, int)},
            key=lambda a: (a is not None, a if isinstance(a, int) else 0),
        )
        axes = [Carry, *stack_axes]
        grouping = _ScanGrouping(self, axes)
        grouping.y_axes = _split_output_axes(self.out_axes, self.position)
        scanned_ks = [k for k, a in enumerate(self.leaf_axes) if isinstance(a, int)]
        scanned_arrays = [i for i, a in enumerate(self.array_axes) if isinstance(a, int)]
        xs: list = [
            _to_front(self.values[k], self.leaf_axes[k]) for k in scanned_ks
        ]  # arrays or pytrees of them
        xs += [jnp.moveaxis(self.arrays[i], self.array_axes[i], 0) for i in scanned_arrays]
        init = (
            [self.values[k] for k in self.carry_ks],
            [jnp.asarray(self.arrays[i]) for i in self.carry_arrays],
        )
        record: dict[str, Any] = {}
        inner_carry_index = {k: n for n, k in enumerate(self.carry_ks)}
        # broadcast arrays are inputs of the step (not constants of its trace), so that a
        # trace can serve later calls with other values
        const_ks = [
            k
            for k, axis in enumerate(self.leaf_axes)
            if axis is None and is_array_like(self.values[k])
        ]
        const_arrays = [
            i
            for i, axis in enumerate(self.array_axes)
            if axis is None and is_array_like(self.arrays[i])
        ]
        consts = ([self.values[k] for k in const_ks], [self.arrays[i] for i in const_arrays])

        def body(consts: tuple, carry: tuple, slices: list) -> tuple:
            leaves, arrays = list(self.values), list(self.arrays)
            for k, value in zip(const_ks, consts[0], strict=True):
                leaves[k] = value
            for i, value in zip(const_arrays, consts[1], strict=True):
                arrays[i] = value
            for k, value in zip(self.carry_ks, carry[0], strict=False):
                leaves[k] = value
            for i, value in zip(self.carry_arrays, carry[1], strict=False):
                arrays[i] = value
            for k, value in zip(scanned_ks, slices, strict=False):
                leaves[k] = value
            for i, value in zip(scanned_arrays, slices[len(scanned_ks) :], strict=False):
                arrays[i] = value
            args, kwargs, inner = rebuild(sig, leaves, arrays)
            carry_out, ys, _ = _split_output(self.f(*args, **kwargs), self.position, self.out_axes)
            if self.simple and variables_of(ys):  # outputs are stacked: no argument's Variable
                check_no_aliases("scan", {"args": (args, kwargs), "out": ys}, only="out")
            grouping.replaced = []
            groups, _, out_plan = collect(inner, ys, grouping)
            for update in out_plan.set_consts:
                stacked_tree = isinstance(update.value, InTree) and is_int(self.leaf_axes[update.k])
                if not stacked_tree and (
                    self.leaf_axes[update.k] is Carry or isinstance(self.leaf_axes[update.k], int)
                ):
                    raise TransformError(
                        f"`scan`: {sig.describe_leaf(update.k)} was set to the Python value "
                        f"{update.value!r}; carried and scanned state must hold arrays."
                    )
            replaced = _replacements(out_plan, grouping.replaced)
            # (position in the carry group, carried leaf k): the set ones, then new Variables
            carried = [(u.position, u.k) for u in out_plan.sets if u.group == 0] + replaced
            new_state = [leaves[k] for k in self.carry_ks]
            for position, k in carried:
                new_state[inner_carry_index[k]] = groups[0][position]
            self._check_carry_kept(out_plan, [k for _, k in replaced])
            record["carried"] = carried
            carry_arrays = self._carry_arrays_out(carry_out, args, inner)
            record["plan"] = out_plan
            record["sizes"] = [len(g) for g in groups[1:]]
            stacked = [y for group in groups[1:] for y in group]
            return (new_state, carry_arrays), stacked

        step = self._step(body, consts, init, xs, record, traces)
        final, ys = checkpointed_scan(step, init, xs, self.length, policy, reverse, unroll)
        out_plan = record["plan"]
        groups: list[list] = [[] for _ in axes]
        for pos, k in record["carried"]:
            groups[0].extend([None] * (pos + 1 - len(groups[0])))
            groups[0][pos] = final[0][inner_carry_index[k]]
        offset = 0
        for g, (axis, size) in enumerate(zip(stack_axes, record["sizes"], strict=False), start=1):
            chunk = ys[offset : offset + size]
            offset += size
            if axis is None:
                groups[g] = [y[0] if reverse else y[-1] for y in chunk]
            else:
                groups[g] = [jnp.moveaxis(y, 0, axis) for y in chunk]
        ys_out = apply(plan, out_plan, groups, None)
        carry_out = self._carry_result(final[1])
        return _join_output(carry_out, ys_out, self.position, self.out_axes)

    def _step(
        self,
        body: Callable,
        consts: tuple,
        init: tuple,
        xs: list,
        record: dict[str, Any],
        traces: BoundedCache[StepTrace] | None,
    ) -> Callable[[tuple, list], tuple]:
        """The scan's step. Called eagerly (no JAX trace running), the step is traced
        once per input structure and kept in `traces`, so that calling the scanned function
        again on equally structured inputs runs the kept trace without calling the Python
        function again (as Flax NNX's `scan` does, through `jax.lax.scan`'s trace cache)."""
        key = _trace_key(self.plan.sig, self.length, consts, init, xs, self.values, self.arrays)
        if traces is None or key is None or not is_eager():
            return lambda carry, slices: body(consts, carry, slices)
        kept = traces.get(key)
        if kept is None:
            slices = jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype, weak_type=_weak(x)), xs
            )
            closed, shape = jax.make_jaxpr(body, return_shape=True)(consts, init, slices)
            kept = StepTrace(closed, jax.tree_util.tree_structure(shape), dict(record))
            traces.put(key, kept)
        record.update(kept.record)

        def step(carry: tuple, slices: list) -> tuple:
            flat = jax.tree_util.tree_leaves((consts, carry, slices))
            out = jax.core.eval_jaxpr(kept.jaxpr.jaxpr, kept.jaxpr.consts, *flat)
            return jax.tree_util.tree_unflatten(kept.out_tree, out)

        return step

    def _y_axes(self) -> list:
        y_axes = _split_output_axes(self.out_axes, self.position)
        leaves = jax.tree_util.tree_leaves(
            y_axes, is_leaf=lambda x: x is None or isinstance(x, StateAxes)
        )
        found = []
        for leaf in leaves:
            found.extend(leaf.axes if isinstance(leaf, StateAxes) else [leaf])
        if any(a is Carry for a in found):
            raise TransformError("`out_axes` may hold `Carry` only at the top level.")
        return found or [None]

    # The carry argument's arrays and nodes --------------------------------------------

    def _carry_layout(self) -> ArgLayout | None:
        return self.plan.sig.layouts[self.carry_arg] if self.carry_arg is not None else None

    def _carry_arrays_out(self, carry_out: object, args: tuple, inner: Inner) -> list:
        if self.carry_arg is None:
            return []
        carry_in = args[self.carry_arg]
        in_leaves, in_def = jax.tree_util.tree_flatten(carry_in, is_leaf=is_graph_leaf)
        out_with_paths, out_def = jax.tree_util.tree_flatten_with_path(
            carry_out, is_leaf=is_graph_leaf
        )
        if in_def != out_def:
            raise TransformError(
                f"`scan`: the carry must keep its structure from step to step; it came in as "
                f"{in_def} and went out as {out_def}."
            )
        arrays = []
        for a, (keypath, b) in zip(in_leaves, out_with_paths, strict=False):
            if is_graph_leaf(a):
                if a is not b:
                    raise self._replaced_carry(a, b, "carry" + jax.tree_util.keystr(keypath))
            elif is_array_like(a):
                arrays.append(b)
        return arrays

    def _replaced_carry(self, before: object, after: object, where: str) -> TransformError:
        """The error for a carry returning another graph node (or Variable) than it got;
        worded as Flax NNX words it in each mode."""
        kinds = f"a {type(before).__name__} came in and a new {type(after).__name__} went out"
        if self.simple:
            return TransformError(
                f"scan Variable identity must be preserved across iterations: at {where}, "
                f"{kinds}. Return the carry's own objects and change their values in place."
            )
        return TransformError(
            f"Carry references must be the same between iterations: at {where}, {kinds}. "
            "Return the carry's own objects and change them in place (`scan` writes their "
            "new state back)."
        )

    def _carry_result(self, carry_arrays: list) -> object:
        layout = self._carry_layout()
        if layout is None:
            return None
        roots = self.plan.roots
        carry_roots = (roots[j] for j in self.carry_roots)
        return layout.rebuild(carry_roots, iter(carry_arrays))


class StepTrace(NamedTuple):
    """A scan step traced once: its jaxpr, the structure of its output, and what the
    trace recorded about the output (its `OutPlan`, carried leaves, group sizes)."""

    jaxpr: Any
    out_tree: Any
    record: dict[str, Any]


def _to_front(value: object, axis: int) -> object:
    """`value` (an array, or a Variable's pytree of arrays) with `axis` moved to the front."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, axis, 0), value)


def _weak(x: object) -> bool:
    return bool(getattr(x, "weak_type", False))


def _aval(x: object) -> tuple:
    return (jnp.shape(x), jnp.result_type(x), _weak(x))  # type: ignore[arg-type]  # array-like


def _trace_key(
    sig: object, length: int, consts: tuple, init: tuple, xs: list, values: list, arrays: list
) -> Hashable | None:
    """What a step trace depends on: the call's Signature, the length, the inputs' shapes
    and dtypes, and the Python values among the leaves; None when one is unhashable."""
    dynamic = jax.tree_util.tree_leaves((consts, init, xs))
    python = tuple((type(v), v) for v in (*values, *arrays) if not is_array_like(v))
    try:
        key = (sig, length, tuple(_aval(x) for x in dynamic), python)
        hash(key)
    except TypeError:
        return None
    return key


def is_eager() -> bool:
    """Whether no JAX trace (jit, vmap, grad, ...) is running now."""
    return get_opaque_trace_state() == _EAGER


def _replacements(out_plan: OutPlan, replaced: list[int]) -> list[tuple[int, int]]:
    """`(position in the carry group, carried leaf k)` of each new Variable that took a
    carried one's place (`replaced`: their ks, in the order `collect` met them)."""
    if not replaced or out_plan.graph is None:
        return []
    positions = [
        p.place.position
        for p in out_plan.graph.leaf_plans
        if isinstance(p, NewLeaf) and isinstance(p.place, InGroup) and p.place.group == 0
    ]
    if len(positions) != len(replaced):  # a Python value took a carried Variable's place
        raise TransformError(
            "`scan`: a carried Variable was replaced by one holding a Python value; carried "
            "state must hold arrays."
        )
    return list(zip(positions, replaced, strict=True))


def _split_output_axes(out_axes: object, position: object) -> object:
    if position == "all":
        return None
    if position is None:
        return out_axes
    rest = tuple(a for i, a in enumerate(out_axes) if i != position)  # type: ignore[arg-type]  # out_axes is a tuple when the carry is at `position`
    return rest[0] if len(rest) == 1 else rest
