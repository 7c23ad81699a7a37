"""Graph operations of bryo against flax.nnx (graph mode) and raw jax.tree_util.

Part 1: models of N = 10, 100, 1000 layers of Linear(8, 8). For each N, prints the time
of `split`, `merge`, `state(model, Param)` and `update` for bryo and flax.nnx, and the raw
pytree operation on an equivalent dict of arrays (flatten for split/state/update,
unflatten for merge), with the ratios bryo/flax and bryo/raw, and bryo's cost per layer.
`merge` is the steady state (a GraphDef merged again and again).

Part 2: change tracking. `split` of a 100-layer model and a `bryo.nnx.jit` call of it
(`jit(lambda m, x: m(x))`), each alone and each right after an attribute write to an
unrelated module (`other.flag = 1`); the ratio should stay near 1 (target <= 1.2).

Part 3: the first `merge` of a GraphDef (N = 1000, 10000), time and peak Python
allocation (tracemalloc) against flax.nnx's first merge of the same model (target <= 1).

Run: hatch run bench:python benchmarks/graph_bench.py [--quick]   (flax is installed there)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import timeit
import tracemalloc
from collections.abc import Callable

import jax
import numpy as np

from bryo_graph import List, Object, Param, graphdef, merge, split, state, update


class Linear(Object):
    def __init__(self, din: int, dout: int, rng: np.random.Generator) -> None:
        self.kernel = Param(jax.numpy.asarray(rng.normal(size=(din, dout)), np.float32))
        self.bias = Param(jax.numpy.zeros((dout,), np.float32))
        self.din, self.dout = din, dout


class Stack(Object):
    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(0)
        self.layers = List([Linear(8, 8, rng) for _ in range(n)])


def flax_stack(n: int):
    from flax import nnx

    class FlaxStack(nnx.Module):
        def __init__(self, n: int, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(8, 8, rngs=rngs) for _ in range(n)])

    return nnx, FlaxStack(n, nnx.Rngs(0))


def best(fn, number: int) -> float:
    """Best of 5 repeats, seconds per call."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def bench(n: int) -> dict[str, dict[str, float]]:
    number = max(3, 3000 // n)
    model = Stack(n)
    graphdef_, params = split(model)
    times: dict[str, dict[str, float]] = {"bryo": {}, "flax": {}, "raw": {}}
    times["bryo"]["split"] = best(lambda: split(model), number)
    for _ in range(20):  # the steady state: a GraphDef merged again and again
        merge(graphdef_, params)
    times["bryo"]["merge"] = best(lambda: merge(graphdef_, params), number)
    times["bryo"]["state"] = best(lambda: state(model, Param), number)
    times["bryo"]["update"] = best(lambda: update(model, params), number)

    nnx, fmodel = flax_stack(n)
    fgraphdef, fparams = nnx.split(fmodel)
    times["flax"]["split"] = best(lambda: nnx.split(fmodel), number)
    times["flax"]["merge"] = best(lambda: nnx.merge(fgraphdef, fparams), number)
    times["flax"]["state"] = best(lambda: nnx.state(fmodel, nnx.Param), number)
    times["flax"]["update"] = best(lambda: nnx.update(fmodel, fparams), number)

    layers = model.layers
    raw = {"layers": [{"kernel": la.kernel.value, "bias": la.bias.value} for la in layers]}
    leaves, treedef = jax.tree_util.tree_flatten(raw)
    flatten = best(lambda: jax.tree_util.tree_flatten(raw), number)
    times["raw"] = {
        "split": flatten,
        "state": flatten,
        "update": flatten,
        "merge": best(lambda: jax.tree_util.tree_unflatten(treedef, leaves), number),
    }
    assert graphdef(model) is graphdef_, "re-splitting an unchanged model rebuilt its graphdef"
    return times


def interleaved(cases: dict[str, Callable[[], object]], number: int, rounds: int = 11) -> dict:
    """Best and median CPU seconds (this process) per call of each case; the cases take
    turns within each round, so that a busy machine slows them alike, and CPU time leaves
    out the time other processes hold the cores (wall time on a shared machine does not)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                for _ in range(number):
                    case()
                times[name].append((time.process_time() - start) / number)
            finally:
                gc.enable()
    return {name: (min(runs), statistics.median(runs)) for name, runs in times.items()}


def tracking_rows(n: int = 100) -> None:
    """split and a jitted call, alone and right after a write to an unrelated module."""
    from bryo import nnx

    class Stack(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(4, 4, rngs=rngs) for _ in range(n)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    class Other(nnx.Module):
        pass

    model, other = Stack(nnx.Rngs(0)), Other()
    forward = nnx.jit(lambda m, x: m(x))
    x = jax.numpy.ones((1, 4))
    jax.block_until_ready(forward(model, x))

    def write() -> None:
        other.flag = 1

    def split_after_write() -> None:
        other.flag = 1
        split(model)

    def jit_call() -> None:
        jax.block_until_ready(forward(model, x))

    def jit_after_write() -> None:
        other.flag = 1
        jax.block_until_ready(forward(model, x))

    times = interleaved(
        {
            "write": write,
            "split": lambda: split(model),
            "split after write": split_after_write,
            "jit": jit_call,
            "jit after write": jit_after_write,
        },
        number=200,
    )
    print(
        f"\nchange tracking, N = {n} (best and median of 11 interleaved rounds, "
        "CPU microseconds per call)"
    )
    print(f"  {'other.flag = 1 alone':<28} {times['write'][0] * 1e6:10.1f}")
    for op in ("split", "jit"):
        (alone, alone_median), (after, after_median) = times[op], times[f"{op} after write"]
        print(
            f"  {op + ' after an unrelated write':<28} {after * 1e6:10.1f}  vs alone "
            f"{alone * 1e6:10.1f}: {after / alone:5.2f}x (target <= 1.2; median "
            f"{after_median / alone_median:5.2f}x)"
        )


def first_merge(build: Callable[[], tuple[Callable[[], object]]]) -> tuple[float, int]:
    """Seconds of `merge_once()` for a freshly built model, and the peak traced bytes of
    another fresh model's first merge (tracing allocations slows the code it traces)."""
    (merge_once,) = build()
    gc.collect()
    start = time.perf_counter()
    merge_once()
    seconds = time.perf_counter() - start
    (merge_once,) = build()
    gc.collect()
    tracemalloc.start()
    merge_once()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def cold_merge_rows(sizes: tuple[int, ...]) -> None:
    """The first merge of a model's GraphDef, bryo vs flax.nnx."""

    def bryo_case(n: int) -> Callable:
        def build() -> tuple[Callable[[], object]]:
            graphdef_, params = split(Stack(n))  # a new model: a GraphDef never merged
            return (lambda: merge(graphdef_, params),)

        return build

    def flax_case(n: int) -> Callable:
        def build() -> tuple[Callable[[], object]]:
            nnx, fmodel = flax_stack(n)
            fgraphdef, fparams = nnx.split(fmodel)
            return (lambda: nnx.merge(fgraphdef, fparams),)

        return build

    print("\nfirst merge of a GraphDef (best of 3 fresh models; peak Python allocation)")
    for n in sizes:
        bryo_runs = [first_merge(bryo_case(n)) for _ in range(3)]
        flax_runs = [first_merge(flax_case(n)) for _ in range(3)]
        b_s, b_mem = min(r[0] for r in bryo_runs), min(r[1] for r in bryo_runs)
        f_s, f_mem = min(r[0] for r in flax_runs), min(r[1] for r in flax_runs)
        print(
            f"  N = {n:>5}: bryo {b_s * 1e3:8.1f} ms {b_mem / 2**20:7.1f} MiB   flax.nnx "
            f"{f_s * 1e3:8.1f} ms {f_mem / 2**20:7.1f} MiB   time {b_s / f_s:5.2f}x, "
            f"memory {b_mem / f_mem:5.2f}x (target <= 1)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1000 only in part 1")
    parser.add_argument("--part", type=int, choices=(1, 2, 3), action="append")
    parser.add_argument(
        "--merge-sizes", type=int, nargs="+", default=[1000, 10000], help="N of part 3"
    )
    args = parser.parse_args()
    parts = set(args.part or (1, 2, 3))
    print(f"jax {jax.__version__}; times in microseconds per call")
    if 1 in parts:
        print(
            f"{'N':>5} {'op':<7} {'bryo':>10} {'flax.nnx':>10} {'raw':>9} "
            f"{'flax/bryo':>10} {'bryo/raw':>9} {'bryo/layer':>11}"
        )
        for n in (1000,) if args.quick else (10, 100, 1000):
            times = bench(n)
            for op in ("split", "merge", "state", "update"):
                b, f, r = times["bryo"][op], times["flax"][op], times["raw"][op]
                print(
                    f"{n:>5} {op:<7} {b * 1e6:>10.1f} {f * 1e6:>10.1f} {r * 1e6:>9.1f} "
                    f"{f / b:>9.1f}x {b / r:>8.1f}x {b / n * 1e6:>10.3f}"
                )
    if 2 in parts:
        tracking_rows()
    if 3 in parts:
        cold_merge_rows(tuple(args.merge_sizes))


if __name__ == "__main__":
    main()
