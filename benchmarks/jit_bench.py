"""Call overhead of a jitted model: bryo's `jit` vs `jax.jit`, `flax.nnx.jit`, `eqx.filter_jit`.

As in Flax's own benchmark: a stack of N tiny Linear layers applied in a loop, time per
call including `block_until_ready`. The baseline is `jax.jit` of a pure function of the
same arrays; every other variant is reported as a ratio to it, measured in the same run.

    python benchmarks/jit_bench.py [--layers 10 100] [--calls 300] [--features 4]

bryo's `jit` gets within a small factor of the pure call because it caches the model's
flattening and the compiled function per structure, reads the Variables' values into a
flat list, and writes back only the Variables the call changed. The tree-mode rows pass
the module itself to a plain `jax.jit` (modules are pytrees): JAX flattens it on every
call, so its cost is the module's pytree flatten (bryo caches each node's treedef).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp


def _time_rounds(calls: dict[str, Callable[[], object]], n_calls: int, rounds: int) -> dict:
    """Per case, the time per call of each round; the cases take turns within a round so
    that a busy machine slows them alike. The garbage collector runs before each round
    and is off during it, as in `timeit`."""
    for call in calls.values():
        jax.block_until_ready(call())  # compile
        jax.block_until_ready(call())
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            gc.collect()  # as `timeit` does: no case pays for another's garbage
            gc.disable()
            try:
                start = time.perf_counter()
                for _ in range(n_calls):
                    jax.block_until_ready(call())
                times[name].append((time.perf_counter() - start) / n_calls)
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


def _nnx_case(library: str, tree_mode: bool) -> Callable[[int, int], Callable[[], object]]:
    """`library`'s `nnx.jit` (graph mode), or a plain `jax.jit` of the module (tree mode:
    modules are pytrees in Flax 0.12 and bryo)."""

    def case(n: int, features: int) -> Callable[[], object]:
        if library == "bryo":
            from bryo import nnx
        else:
            from flax import nnx
        model, x = _stack(nnx, n, features), jnp.ones((1, features))
        forward = (jax.jit if tree_mode else nnx.jit)(lambda model, x: model(x))
        return lambda: forward(model, x)

    return case


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


CASES = {
    "bryo.nnx.jit": _nnx_case("bryo", tree_mode=False),
    "flax.nnx.jit": _nnx_case("flax", tree_mode=False),
    "jax.jit(bryo module)": _nnx_case("bryo", tree_mode=True),
    "jax.jit(flax module)": _nnx_case("flax", tree_mode=True),
    "equinox.filter_jit": equinox_case,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; time per call incl. "
        f"block_until_ready; {args.rounds} rounds of {args.calls} calls, cases interleaved; "
        "best round (and median round), ratio to the pure call\n"
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
            print(
                f"  {name:<24} {best * 1e6:10.1f} us {best / base_best:7.2f}x   "
                f"(median {median * 1e6:10.1f} us {median / base_median:7.2f}x)"
            )
        print()


if __name__ == "__main__":
    main()
