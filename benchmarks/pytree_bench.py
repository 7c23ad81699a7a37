"""Flatten-to-path-dict and back, bryo versus `jax.tree_util`, on trees of growing size.

bryo's round trip is `flatten_with_treedef` (the `{path: leaf}` dict that
`flatten_to_paths` returns, plus the treedef) followed by `unflatten_paths`; the anchor is
`jax.tree_util.tree_flatten_with_path` followed by `tree_unflatten`, measured in the same
run on the same trees. bryo caches a structure's paths per treedef, so the steady state
(the same structure again, as in a training loop) is what the first rows measure; the
`1st flatten` row clears that cache before every call. Trees are nested dicts and lists
of small numpy arrays (the leaf type does not matter to either side). Run:

    hatch run bench:pytree            # or: python benchmarks/pytree_bench.py [--quick]

Target: every ratio within 2x of jax.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

import numpy as np
from jax.tree_util import tree_flatten_with_path, tree_unflatten

from bryo_pytree import flatten_to_paths, flatten_with_treedef, unflatten_paths
from bryo_pytree._paths import _PATH_CACHE

SIZES = (10, 1_000, 100_000)


def make_tree(num_leaves: int) -> dict:
    """`num_leaves` small arrays in a model-like nest: a list of blocks of dicts and lists."""
    leaf = np.zeros(2, np.float32)
    blocks = [
        {"attn": {"q": leaf, "k": leaf}, "mlp": [leaf, {"bias": leaf}]}
        for _ in range(num_leaves // 4)
    ]
    extra = [leaf] * (num_leaves % 4)
    return {"layers": blocks, "extra": extra}


def best_of(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Seconds per call: the best of `repeat` runs of `number` calls (the least noisy)."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def bench(num_leaves: int, repeat: int) -> dict[str, tuple[float, float]]:
    tree = make_tree(num_leaves)
    number = max(1, 20_000 // num_leaves)

    jax_with_path, jax_treedef = tree_flatten_with_path(tree)
    jax_leaves = [leaf for _, leaf in jax_with_path]
    flat, treedef = flatten_with_treedef(tree)
    assert len(flat) == num_leaves == len(jax_leaves)
    unflatten_paths(flat, treedef)  # warm the treedef-path cache, as any second call would

    def jax_flatten() -> object:
        return tree_flatten_with_path(tree)

    def jax_unflatten() -> object:
        return tree_unflatten(jax_treedef, jax_leaves)

    def jax_round_trip() -> object:
        with_path, td = tree_flatten_with_path(tree)
        return tree_unflatten(td, [leaf for _, leaf in with_path])

    def bryo_flatten() -> object:
        return flatten_to_paths(tree)

    def bryo_unflatten() -> object:
        return unflatten_paths(flat, treedef)

    def bryo_round_trip() -> object:
        flat, td = flatten_with_treedef(tree)
        return unflatten_paths(flat, td)

    def bryo_first_flatten() -> object:
        _PATH_CACHE.clear()  # a structure never seen before: paths computed from scratch
        return flatten_to_paths(tree)

    pairs = {
        "flatten": (bryo_flatten, jax_flatten),
        "unflatten": (bryo_unflatten, jax_unflatten),
        "round trip": (bryo_round_trip, jax_round_trip),
        "1st flatten": (bryo_first_flatten, jax_flatten),
    }
    return {
        name: (best_of(ours, number, repeat), best_of(theirs, number, repeat))
        for name, (ours, theirs) in pairs.items()
    }


def _fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:7.2f} {unit}"
    return f"{seconds / 1e-9:7.0f} ns"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 7

    print(f"{'leaves':>8}  {'operation':<11} {'bryo':>11} {'jax':>11} {'bryo/jax':>9}")
    ratios = []
    for size in SIZES:
        for name, (ours, theirs) in bench(size, repeat).items():
            ratio = ours / theirs
            ratios.append(ratio)
            flag = "" if ratio <= 2.0 else "  > 2x"
            print(f"{size:>8}  {name:<11} {_fmt(ours)} {_fmt(theirs)} {ratio:>8.2f}x{flag}")
    print(f"geometric mean bryo/jax: {statistics.geometric_mean(ratios):.2f}x (target <= 2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
