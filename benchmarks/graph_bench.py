"""Graph operations of bryo against flax.nnx (graph mode) and raw jax.tree_util.

Models of N = 10, 100, 1000 layers of Linear(8, 8). For each N, prints the time of
`split`, `merge`, `state(model, Param)` and `update` for bryo and flax.nnx, and the raw
pytree operation on an equivalent dict of arrays (flatten for split/state/update,
unflatten for merge), with the ratios bryo/flax and bryo/raw, and bryo's cost per layer.

Run: hatch run bench:python benchmarks/graph_bench.py   (flax is installed there)
"""

from __future__ import annotations

import timeit

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


def main() -> None:
    print(f"jax {jax.__version__}; times in microseconds per call")
    print(
        f"{'N':>5} {'op':<7} {'bryo':>10} {'flax.nnx':>10} {'raw':>9} "
        f"{'flax/bryo':>10} {'bryo/raw':>9} {'bryo/layer':>11}"
    )
    for n in (10, 100, 1000):
        times = bench(n)
        for op in ("split", "merge", "state", "update"):
            b, f, r = times["bryo"][op], times["flax"][op], times["raw"][op]
            print(
                f"{n:>5} {op:<7} {b * 1e6:>10.1f} {f * 1e6:>10.1f} {r * 1e6:>9.1f} "
                f"{f / b:>9.1f}x {b / r:>8.1f}x {b / n * 1e6:>10.3f}"
            )


if __name__ == "__main__":
    main()
