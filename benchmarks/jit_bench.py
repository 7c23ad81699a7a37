"""Call overhead of a jitted model: bryo's `jit` vs `jax.jit`, `flax.nnx.jit`, `eqx.filter_jit`.

As in Flax's own benchmark: a stack of N tiny Linear layers applied in a loop, time per
call including `block_until_ready`. The baseline is `jax.jit` of a pure function of the
same arrays; every other variant is reported as a ratio to it, measured in the same run.

    python benchmarks/jit_bench.py [--layers 10 100] [--calls 300] [--features 4]
                                   [--depths 5 50] [--clock cpu|wall]

bryo's `jit` gets within a small factor of the pure call because it caches the model's
flattening and the compiled function per structure, reads the Variables' values into a
flat list, and writes back only the Variables the call changed. The tree-mode rows pass
the module itself to a plain `jax.jit` (modules are pytrees): JAX flattens it on every
call, so its cost is the module's pytree flatten (bryo caches each node's flattening
and keeps each Variable's, which JAX reads in C: no Python code runs per node; what is
left is JAX's own cost per custom pytree node). The `jit(graph=False)` rows are
`nnx.jit` in tree mode: JAX's flatten plus bryo's reading of the arguments, which is
checked once per structure.

Targets: `bryo.nnx.jit` <= 1.5x the pure call at N = 100; tree mode (`jax.jit(bryo
module)`) <= 1.2x the pure call at N = 10 and 100. The `jax.jit(minimal nodes)` row is
that target's floor: the same tree of custom pytree nodes (the module, its List, per
layer the Linear and its two Variables), each the cheapest node JAX has (a prebuilt
flattening read in C); JAX's own cost per custom node is the whole gap between it and the
pure call, and bryo's module is printed against it.

The second table times Flax's functional paths on the shape of Flax's own
`benchmarks/nnx_graph_overhead.py` (an MLP of Linear + BatchNorm blocks, depth 5 and 50,
with an SGD `Optimizer`, and a step that does nothing, so that only the overhead counts),
bryo.nnx against flax.nnx and pure JAX over the same arrays: `jit_partial(step, model,
optimizer, graph=False)()` (target: <= flax.nnx's and <= bryo's own `nnx.jit(step)(model,
optimizer)`), `jax.jit` of `(graphdef, state)`, the classic functional step (`merge`
inside a `jax.jit`, `split` out) and `jax.tree_util.tree_flatten_with_path(state)`.

Times are CPU seconds of this process by default (`--clock cpu`: other processes on a
shared machine do not count); each round interleaves the cases and the ratios are of
medians over the rounds.
"""

from __future__ import annotations

import argparse
import gc
import operator
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = [time.process_time]


def _time_rounds(calls: dict[str, Callable[[], object]], n_calls: int, rounds: int) -> dict:
    """Per case, the time per call of each round; the cases take turns within a round so
    that a busy machine slows them alike. The garbage collector runs before each round
    and is off during it, as in `timeit`."""
    clock = _clock[0]
    for call in calls.values():
        jax.block_until_ready(call())  # compile
        jax.block_until_ready(call())
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            gc.collect()  # as `timeit` does: no case pays for another's garbage
            gc.disable()
            try:
                start = clock()
                for _ in range(n_calls):
                    jax.block_until_ready(call())
                times[name].append((clock() - start) / n_calls)
            finally:
                gc.enable()
    return times


def pure_case(n: int, features: int) -> Callable[[], object]:
    keys = jax.random.split(jax.random.key(0), n)
    kernels = [jax.random.normal(k, (features, features)) * 0.1 for k in keys]
    biases = [jnp.zeros((features,)) for _ in range(n)]
    x = jnp.ones((1, features))

    @jax.jit
    def forward(kernels: list, biases: list, x: jax.Array) -> jax.Array:
        for kernel, bias in zip(kernels, biases, strict=True):
            x = x @ kernel + bias
        return x

    return lambda: forward(kernels, biases, x)


def _stack(nnx: object, n: int, features: int) -> object:
    """N Linear layers in a Module, built with `nnx` (bryo.nnx or flax.nnx: same code)."""

    class Stack(nnx.Module):  # type: ignore[name-defined]  # `nnx` is bryo.nnx or flax.nnx, passed as a module object
        def __init__(self, rngs: object) -> None:
            self.layers = nnx.List([nnx.Linear(features, features, rngs=rngs) for _ in range(n)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    return Stack(nnx.Rngs(0))  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx, passed as a module object


def _nnx_case(library: str, mode: str) -> Callable[[int, int], Callable[[], object]]:
    """`library`'s `nnx.jit` (`mode` "graph": graph mode; "tree": `graph=False`), or a
    plain `jax.jit` of the module ("jax": modules are pytrees in Flax 0.12 and bryo)."""

    def case(n: int, features: int) -> Callable[[], object]:
        if library == "bryo":
            from bryo import nnx
        else:
            from flax import nnx
        model, x = _stack(nnx, n, features), jnp.ones((1, features))
        if mode == "jax":
            forward = jax.jit(lambda model, x: model(x))
        else:
            forward = nnx.jit(lambda model, x: model(x), graph=mode == "graph")
        return lambda: forward(model, x)

    return case


class _MinimalNode:
    """The cheapest custom pytree node JAX has: its flattening prebuilt, read by
    `operator.attrgetter` in C (what bryo's modules and Variables do too)."""

    __slots__ = ("flattened",)

    def __init__(self, children: tuple, aux: object = None) -> None:
        self.flattened = (children, aux)


jax.tree_util.register_pytree_node(
    _MinimalNode,
    operator.attrgetter("flattened"),
    lambda aux, children: _MinimalNode(tuple(children), aux),
)


def floor_case(n: int, features: int) -> Callable[[], object]:
    """`jax.jit` of a tree of `_MinimalNode`s shaped like the bryo module (the Stack, its
    List, per layer the Linear and its two Variables): JAX's own cost per custom node,
    the least any pytree with those nodes, and so those paths, can cost."""
    keys = jax.random.split(jax.random.key(0), n)
    layers = tuple(
        _MinimalNode(
            (
                _MinimalNode((jnp.zeros((features,)),)),
                _MinimalNode((jax.random.normal(k, (features, features)) * 0.1,)),
            )
        )
        for k in keys
    )
    model, x = _MinimalNode((_MinimalNode(layers),)), jnp.ones((1, features))

    @jax.jit
    def forward(model: _MinimalNode, x: jax.Array) -> jax.Array:
        for layer in model.flattened[0][0].flattened[0]:
            bias, kernel = (v.flattened[0][0] for v in layer.flattened[0])
            x = x @ kernel + bias
        return x

    return lambda: forward(model, x)


def equinox_case(n: int, features: int) -> Callable[[], object]:
    import equinox as eqx

    keys = jax.random.split(jax.random.key(0), n)
    layers = [eqx.nn.Linear(features, features, key=k) for k in keys]
    x = jnp.ones((features,))

    @eqx.filter_jit
    def forward(layers: list, x: jax.Array) -> jax.Array:
        for layer in layers:
            x = layer(x)
        return x

    return lambda: forward(layers, x)


def _overhead_mlp(nnx: object, depth: int, width: int = 32) -> tuple[object, object]:
    """Flax's `nnx_graph_overhead.py` model with its SGD optimizer, built with `nnx`."""
    import optax

    class Linear(nnx.Module):  # type: ignore[name-defined]  # `nnx` is bryo.nnx or flax.nnx
        def __init__(self, din: int, dout: int, *, rngs: object) -> None:
            self.w = nnx.Param(jax.random.uniform(rngs.params(), (din, dout)))  # type: ignore[attr-defined]  # `nnx` and `rngs` are bryo's or flax's
            self.b = nnx.Param(jnp.zeros((dout,)))  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx

    class Block(nnx.Module):  # type: ignore[name-defined]  # `nnx` is bryo.nnx or flax.nnx
        def __init__(self, din: int, dout: int, *, rngs: object) -> None:
            self.linear = Linear(din, dout, rngs=rngs)
            self.bn = nnx.BatchNorm(dout, rngs=rngs)  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx

    class Count(nnx.Variable):  # type: ignore[name-defined]  # `nnx` is bryo.nnx or flax.nnx
        pass

    class MLP(nnx.Module):  # type: ignore[name-defined]  # `nnx` is bryo.nnx or flax.nnx
        def __init__(self, *, rngs: object) -> None:
            self.count = Count(jnp.array(0))
            self.linear_in = Block(1, width, rngs=rngs)
            self.intermediates = nnx.List(  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
                [Block(width, width, rngs=rngs) for _ in range(depth - 2)]
            )
            self.linear_out = Block(width, 1, rngs=rngs)

    model = MLP(rngs=nnx.Rngs(0))  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
    return model, nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx


def _empty_step(model: object, optimizer: object) -> None:
    """Flax's benchmark step: nothing, so that only a transform's overhead is timed."""


FUNCTIONAL_PATHS = (
    ("jit_partial(step, m, opt, graph=False)()", "jit_partial"),
    ("nnx.jit(step)(m, opt)", "jit"),
    ("jax.jit(f)(graphdef, state)", "jit_state"),
    ("merge in jax.jit, split out", "functional_step"),
    ("tree_flatten_with_path(state)", "flatten_with_path"),
)


def _functional_calls(nnx: object, depth: int) -> dict[str, Callable[[], object]]:
    """`nnx`'s call of each functional path, each on its own model and optimizer."""

    def fresh() -> tuple[object, object]:
        return _overhead_mlp(nnx, depth)

    partial = nnx.jit_partial(_empty_step, *fresh(), graph=False)  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
    graph_jit, graph_args = nnx.jit(_empty_step), fresh()  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
    graphdef, state = nnx.split(fresh())  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
    carried = [state]
    identity = jax.jit(lambda g, s: (g, s))

    def jit_state() -> object:
        carried[0] = identity(graphdef, carried[0])[1]
        return carried[0]

    @jax.jit
    def functional(s: object) -> object:
        model, optimizer = nnx.merge(graphdef, s)  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
        return nnx.split((model, optimizer))[1]  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx

    flat_state = nnx.split(fresh())[1]  # type: ignore[attr-defined]  # `nnx` is bryo.nnx or flax.nnx
    return {
        "jit_partial": partial,
        "jit": lambda: graph_jit(*graph_args),
        "jit_state": jit_state,
        "functional_step": lambda: functional(state),
        "flatten_with_path": lambda: jax.tree_util.tree_flatten_with_path(flat_state),
    }


def _pure_functional_calls(depth: int) -> dict[str, Callable[[], object]]:
    """Pure JAX over the same arrays (a nested dict of them): each path's counterpart."""
    from flax import nnx

    state = nnx.split(_overhead_mlp(nnx, depth))[1].to_pure_dict()
    ignore = jax.jit(lambda s: None)
    identity = jax.jit(lambda s: s)
    carried = [state]

    def jit_state() -> object:
        carried[0] = identity(carried[0])
        return carried[0]

    return {
        "jit_partial": lambda: ignore(state),
        "jit": lambda: ignore(state),
        "jit_state": jit_state,
        "functional_step": lambda: identity(state),
        "flatten_with_path": lambda: jax.tree_util.tree_flatten_with_path(state),
    }


def functional_rows(depths: list[int], n_calls: int, rounds: int) -> None:
    """The second table: Flax's functional paths, bryo.nnx vs flax.nnx vs pure JAX."""
    from flax import nnx as flax_nnx

    from bryo import nnx as bryo_nnx

    print(
        "Flax's functional paths on nnx_graph_overhead.py's MLP + SGD optimizer (empty "
        "step); median us per call, ratios of medians"
    )
    for depth in depths:
        bryo_calls = _functional_calls(bryo_nnx, depth)
        flax_calls = _functional_calls(flax_nnx, depth)
        pure_calls = _pure_functional_calls(depth)
        calls = {}
        for _, key in FUNCTIONAL_PATHS:
            calls.update({("bryo", key): bryo_calls[key], ("flax", key): flax_calls[key]})
            calls[("pure", key)] = pure_calls[key]
        times = _time_rounds(calls, n_calls, rounds)  # type: ignore[arg-type]  # keyed by (library, path) pairs
        median = {name: statistics.median(runs) for name, runs in times.items()}
        print(
            f"depth {depth}: {'path':<42} {'bryo':>9} {'flax.nnx':>9} {'pure':>9} "
            f"{'bryo/flax':>9} {'bryo/pure':>9}"
        )
        for label, key in FUNCTIONAL_PATHS:
            b, f, p = median[("bryo", key)], median[("flax", key)], median[("pure", key)]
            print(
                f"         {label:<42} {b * 1e6:9.1f} {f * 1e6:9.1f} {p * 1e6:9.1f} "
                f"{b / f:8.2f}x {b / p:8.2f}x"
            )
        partial, graph_jit = median[("bryo", "jit_partial")], median[("bryo", "jit")]
        print(
            f"         bryo jit_partial / bryo nnx.jit: {partial / graph_jit:.2f}x (target <= 1); "
            f"/ flax.nnx jit_partial: {partial / median[('flax', 'jit_partial')]:.2f}x "
            "(target <= 1)\n"
        )


CASES = {
    "bryo.nnx.jit": _nnx_case("bryo", "graph"),
    "flax.nnx.jit": _nnx_case("flax", "graph"),
    "bryo jit(graph=False)": _nnx_case("bryo", "tree"),
    "flax jit(graph=False)": _nnx_case("flax", "tree"),
    "jax.jit(bryo module)": _nnx_case("bryo", "jax"),
    "jax.jit(flax module)": _nnx_case("flax", "jax"),
    "jax.jit(minimal nodes)": floor_case,
    "equinox.filter_jit": equinox_case,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--depths", type=int, nargs="*", default=[5, 50])
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    _clock[0] = CLOCKS[args.clock]
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; {args.clock} time per call "
        f"incl. block_until_ready; {args.rounds} rounds of {args.calls} calls, cases "
        "interleaved; best round (and median round), ratio to the pure call; spread: the "
        "lowest and highest ratio of one round's time to the pure call's in that round\n"
    )
    for n in args.layers:
        calls = {"jax.jit (pure function)": pure_case(n, args.features)}
        for name, case in CASES.items():
            try:
                calls[name] = case(n, args.features)
            except ImportError as error:
                print(f"  {name:<24} skipped ({error})")
        times = _time_rounds(calls, args.calls, args.rounds)
        base_best = min(times["jax.jit (pure function)"])
        base_median = statistics.median(times["jax.jit (pure function)"])
        print(f"N = {n} Linear layers ({args.features} -> {args.features})")
        for name, runs in times.items():
            best, median = min(runs), statistics.median(runs)
            per_round = [t / p for t, p in zip(runs, times["jax.jit (pure function)"], strict=True)]
            print(
                f"  {name:<24} {best * 1e6:10.1f} us {best / base_best:7.2f}x   "
                f"(median {median * 1e6:10.1f} us {median / base_median:7.2f}x, "
                f"spread {min(per_round):.2f}-{max(per_round):.2f})" + _target(name, n)
            )
        _print_floor_ratio(times)
        print()
    if args.depths:
        functional_rows(args.depths, args.calls, args.rounds)


def _print_floor_ratio(times: dict[str, list[float]]) -> None:
    """bryo's tree mode against the floor of the same custom nodes (JAX's own cost)."""
    module, floor = times["jax.jit(bryo module)"], times["jax.jit(minimal nodes)"]
    per_round = sorted(m / f for m, f in zip(module, floor, strict=True))
    print(
        f"  jax.jit(bryo module) / jax.jit(minimal nodes): {statistics.median(per_round):.2f}x "
        f"(spread {per_round[0]:.2f}-{per_round[-1]:.2f}): what bryo adds to JAX's cost of "
        "those nodes (the target's gap is that cost: see docs/transforms.md)"
    )


def _target(case: str, n: int) -> str:
    """The bar a case's median ratio has to stay under, if it has one at `n` layers."""
    if case == "bryo.nnx.jit" and n == 100:
        return "  target <= 1.5x"
    if case == "jax.jit(bryo module)" and n in (10, 100):
        return "  target <= 1.2x"
    return ""


if __name__ == "__main__":
    main()
