"""Scan over a stack of MLP blocks under `grad`: compile time and compiled temp memory.

For N blocks (hidden 256; batch 32 and 1024; N = 16, 64, 128) it compiles the gradient of
a residual MLP stack written as a Python loop, as `jax.lax.scan`, as `lax.scan` of a
`jax.checkpoint`ed block, and with `bryo_scan.fold` under each remat policy, then prints
the compile time and `memory_analysis().temp_size_in_bytes` of each, with ratios against
the anchors measured in the same run:

- memory: `remat=False` vs `lax.scan`, `remat=True` vs `lax.scan(checkpoint(block))`,
  `nested` vs `remat=True` (same N and batch);
- compile time: each variant at N vs the same variant at N = 16.

Run: `python benchmarks/scan_bench.py` (about a few minutes on a laptop CPU);
`--quick` for N = 16, 64 only; `--loop-max N` caps the Python loop's N
(64 by default: unrolled, it takes minutes to compile at N = 128). Compile time is the
CPU time of tracing, lowering and compiling.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

import bryo_scan

HIDDEN = 256


def block(x: jax.Array, layer: dict[str, jax.Array]) -> jax.Array:
    h = jax.nn.relu(x @ layer["w1"] + layer["b1"])
    return x + h @ layer["w2"] + layer["b2"]


def named_block(x: jax.Array, layer: dict[str, jax.Array]) -> jax.Array:
    """`block` with its hidden activation named "h" for `save_block_internals`."""
    h = bryo_scan.tree_checkpoint_name(jax.nn.relu(x @ layer["w1"] + layer["b1"]), "h")
    return x + h @ layer["w2"] + layer["b2"]


def make_params(n: int) -> dict[str, jax.ShapeDtypeStruct]:
    mat = jax.ShapeDtypeStruct((n, HIDDEN, HIDDEN), jnp.float32)
    vec = jax.ShapeDtypeStruct((n, HIDDEN), jnp.float32)
    return {"w1": mat, "b1": vec, "w2": mat, "b2": vec}


def python_loop(x, params):
    for i in range(params["w1"].shape[0]):
        x = block(x, jax.tree_util.tree_map(lambda a, i=i: a[i], params))
    return x


def lax_scan(x, params):
    return jax.lax.scan(lambda c, p: (block(c, p), None), x, params)[0]


def lax_scan_checkpointed(x, params):
    step = jax.checkpoint(lambda c, p: (block(c, p), None), prevent_cse=False)
    return jax.lax.scan(step, x, params)[0]


def bryo(remat: object, body: Callable = block) -> Callable:
    def run(x, params):
        return bryo_scan.fold(body, 0, remat=remat)(x, params)

    return run


VARIANTS: dict[str, Callable] = {
    "python loop": python_loop,
    "lax.scan": lax_scan,
    "lax.scan(checkpoint)": lax_scan_checkpointed,
    "bryo remat=False": bryo(False),
    "bryo remat=True": bryo(True),
    "bryo remat='nested'": bryo("nested"),
    "bryo remat='save_all'": bryo("save_all"),
    "bryo save ['h']": bryo(
        bryo_scan.ScanCheckpointPolicy(save_block_internals=["h"]), named_block
    ),
}


def measure(forward: Callable, n: int, batch: int) -> tuple[float, int]:
    """Trace, lower and compile `grad(sum(forward(x, params)**2))`.

    Returns the CPU seconds this process spent (all threads; steadier than wall-clock
    time on a shared machine) and the compiled program's temp bytes.
    """
    loss = lambda params, x: jnp.sum(forward(x, params) ** 2)
    x = jax.ShapeDtypeStruct((batch, HIDDEN), jnp.float32)
    start = time.process_time()
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(make_params(n), x).compile()
    seconds = time.process_time() - start
    return seconds, compiled.memory_analysis().temp_size_in_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--loop-max",
        type=int,
        default=64,
        help="largest N for the Python loop (its compile time grows with N; default 64)",
    )
    args = parser.parse_args()
    sizes = (16, 64) if args.quick else (16, 64, 128)
    batches = (32, 1024)
    print(f"device: {jax.devices()[0]}, jax {jax.__version__}, hidden {HIDDEN}")
    measure(lax_scan, 2, 8)  # warm-up: the first compile pays one-time costs
    results: dict[tuple[str, int, int], tuple[float, int]] = {}
    for batch in batches:
        print(f"\nbatch {batch}")
        print(
            f"{'variant':24} {'N':>4} {'compile s':>10} {'vs N=16':>8} {'temp MiB':>10} "
            f"{'vs anchor':>10}  anchor"
        )
        for name, forward in VARIANTS.items():
            for n in sizes:
                if name == "python loop" and n > args.loop_max:
                    continue
                results[name, n, batch] = seconds, temp = measure(forward, n, batch)
                base_seconds = results[name, sizes[0], batch][0]
                anchor = _anchor(name)
                ratio = (
                    f"{temp / results[anchor, n, batch][1]:10.2f}"
                    if anchor and (anchor, n, batch) in results and results[anchor, n, batch][1]
                    else f"{'':10}"
                )
                print(
                    f"{name:24} {n:4d} {seconds:10.2f} {seconds / base_seconds:8.2f} "
                    f"{temp / 2**20:10.2f} {ratio}  {anchor or ''}",
                    flush=True,
                )
    _check_targets(results, sizes, batches)


def _anchor(name: str) -> str | None:
    return {
        "bryo remat=False": "lax.scan",
        "bryo remat=True": "lax.scan(checkpoint)",
        "bryo remat='nested'": "bryo remat=True",
        "bryo remat='save_all'": "lax.scan",
        "bryo save ['h']": "bryo remat=True",
        "lax.scan(checkpoint)": "lax.scan",
        "python loop": "lax.scan",
    }.get(name)


def _check_targets(results: dict, sizes: tuple[int, ...], batches: tuple[int, ...]) -> None:
    print("\ntargets")
    largest, smallest = sizes[-1], sizes[0]
    for batch in batches:
        for name in ("bryo remat=False", "bryo remat=True", "bryo remat='nested'"):
            ratio = results[name, largest, batch][0] / results[name, smallest, batch][0]
            print(
                f"  compile {name} N={largest}/N={smallest} batch {batch}: {ratio:.2f} "
                "(target <= 1.5)"
            )
        for n in sizes:
            for ours, anchor in (
                ("bryo remat=False", "lax.scan"),
                ("bryo remat=True", "lax.scan(checkpoint)"),
            ):
                ok = results[ours, n, batch][1] <= results[anchor, n, batch][1]
                print(f"  temp {ours} <= {anchor} (N={n}, batch {batch}): {'yes' if ok else 'NO'}")
        for n in sizes:
            nested = results["bryo remat='nested'", n, batch][1]
            full = results["bryo remat=True", n, batch][1]
            print(
                f"  temp nested / remat=True (N={n}, batch {batch}): {nested / full:.2f} "
                f"(target <= 1; {nested / 2**20:.2f} vs {full / 2**20:.2f} MiB)"
            )


if __name__ == "__main__":
    main()
