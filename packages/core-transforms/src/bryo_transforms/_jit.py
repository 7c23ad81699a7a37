"""`jit`: `jax.jit` for functions of graph nodes, compiled once per graph structure.

Each call reads the models' Variables through a cached `CallPlan` (a model's flattening
is cached while its structure does not change) and calls one cached `jax.jit` of the
pure function of flat arrays per `Signature`; only the Variables that changed are
written back. A call that changed no structure and returns only arrays skips `apply`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from bryo_graph import Variable, check_tree, is_graph_node, iter_graph
from bryo_pytree import is_array_like

from ._apply import apply
from ._call import pure_function
from ._collect import Grouping
from ._errors import TransformError
from ._layout import scan_args
from ._options import (
    Prepared,
    as_argnames,
    as_argnums,
    decorator_or_none,
    named_positions,
    static_args,
)
from ._partial import BoundJit
from ._plan import CallPlan, PairPath, PlanCache, Signature
from ._prefixes import check_prefix
from ._shardings import LeafOptions, StateSharding
from ._simple import Inputs, graph_updates_on, simple_jit, tree_mode

F = TypeVar("F", bound=Callable[..., Any])

_JIT_UNSUPPORTED = frozenset({"abstracted_axes"})


class _LeafGrouping(Grouping):
    """A graph-mode call's grouping: donated State leaves always leave the transform."""

    def __init__(self, donated: frozenset[int]) -> None:
        self.donated = donated

    def always_returned(self, k: int) -> bool:
        return k in self.donated


def _split(values: list, chosen: frozenset[int], offset: int = 0) -> tuple[list, list]:
    """`(values at the chosen indices, the others)`, indices counted from `offset`."""
    picked = [v for i, v in enumerate(values, offset) if i in chosen]
    rest = [v for i, v in enumerate(values, offset) if i not in chosen]
    return picked, rest


def _join(picked: list, rest: list, chosen: frozenset[int], n: int, offset: int = 0) -> list:
    it_picked, it_rest = iter(picked), iter(rest)
    return [next(it_picked) if i in chosen else next(it_rest) for i in range(offset, offset + n)]


class _Optioned:
    """The pure function of one Signature with shardings and donation: its flat inputs
    split into donated and kept lists, `(donated vars, vars, donated raw, raw, donated
    arrays, arrays)`, so that `jax.jit` can donate whole arguments."""

    def __init__(self, sig: Signature, options: LeafOptions) -> None:
        self.n_vars = sig.n_vars
        self.n_raw = len(sig.metas) - sig.n_vars
        var_ks = [k for k, meta in enumerate(sig.metas) if meta is not None]
        raw_ks = [k for k, meta in enumerate(sig.metas) if meta is None]
        self.var_donated = frozenset(i for i, k in enumerate(var_ks) if k in options.donated_leaves)
        self.raw_donated = frozenset(i for i, k in enumerate(raw_ks) if k in options.donated_leaves)
        self.array_donated = options.donated_arrays
        self.options = options

    def flat(self, var_values: list, raw_values: list, arrays: list) -> tuple:
        return (
            *_split(var_values, self.var_donated),
            *_split(raw_values, self.raw_donated),
            *_split(arrays, self.array_donated),
        )

    def in_shardings(self) -> tuple:
        o = self.options
        return self.flat(o.var_shardings, o.raw_shardings, o.array_shardings)

    def wrap(self, pure: Callable) -> Callable:
        n_arrays = len(self.options.array_shardings)

        def optioned(dv: list, kv: list, dr: list, kr: list, da: list, ka: list) -> tuple:
            return pure(
                _join(dv, kv, self.var_donated, self.n_vars),
                _join(dr, kr, self.raw_donated, self.n_raw),
                _join(da, ka, self.array_donated, n_arrays),
            )

        return optioned


class _GraphJit:
    """Graph-mode `jit` of `f`: one `jax.jit` per Signature, state written back."""

    def __init__(
        self,
        f: Callable,
        argnums: tuple[int, ...],
        argnames: tuple[str, ...],
        in_shardings: object,
        out_shardings: object,
        donate_argnums: tuple[int, ...],
        donate_argnames: tuple[str, ...],
        jit_kwargs: dict[str, Any],
    ) -> None:
        self.f = f
        self.argnums = argnums
        self.argnames = argnames
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.donate = frozenset(donate_argnums) | frozenset(donate_argnames)
        self.optioned = in_shardings is not None or bool(self.donate)
        self.jit_kwargs = jit_kwargs
        self.cache = PlanCache()
        self.compiled: dict[Signature, tuple[Callable, _Optioned | None]] = {}
        self.grouping = Grouping()

    def compile_for(self, plan: CallPlan, args: tuple, kwargs: dict) -> tuple:
        sig = plan.sig
        kw = dict(self.jit_kwargs)
        if self.out_shardings is not None:
            kw["out_shardings"] = (None, self.out_shardings, None)
        if not self.optioned:
            entry = (jax.jit(pure_function(sig, self.f, self.grouping), **kw), None)
        else:
            positions = static_args(args, tuple(a for a in self.donate if isinstance(a, int)), ())
            names = frozenset(a for a in self.donate if isinstance(a, str))
            options = LeafOptions.of(
                plan,
                args,
                kwargs,
                self.in_shardings,
                (positions | names).__contains__,
                static_args(args, self.argnums, ()),
            )
            optioned = _Optioned(sig, options)
            pure = pure_function(sig, self.f, _LeafGrouping(options.donated_leaves))
            if self.in_shardings is not None:
                kw["in_shardings"] = optioned.in_shardings()
            entry = (jax.jit(optioned.wrap(pure), donate_argnums=(0, 2, 4), **kw), optioned)
        self.compiled[sig] = entry
        return entry

    def prepare(self, args: tuple, kwargs: dict) -> Prepared:
        key, roots, arrays = scan_args(args, kwargs, static_args(args, self.argnums, self.argnames))
        plan = self.cache.plan(key, roots)
        fn, optioned = self.compiled.get(plan.sig) or self.compile_for(plan, args, kwargs)
        if optioned is None:
            flat: tuple = (plan.variable_values(), plan.raw_values, arrays)
        else:
            _place_inputs(plan, optioned.options)
            flat = optioned.flat(plan.variable_values(), plan.raw_values, arrays)

        def finish(result: tuple) -> Any:
            groups, direct, static = result
            out_plan = static.value
            if self.out_shardings is not None and out_plan.out is not None:
                raise TransformError(
                    "`jit(out_shardings=...)` in graph mode applies to outputs of arrays only; "
                    "this function returns graph nodes or Python values. Return arrays, or "
                    "use `graph_updates=False` (simple mode, with `prefix(model, ...)`)."
                )
            if out_plan.graph is None and out_plan.out is None and not out_plan.set_consts:
                write = plan.write
                group = groups[0]
                with plan.writing([update.k for update in out_plan.sets], "jit"):
                    for update in out_plan.sets:
                        write(update.k, group[update.position])
                out = direct
            else:
                out = apply(plan, out_plan, groups, direct, "jit")
            if optioned is not None and self.in_shardings is not None:
                _place_inputs(plan, optioned.options)
                if out_plan.graph is not None:  # the function may have replaced a Variable
                    _place_replaced(plan, optioned.options)
            return out

        return Prepared(fn, flat, {}, finish)


def _place_replaced(plan: CallPlan, options: LeafOptions) -> None:
    """Put a Variable the function put in place of a sharded input Variable (at the same
    path of the same argument) on that input's sharding, as Flax NNX's `jit` does: the
    arguments leave the call with their `in_shardings`."""
    var_it, raw_it = iter(options.var_shardings), iter(options.raw_shardings)
    wanted: dict[int, dict[tuple, jax.sharding.Sharding]] = {}
    for k, meta in enumerate(plan.sig.metas):
        sharding = next(raw_it) if meta is None else next(var_it)
        if meta is not None and isinstance(sharding, jax.sharding.Sharding):
            place = PairPath.of(plan.sig.paths[k])
            wanted.setdefault(place.root, {})[place.inner] = sharding
    for root, shardings in wanted.items():
        for path, value in iter_graph(plan.roots[root]):
            sharding = shardings.get(path)
            if sharding is None or not isinstance(value, Variable):
                continue
            raw = value.raw_value
            if is_array_like(raw) and getattr(raw, "sharding", sharding) != sharding:
                value.set_raw_value(jax.device_put(raw, sharding))


def _place_inputs(plan: CallPlan, options: LeafOptions) -> None:
    """Put the caller's State leaves that have a sharding on it (their new values too)."""
    var_it, raw_it = iter(options.var_shardings), iter(options.raw_shardings)
    for k, meta in enumerate(plan.sig.metas):
        sharding = next(raw_it) if meta is None else next(var_it)
        if not isinstance(sharding, jax.sharding.Sharding):
            continue
        source = plan.sources[k]
        value = source.variable.raw_value if source.variable is not None else source.value
        if getattr(value, "sharding", sharding) != sharding:
            plan.write(k, jax.device_put(value, sharding))


Prepare = Callable[[tuple, dict], Prepared]


class Jitted:
    """What `jit` returns: call it like `f`, or `lower` it for a given call.

    `jitted.lower(*args).compile()` gives a `Compiled` that is called like `f` (state is
    written back as for `jitted` itself) and has JAX's `as_text`, `cost_analysis`, ...
    `bind(args, kwargs)`, when given, prepares the calls of `partial(*args, **kwargs)`
    (or returns None: then each call is prepared with `args` and `kwargs` prepended).
    """

    def __init__(
        self,
        f: Callable,
        prepare: Prepare,
        bind: Callable[[tuple, dict], Prepare | None] | None = None,
    ) -> None:
        self._prepare = prepare
        self._bind = bind
        self.__wrapped__ = f
        functools.update_wrapper(self, f)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        prepared = self._prepare(args, kwargs)
        return prepared.finish(prepared.fn(*prepared.args, **prepared.kwargs))

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        """Used as a method decorator: bind like a function."""
        return self if obj is None else functools.partial(self, obj)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """`jax.jit(...).lower` for this call's arguments."""
        prepared = self._prepare(args, kwargs)
        return Lowered(prepared.fn.lower(*prepared.args, **prepared.kwargs), self._prepare)

    def partial(self, *args: Any, **kwargs: Any) -> Jitted:
        """This function with its first arguments (and keywords) given."""
        bound = self._bind(args, kwargs) if self._bind is not None else None
        if bound is not None:
            return Jitted(self.__wrapped__, bound)
        prepare = self._prepare

        def prepare_partial(more: tuple, more_kwargs: dict) -> Prepared:
            return prepare((*args, *more), {**kwargs, **more_kwargs})

        return Jitted(self.__wrapped__, prepare_partial)


class Lowered:
    """A lowered `jit` call (`Jitted.lower`): `compile()` it; JAX's other attributes of
    `jax.stages.Lowered` (`as_text`, `cost_analysis`, ...) pass through."""

    def __init__(self, lowered: Any, prepare: Callable[[tuple, dict], Prepared]) -> None:
        self._lowered = lowered
        self._prepare = prepare

    def compile(self, *args: Any, **kwargs: Any) -> Compiled:
        return Compiled(self._lowered.compile(*args, **kwargs), self._prepare)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lowered, name)


class Compiled:
    """A compiled `jit` call: called like the function (same argument structure as the
    lowering), state written back; `as_text`, `cost_analysis`, ... pass through."""

    def __init__(self, compiled: Any, prepare: Callable[[tuple, dict], Prepared]) -> None:
        self._compiled = compiled
        self._prepare = prepare

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        prepared = self._prepare(args, kwargs)
        return prepared.finish(self._compiled(*prepared.args, **prepared.kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


def jit(
    f: F | None = None,
    /,
    *,
    in_shardings: object = None,
    out_shardings: object = None,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
    donate_argnames: str | Sequence[str] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
    **jit_kwargs: Any,
) -> F:
    """`jax.jit` for functions of graph nodes; state changed inside is written back.

    Graph nodes (modules of any backend, `Rngs`, Variables) may sit anywhere in the
    arguments and the output. Arrays and Python numbers are traced, other values are
    static. The compiled function is cached per graph structure and static arguments.
    The result is a `Jitted`: call it, or `.lower(*args).compile()` it.

    Args:
        f: the function (or use `@jit(...)` with options).
        in_shardings: per positional argument (or one for all): a sharding, None
            (unspecified), or for a graph node a `StateSharding({filter: sharding})`;
            the caller's Variables are placed on their shardings (and kept there).
        out_shardings: shardings of the output (graph mode: outputs of arrays only).
        static_argnums: positions of arguments that are static (hashable) values.
        static_argnames: names of arguments that are static values.
        donate_argnums: positions of arguments whose buffers are donated (graph nodes:
            all their State leaves, which come back written into the caller's Variables).
        donate_argnames: names of donated arguments.
        graph: graph mode (the default unless `set_graph_mode` says otherwise), or
            False: tree mode, see `graph_updates`.
        graph_updates: graph mode with updates written back (True, the default), or
            simple mode (`_simple`): `jax.jit` over the arguments as pytrees, only the
            changed Variables' values written back; `graph=False` also requires trees.
        **jit_kwargs: passed on to `jax.jit` (`keep_unused`, `device`, `backend`,
            `inline`, `compiler_options`).

    Returns:
        The jitted function.

    Example:
        >>> @jit
        ... def forward(model, x):
        ...     return model(x)
    """
    options = {
        "in_shardings": in_shardings,
        "out_shardings": out_shardings,
        "static_argnums": static_argnums,
        "static_argnames": static_argnames,
        "donate_argnums": donate_argnums,
        "donate_argnames": donate_argnames,
        "graph": graph,
        "graph_updates": graph_updates,
    }
    partial = decorator_or_none(jit, f, **options, **jit_kwargs)
    if partial is not None:
        return partial
    assert f is not None
    argnums = as_argnums(static_argnums, "static_argnums")
    argnames = as_argnames(static_argnames)
    donated = as_argnums(donate_argnums, "donate_argnums")
    donated_names = as_argnames(donate_argnames)
    graph_on = graph_updates_on(graph, graph_updates)
    for name, shardings in (("in_shardings", in_shardings), ("out_shardings", out_shardings)):
        check_prefix(shardings, name, "jit", graph_updates=graph_on, mappings=(StateSharding,))
    if not graph_on:
        # the pure function takes `*args`: JAX cannot map names to positions itself
        positions = argnums + named_positions(f, argnames)
        inputs = Inputs("jit", tree_mode(graph), positions, argnames)
        if in_shardings is not None:
            jit_kwargs["in_shardings"] = in_shardings
        if donated or donated_names:
            donated += named_positions(f, donated_names)
            jit_kwargs.update(donate_argnums=donated, donate_argnames=donated_names)
        simple = simple_jit(f, inputs, out_shardings, jit_kwargs)
        bindable = not (positions or in_shardings is not None or donated or donated_names)

        def bind(given: tuple, given_kwargs: dict) -> Prepare | None:
            if given_kwargs or not bindable:
                return None
            return BoundJit(given, inputs, simple.pure, simple.jit_kwargs, simple.prepare).prepare

        return Jitted(f, simple.prepare, bind)  # type: ignore[return-value]  # Jitted calls like f (and adds lower/eval_shape)
    if is_graph_node(f):
        return _jit_module(f, argnums, argnames, in_shardings, donated, options, jit_kwargs)  # type: ignore[return-value]  # Jitted calls like f (its model given)
    unsupported = sorted(set(jit_kwargs) & _JIT_UNSUPPORTED)
    if unsupported:
        raise TypeError(
            f"`jit` of graph nodes does not take {', '.join(map(repr, unsupported))} in graph "
            "mode. Pass `graph_updates=False` (simple mode: `jax.jit` over the arguments as "
            "pytrees)."
        )
    graph_jit = _GraphJit(
        f,
        argnums + named_positions(f, argnames),
        argnames,
        in_shardings,
        out_shardings,
        donated + named_positions(f, donated_names),
        donated_names,
        jit_kwargs,
    )
    return Jitted(f, graph_jit.prepare)  # type: ignore[return-value]  # Jitted calls like f (and adds lower/eval_shape)


def _call_module(module: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return module(*args, **kwargs)


def _jit_module(
    module: Any,
    argnums: tuple[int, ...],
    argnames: tuple[str, ...],
    in_shardings: object,
    donated: tuple[int, ...],
    options: dict[str, Any],
    jit_kwargs: dict[str, Any],
) -> Jitted:
    """`jit(model)`: the model is an argument, as `eqx.filter_jit(model)` makes it, not a
    constant closed over (Flax NNX's `nnx.jit(model)`: the weights are baked into the
    compiled function, so an update of the model afterwards goes unseen, and a layer
    writing its state raises). Argument numbers and shardings count the call's own
    arguments, so they move by one past the model."""
    shardings = in_shardings
    if isinstance(in_shardings, tuple | list):
        shardings = (None, *in_shardings)
    lifted = dict(options, in_shardings=shardings)
    lifted |= {
        "static_argnums": tuple(n + 1 if n >= 0 else n for n in argnums),
        "static_argnames": argnames,
        "donate_argnums": tuple(n + 1 if n >= 0 else n for n in donated),
    }
    return jit(_call_module, **lifted, **jit_kwargs).partial(module)


def jit_partial(f: Callable[..., Any], *partial_args: Any, **jit_options: Any) -> Jitted:
    """`jit(f, **jit_options)` with its first arguments given (models, usually): the
    result takes the remaining arguments, writes state back into the given models, and
    has `.lower` like any `Jitted`. `in_shardings`, if given, covers all arguments,
    the given ones first.

    Args:
        f: the function.
        *partial_args: its first positional arguments.
        **jit_options: options of `jit`.

    Returns:
        The jitted function of the remaining arguments.
    """
    if tree_mode(jit_options.get("graph")):
        check_tree(partial_args, name="jit_partial")
    return jit(f, **jit_options).partial(*partial_args)
