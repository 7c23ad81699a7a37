"""bryo on Equinox models versus Equinox itself, measured in one run on the same models.

Part 1: `bryo.split`/`merge` against `eqx.partition`/`eqx.combine` on a stack of N
`eqx.nn.Linear(8, 8)` layers (N = 10, 100, 1000). `split` is timed twice: on the same
model (core-graph caches the flattening of an immutable model, keyed on the root) and on a
fresh model every call (no cache: what a training loop that rebuilds its model sees).

Part 2: the overhead of a jitted call of a small Equinox MLP: `eqx.filter_jit` against
bryo's `jit` (`bryo_transforms.jit`) and against the split/merge pattern under a
plain `jax.jit` (`jax.jit(lambda params, x: merge(graphdef, params)(x))`), with a
`jax.jit` of a pure function of the same arrays as the floor.

Run: `hatch run bench:python benchmarks/equinox_bench.py` (or any env with equinox and
the bryo packages). Ratios > 1 mean bryo is faster.
"""

from __future__ import annotations

import gc
import statistics
import timeit
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

import bryo_graph
import bryo_transforms
from bryo_graph import Param, merge, split


class Stack(eqx.Module):
    """N Linear layers in a list, applied one after the other."""

    layers: list

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


def make_stack(n: int) -> Stack:
    keys = jax.random.split(jax.random.key(0), n)
    return Stack([eqx.nn.Linear(8, 8, key=k) for k in keys])


def best_time(fn: Callable[[], object], number: int, repeat: int = 5) -> float:
    """Best-of-`repeat` seconds per call."""
    fn()
    gc.collect()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def median_time(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def bench_split_merge() -> None:
    print("== split/merge vs eqx.partition/combine: Stack of N eqx.nn.Linear(8, 8) ==")
    print(
        f"{'N':>5} | {'eqx.partition':>13} {'bryo.split':>12} {'uncached':>12} "
        f"{'x cached':>9} {'x uncached':>10} | {'eqx.combine':>12} {'bryo.merge':>12} {'x':>6}"
    )
    for n in (10, 100, 1000):
        bench_split_merge_at(n)


def bench_split_merge_at(n: int) -> None:
    model = make_stack(n)
    number = max(3, 3000 // n)
    dynamic, static = eqx.partition(model, eqx.is_array)
    graphdef, params = split(model, Param)
    # One fresh model per call of the uncached split (best_time makes 5 * number + 1 calls).
    fresh = iter([merge(graphdef, params) for _ in range(number * 5 + 1)])

    t_partition = best_time(lambda: eqx.partition(model, eqx.is_array), number)
    t_split = best_time(lambda: split(model, Param), number)
    t_uncached = best_time(lambda: split(next(fresh), Param), number)
    t_combine = best_time(lambda: eqx.combine(dynamic, static), number)
    t_merge = best_time(lambda: merge(graphdef, params), number)
    print(
        f"{n:>5} | {fmt(t_partition):>13} {fmt(t_split):>12} {fmt(t_uncached):>12} "
        f"{t_partition / t_split:>8.1f}x {t_partition / t_uncached:>9.1f}x | "
        f"{fmt(t_combine):>12} {fmt(t_merge):>12} {t_combine / t_merge:>5.1f}x"
    )


def bench_jit() -> None:
    print("\n== jitted call overhead: eqx.nn.MLP(8, 8, width 8, depth 2), x = f32[8] ==")
    model = eqx.nn.MLP(8, 8, 8, 2, key=jax.random.key(1))
    x = jnp.ones(8)

    def forward(model: eqx.Module, x: jax.Array) -> jax.Array:
        return model(x)

    results: dict[str, float] = {}
    filter_jitted = eqx.filter_jit(forward)
    results["eqx.filter_jit"] = median_time(
        lambda: filter_jitted(model, x).block_until_ready(), number=300
    )

    bryo_jitted = bryo_transforms.jit(forward)
    results["bryo_transforms.jit"] = median_time(
        lambda: bryo_jitted(model, x).block_until_ready(), number=300
    )

    graphdef = bryo_graph.graphdef(model)
    pure = jax.jit(lambda params, x: merge(graphdef, params)(x))
    results["jax.jit(merge) + bryo.state"] = median_time(
        lambda: pure(bryo_graph.state(model), x).block_until_ready(), number=300
    )

    dynamic, static = eqx.partition(model, eqx.is_array)
    floor = jax.jit(lambda dynamic, x: eqx.combine(dynamic, static)(x))
    results["jax.jit pure (floor)"] = median_time(
        lambda: floor(dynamic, x).block_until_ready(), number=300
    )

    anchor = results["eqx.filter_jit"]
    for name, seconds in results.items():
        print(f"  {name:<30} {fmt(seconds)}   filter_jit/this = {anchor / seconds:5.2f}x")


if __name__ == "__main__":
    print(f"jax {jax.__version__}, equinox {eqx.__version__}, device {jax.devices()[0]}")
    bench_split_merge()
    bench_jit()
