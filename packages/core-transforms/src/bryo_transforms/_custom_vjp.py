"""`custom_vjp`: `jax.custom_vjp` for functions of graph nodes, with `fwd`/`bwd` rules.

As in Flax NNX 0.12 there are two modes. In simple mode (`graph_updates=False` or
`graph=False`) it is `jax.custom_vjp` over the arguments as pytrees: `bwd(*nondiff,
residual, out_g)` returns one tangent per differentiable argument shaped like it (a
module of gradients for a module), and may take `updates_g=`, the cotangents of the
Variables the function changed (a tree like the arguments: those Variables hold their
cotangent, every other leaf is None). In graph mode with updates (the default) graph-node
arguments enter as their `State`s: `bwd(*nondiff, residual, (inputs_g, out_g))` gets in
`inputs_g` one State per differentiable argument (the cotangent of its state after the
call; None for other arguments) and returns one tangent per such argument, a State for
a node (only the part its `DiffState` filter selects), an array for an array. Changes
the function makes to its arguments (values and attributes) are written back.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from bryo_filters import Filter
from bryo_graph import State, Variable, is_graph_node
from bryo_pytree import Path, is_array

from ._apply import apply
from ._collect import Const, Grouping, OutPlan, OutRoot, Static, collect
from ._grad import (
    DiffSplit,
    DiffState,
    array_places,
    grad_state,
    select_leaves,
    split_diff,
    state_entries,
)
from ._layout import ROOT, scan_args
from ._options import positional, refuse_bound_method
from ._plan import CallPlan, PlanCache
from ._rebuild import Inner, rebuild
from ._simple import (
    Inputs,
    check_no_aliases,
    fresh_copy,
    graph_updates_on,
    is_variable,
    tree_mode,
    write_back,
)

A = TypeVar("A")

_NO_RULES = (
    "`custom_vjp` function `{name}` has no differentiation rules yet: call "
    "`{name}.defvjp(fwd, bwd)` before calling it."
)


class _UpdatesTemplate(NamedTuple):
    """Where the Variables a call changed sit in its arguments: the arguments' tree
    (Variables as leaves) and, per leaf, the tree of a changed Variable or None."""

    treedef: Any
    changed_defs: tuple

    @classmethod
    def of(cls, args: tuple, changed: tuple[bool, ...]) -> _UpdatesTemplate:
        leaves, treedef = jax.tree_util.tree_flatten(args, is_leaf=is_variable)
        flags = iter(changed)
        defs = tuple(
            jax.tree_util.tree_structure(leaf) if is_variable(leaf) and next(flags) else None
            for leaf in leaves
        )
        return cls(treedef, defs)

    def cotangents(self, values_g: Sequence) -> tuple:
        """The arguments' tree with each changed Variable holding its cotangent."""
        it = iter(values_g)
        leaves = [
            None if d is None else jax.tree_util.tree_unflatten(d, [next(it)])
            for d in self.changed_defs
        ]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def _takes_updates_g(bwd: Callable) -> bool:
    try:
        params = inspect.signature(bwd).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "updates_g" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class _Rules(NamedTuple):
    """What `defvjp` was given."""

    fwd: Callable
    bwd: Callable
    symbolic_zeros: bool


class _SimpleRules:
    """`jax.custom_vjp` of one function over its arguments as pytrees."""

    def __init__(
        self, fun: Callable, inputs: Inputs, nondiff_argnums: tuple[int, ...], rules: _Rules
    ) -> None:
        self.inputs = inputs
        self.jax_fn: Any = jax.custom_vjp(inputs.with_updates(fun), nondiff_argnums=nondiff_argnums)
        pure_fwd = inputs.with_updates(rules.fwd, output=_primal_output)
        n_nondiff = len(nondiff_argnums)
        bwd = rules.bwd
        pass_updates = _takes_updates_g(bwd)

        def jax_fwd(*args: Any) -> tuple:
            (out, residual), values, changed = pure_fwd(*args)
            template = _UpdatesTemplate.of(args, changed.value.flags)
            return (out, values, changed), (residual, Static(template))

        def jax_bwd(*args: Any) -> tuple:
            nondiff, (residual, template), (out_g, values_g, _) = (
                args[:n_nondiff],
                args[n_nondiff],
                args[n_nondiff + 1],
            )
            kwargs = {"updates_g": template.value.cotangents(values_g)} if pass_updates else {}
            # JAX passes the caller's non-differentiated arguments: `bwd` gets copies
            return _tangents(bwd(*fresh_copy(nondiff), residual, out_g, **kwargs))

        self.jax_fn.defvjp(jax_fwd, jax_bwd, symbolic_zeros=rules.symbolic_zeros)

    def __call__(self, args: tuple) -> Any:
        if not self.inputs.tree:
            check_no_aliases(self.inputs.name, {"args": args})
        variables = self.inputs.variables(args, {})
        # the function sees copies (`Inputs.inside`), also of the non-differentiated
        # arguments JAX passes as they are; their changes come back by `write_back`
        out, values, changed = self.jax_fn(*args)
        write_back(variables, values, changed)
        return out


def _primal_output(fwd_result: tuple) -> object:
    """The output of `fwd`'s `(output, residual)` (the residual may hold the arguments)."""
    return fwd_result[0]


def _tangents(result: object) -> tuple:
    if isinstance(result, list):
        return tuple(result)
    if not isinstance(result, tuple):
        raise TypeError(
            "`custom_vjp`: `bwd` must return a tuple with one tangent per differentiable "
            f"argument; it returned {type(result).__name__}. Return `(tangent,)` for one."
        )
    return result


class _AllBack(Grouping):
    """Every State leaf of the arguments leaves the transform (its cotangent is part of
    what `bwd` gets), in one group; outputs too."""

    direct_ok = False

    def always_returned(self, k: int) -> bool:
        return True


class _Call(NamedTuple):
    """What the graph-mode rules of one call need: its plan, its inputs split into the
    differentiated State leaves and array arguments and the rest closed over (`split`),
    every argument's State leaves by root (`all_leaves`: for `inputs_g`), the
    differentiated ones (`diff_leaves`: for the tangents), the non-differentiated
    arguments, and the root of each argument that is a graph node (`roots`)."""

    plan: CallPlan
    split: DiffSplit
    all_leaves: dict[int, list[tuple[Path, int]]]
    diff_leaves: dict[int, list[tuple[Path, int]]]
    nondiff: tuple
    diff_args: tuple[int, ...]
    roots: dict[int | str, int]


class _GraphRules:
    """`jax.custom_vjp` over the differentiated State leaves and arrays of a call; graph
    nodes go through bryo's lifting (rebuilt inside, changes applied outside)."""

    def __init__(
        self,
        fun: Callable,
        name: str,
        int_nondiff: tuple[int, ...],
        filters: dict[int, Filter],
        rules: _Rules,
    ) -> None:
        self.fun = fun
        self.name = name
        self.int_nondiff = int_nondiff
        self.filters = filters
        self.rules = rules
        self.cache = PlanCache(size=16)

    def _prepare(self, args: tuple) -> tuple[_Call, list]:
        for i in self.int_nondiff:
            if i < len(args) and is_graph_node(args[i]):
                raise TypeError(
                    f"`{self.name}`: `nondiff_argnums` names argument {i}, a "
                    f"{type(args[i]).__name__}; a graph node cannot be left out whole. Pass "
                    f"`DiffState({i}, filter)` to choose its differentiated state (a filter "
                    "matching nothing, e.g. `nnx.Not(...)`, differentiates none of it)."
                )
        key, roots, arrays = scan_args(args, {})
        plan = self.cache.plan(key, roots)
        diff = tuple(i for i in range(len(args)) if i not in self.int_nondiff)
        filters = {i: self.filters.get(i, ...) for i in diff}
        entries = state_entries(plan, diff)
        diff_ks, diff_leaves = select_leaves(plan, entries, filters)
        all_leaves = {j: [(e.path, e.k) for e in es] for j, es in entries.items()}
        split = split_diff(plan, arrays, diff_ks, diff)
        nondiff = tuple(args[i] for i in self.int_nondiff if i < len(args))
        roots = _argument_roots(plan)
        call = _Call(plan, split, all_leaves, diff_leaves, nondiff, diff, roots)
        return call, split.values

    def __call__(self, args: tuple) -> Any:
        fwd, bwd, symbolic_zeros = self.rules
        call, values = self._prepare(args)
        plans: list[OutPlan] = []  # each trace's OutPlan: static, so not a JAX output

        def run(function: Callable, diff_values: list) -> tuple:
            # JAX may hand the rules Python scalars: as arrays, results stay traced values
            rebuilt, inner = _rebuild(call, [jnp.asarray(v) for v in diff_values])
            out = function(*rebuilt)
            result, residual = out if function is fwd else (out, None)
            groups, _, out_plan = collect(inner, result, _AllBack())
            plans.append(out_plan)
            return groups, residual

        def jax_fun(diff_values: list) -> list:
            return run(self.fun, diff_values)[0]

        def jax_fwd(diff_values: list) -> tuple:
            groups, residual = run(fwd, diff_values)
            return groups, (residual, Static(plans[-1]))

        def jax_bwd(res: tuple, groups_g: list) -> tuple:
            residual, out_plan = res
            g = _cotangents_in(call, out_plan.value, groups_g)
            tangents = _tangents(bwd(*call.nondiff, residual, g))
            return (_tangent_values(call, args, tangents, self.name),)

        jax_fn = jax.custom_vjp(jax_fun)
        jax_fn.defvjp(jax_fwd, jax_bwd, symbolic_zeros=symbolic_zeros)
        groups = jax_fn(values)
        return apply(call.plan, plans[-1], groups, None)


def _rebuild(call: _Call, diff_values: list) -> tuple[tuple, Inner]:
    split = call.split
    leaves, arrays = split.merge(diff_values, split.rest_leaves, split.rest_arrays)
    args, _, inner = rebuild(call.plan.sig, leaves, arrays)
    return args, inner


def _cotangents_in(call: _Call, out_plan: OutPlan, groups_g: list) -> tuple:
    """`(inputs_g, out_g)` for `bwd`: per differentiable argument the State of its
    leaves' cotangents (None for non-nodes), and the output's cotangent."""
    by_k = {u.k: groups_g[u.group][u.position] for u in out_plan.sets}
    roots = call.roots
    inputs_g = tuple(
        grad_state(call.plan, [(p, k) for p, k in call.all_leaves[roots[i]] if k in by_k], by_k)
        if i in roots
        else None
        for i in call.diff_args
    )
    return inputs_g, _output_cotangent(out_plan, groups_g)


def _argument_roots(plan: CallPlan) -> dict[int | str, int]:
    """The root index of each argument that is a graph node itself."""
    layouts = plan.sig.layouts
    return {
        place.argument: j
        for j, place in enumerate(plan.sig.root_places)
        if isinstance(place.argument, int) and layouts[place.argument] is ROOT
    }


def _output_cotangent(out_plan: OutPlan, groups_g: list) -> object:
    """The output's cotangent, shaped like it (None at graph nodes and Python values)."""
    if out_plan.out is None:
        return None
    leaves = [
        None if isinstance(leaf, OutRoot | Const) else leaf.resolve(groups_g, ())
        for leaf in out_plan.out.leaves
    ]
    return jax.tree_util.tree_unflatten(out_plan.out.treedef, leaves)


def _flat_tangent(tangent: object, argument: int, name: str) -> dict:
    if tangent is None:
        return {}
    if isinstance(tangent, State):
        return tangent.flat_state()
    if isinstance(tangent, Variable):
        return {(): tangent}
    raise TypeError(
        f"`{name}`: `bwd` returned a {type(tangent).__name__} as the tangent of argument "
        f"{argument}, a graph node; return a `State` shaped like the one `bwd` got in "
        "`inputs_g` (its differentiated part)."
    )


def _leaf_value(leaf: object) -> object:
    return leaf.value if isinstance(leaf, Variable) else leaf  # a VariableState is a Variable


def _tangent_values(call: _Call, args: tuple, tangents: tuple, name: str) -> list:
    """The cotangents of the differentiated values, from `bwd`'s tangents (one per
    differentiable argument); a leaf the tangent leaves out gets a zero cotangent."""
    if len(tangents) != len(call.diff_args):
        raise TypeError(
            f"`{name}`: `bwd` returned {len(tangents)} tangents for "
            f"{len(call.diff_args)} differentiable arguments {list(call.diff_args)}; return "
            "one per argument not in `nondiff_argnums`, in order (None for no tangent)."
        )
    by_arg = dict(zip(call.diff_args, tangents, strict=True))
    by_k: dict[int, object] = {}
    for i, j in call.roots.items():
        if j in call.diff_leaves:
            flat = _flat_tangent(by_arg[i], i, name)  # type: ignore[index]  # diff_args and roots index arguments by position (int) here
            for path, k in call.diff_leaves[j]:
                if path in flat:
                    by_k[k] = _leaf_value(flat[path])
    values: list = [by_k.get(k) for k in call.split.diff_ks]
    places = array_places(call.plan.sig)
    seen: dict[int | str, int] = {}
    for i in call.split.diff_arrays:
        argument = places[i]
        tangent = by_arg[argument]  # type: ignore[index]  # array places of differentiable arguments are positions (int)
        ordinal = seen[argument] = seen.get(argument, -1) + 1
        leaves = [tangent] if is_array(tangent) else _array_leaves(tangent)
        values.append(leaves[ordinal] if ordinal < len(leaves) else None)
    return values


def _array_leaves(tree: object) -> list:
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, State))
    return [leaf for leaf in leaves if not isinstance(leaf, State)]


class CustomVjp(Generic[A]):
    """A function with a custom VJP (made by `custom_vjp`); give its rules with `defvjp`."""

    def __init__(
        self,
        fun: Callable[..., A],
        nondiff_argnums: tuple[int | DiffState, ...],
        graph_updates: bool,
        tree: bool,
    ) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = nondiff_argnums
        self._graph_updates = graph_updates
        self._tree = tree
        self._rules: _SimpleRules | _GraphRules | None = None  # set by defvjp

    def defvjp(
        self,
        fwd: Callable[..., tuple[A, Any]],
        bwd: Callable[..., Any],
        symbolic_zeros: bool = False,
    ) -> None:
        """Set the rules: `fwd(*args) -> (out, residual)` and `bwd(*nondiff, residual, g)
        -> tangents` (see `custom_vjp` for what `g` and the tangents are per mode)."""
        rules = _Rules(fwd, bwd, symbolic_zeros)
        nums = self.nondiff_argnums
        int_nondiff = tuple(n for n in nums if isinstance(n, int))
        if self._graph_updates:
            filters = {d.argnum: d.filter for d in nums if isinstance(d, DiffState)}
            self._rules = _GraphRules(self.fun, "custom_vjp", int_nondiff, filters, rules)
        else:
            inputs = Inputs("custom_vjp", self._tree)
            self._rules = _SimpleRules(self.fun, inputs, int_nondiff, rules)

    def __call__(self, *args: Any, **kwargs: Any) -> A:
        if self._rules is None:
            raise TypeError(_NO_RULES.format(name=getattr(self.fun, "__name__", "f")))
        return self._rules(positional(self.fun, "custom_vjp", args, kwargs))


def _check_nondiff_argnums(
    nondiff_argnums: Sequence[int | DiffState], graph_updates: bool
) -> tuple[int | DiffState, ...]:
    seen: set[int] = set()
    for item in nondiff_argnums:
        if isinstance(item, DiffState) and not graph_updates:
            raise ValueError(
                "`nondiff_argnums` cannot contain `DiffState` objects in simple mode "
                "(`graph=False` or `graph_updates=False`): the tangent of a module there is "
                "a whole module. Use graph mode with updates, or split the module "
                "(`nnx.split(model, filter, ...)`) and pass the States."
            )
        if not isinstance(item, int | DiffState):
            raise TypeError(
                f"`nondiff_argnums` takes ints and `DiffState(argnum, filter)`s; got {item!r}."
            )
        argnum = item.argnum if isinstance(item, DiffState) else item
        if argnum in seen:
            raise ValueError(f"`nondiff_argnums` names argument {argnum} twice.")
        seen.add(argnum)
    return tuple(nondiff_argnums)


def custom_vjp(
    fun: Callable[..., A] | None = None,
    /,
    *,
    nondiff_argnums: Sequence[int | DiffState] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`jax.custom_vjp` for functions of graph nodes: give the gradient rule yourself.

    Args:
        fun: the function (or use `@custom_vjp(nondiff_argnums=...)`).
        nondiff_argnums: arguments that are not differentiated (ints: not graph nodes;
            they come first in `bwd`'s arguments), and in graph mode `DiffState(argnum,
            filter)`s choosing the differentiated state of a graph-node argument.
        graph: graph (default) or tree mode (`graph=False`: simple mode, the arguments
            must be trees).
        graph_updates: graph mode with updates (default), or simple mode (`False`).

    Returns:
        A `CustomVjp`; call its `defvjp(fwd, bwd)` before calling it. `fwd(*args)`
        returns `(out, residual)`. In graph mode with updates `bwd(*nondiff, residual,
        (inputs_g, out_g))` gets one State per differentiable argument in `inputs_g` and
        returns one tangent per differentiable argument (a State for a node, only its
        differentiated part; an array for an array). In simple mode `bwd(*nondiff,
        residual, out_g)` returns tangents shaped like the arguments (a module of
        gradients), and gets `updates_g=` if it takes it.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> @custom_vjp
        ... def clip_gradient(x):
        ...     return x
        >>> clip_gradient.defvjp(
        ...     lambda x: (x, None),
        ...     lambda residual, g: (jnp.clip(g[1], -1.0, 1.0),),
        ... )
        >>> float(jax.grad(lambda x: 3.0 * clip_gradient(x))(2.0))
        1.0
    """
    if fun is None:
        return functools.partial(
            custom_vjp, nondiff_argnums=nondiff_argnums, graph=graph, graph_updates=graph_updates
        )
    refuse_bound_method("custom_vjp", fun)
    if not callable(fun):
        raise TypeError(
            f"`custom_vjp` takes the function first; got {type(fun).__name__}. Pass options "
            "by keyword: `@custom_vjp(nondiff_argnums=(1,))`."
        )
    updates = graph_updates_on(graph, graph_updates)
    nums = _check_nondiff_argnums(nondiff_argnums, updates)
    return CustomVjp(fun, nums, updates, tree_mode(graph))
