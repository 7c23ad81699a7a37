"""Hostile MoX files: what each shape costs to load, per byte, against a real model's file.

A file within every default `Limits` can still be built to cost more per byte than a
model's file: many distinct literals, types or traced ports, many small nodes, a YSON
text outside the layout `dumps` writes (read by the exact reader). Each row loads one
crafted file (about `--megabytes` MB) in a fresh interpreter and prints its CPU time and
peak memory added, as MB/s and bytes of memory per byte of file, and their ratios to the
NNX transformer's file of `mox_bench` (`--blocks` blocks) loaded the same way in the same
run (the anchor; target: a few times it at most, or a quick MoxLimitError).

Run: `python benchmarks/mox_hostile_bench.py [--megabytes 10] [--blocks 128]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

#: One XML node per crafted equation, root input or module call (`k` numbers it).
_A = '<input type="f32[3]">a</input>'
SHAPES = {
    "distinct literals": (
        _A,
        lambda k: (
            f'<mul>{_A}<input type="f32[]" value="{k}.5"/><output type="f32[3]">e{k}</output></mul>'
        ),
    ),
    "equal equations": (
        _A,
        lambda k: f'<sin accuracy="None">{_A}<output type="f32[3]">e{k}</output></sin>',
    ),
    "root inputs": ("", lambda k: f'<input type="f32[3]">a{k}</input>'),
    "distinct types": ("", lambda k: f'<input type="f32[{k + 1}]">a{k}</input>'),
    "module calls": (
        _A,
        lambda k: (
            f'<module_call type="M" name="m{k}">{_A}<output type="f32[3]">o{k}'
            '</output><outputs type="f32[3]">a</outputs></module_call>'
        ),
    ),
    "one wide equation": (_A, lambda k: _A),
}


def crafted(shape: str, megabytes: float) -> str:
    """An XML file of about `megabytes` MB of `shape`'s nodes."""
    head, node = SHAPES[shape]
    count = int(megabytes * 1e6 / (len(node(10**5)) + 1))
    nodes = "\n".join(node(k) for k in range(count))
    if shape == "one wide equation":
        nodes = f'<add>\n{nodes}\n<output type="f32[3]">e0</output></add>'
    # the root returns its first input: `a`, or the first of the crafted inputs
    result = '<outputs type="f32[3]">a</outputs>' if head else node(0).replace("input", "outputs")
    in_tree = "(0,)" if head else "None"
    return f'<mox in_tree="{in_tree}" out_tree="0" extra="()">\n{head}\n{nodes}\n{result}</mox>'


_MEASURE = """
import json, re, sys, time
import bryo_mox
def status(key):  # kB in /proc/self/status
    with open("/proc/self/status") as file:
        return int(re.search(key + r":\\s+(\\d+)", file.read()).group(1)) * 1024
path, fmt = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")  # the peak (VmHWM) starts again from now
before = status("VmRSS")
start = time.process_time()
try:
    bryo_mox.loads(data, fmt)
    outcome = "loaded"
except bryo_mox.MoxError as error:
    outcome = type(error).__name__ + ": " + str(error)[:70]
seconds = time.process_time() - start
print(json.dumps([len(data), seconds, status("VmHWM") - before, outcome]))
"""


def measure(path: str, fmt: str) -> tuple[int, float, float, str]:
    """Bytes, CPU seconds, peak memory added (bytes) and outcome of loading `path`."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, path, fmt], capture_output=True, text=True, check=True
    )
    size, seconds, peak, outcome = json.loads(out.stdout.strip().splitlines()[-1])
    return size, seconds, peak, outcome


def row(label: str, path: str, fmt: str, anchor: tuple[float, float] | None) -> tuple[float, float]:
    size, seconds, peak, outcome = measure(path, fmt)
    speed, memory = size / 1e6 / max(seconds, 1e-9), peak / size
    ratios = ""
    if anchor is not None:
        ratios = f" | {anchor[0] / speed:4.1f}x the time, {memory / anchor[1]:4.1f}x the memory"
    print(
        f"hostile {label:20} {fmt:4} {size / 1e6:5.1f} MB: {seconds:5.2f} s "
        f"({speed:5.1f} MB/s), +{peak / 1e6:5.0f} MB ({memory:4.1f} B/B){ratios} | {outcome}"
    )
    return speed, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0, help="size of each file")
    parser.add_argument("--blocks", type=int, default=128, help="blocks of the anchor model")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    import jax.numpy as jnp
    from mox_bench import transformer

    import bryo_mox
    from bryo import nnx

    graphdef, state = nnx.split(transformer(args.blocks))
    mox = bryo_mox.make_mox(lambda s, v: nnx.merge(graphdef, s)(v))(state, jnp.ones((2, 8, 32)))
    with tempfile.TemporaryDirectory() as folder:
        anchors = {}
        for fmt in ("xml", "yson"):
            path = os.path.join(folder, f"model.{fmt}")
            bryo_mox.dump(mox, path)
            anchors[fmt] = row(f"transformer {args.blocks}", path, fmt, None)
        for shape in SHAPES:
            path = os.path.join(folder, "crafted.xml")
            with open(path, "w", encoding="utf-8") as file:
                file.write(crafted(shape, args.megabytes))
            row(shape, path, "xml", anchors["xml"])
        # YSON outside the layout `dumps` writes (no indentation, one escape): the exact reader
        path = os.path.join(folder, "crafted.yson")
        text = bryo_mox.dumps(
            bryo_mox.loads(crafted("equal equations", args.megabytes / 2)), "yson"
        )
        assert isinstance(text, str)
        with open(path, "w", encoding="utf-8") as file:
            file.write(text.replace("\n  ", "\n").replace('"name"="a"', '"name"="\\x61"', 1))
        row("equal eqns, not dumps", path, "yson", anchors["yson"])


if __name__ == "__main__":
    main()
