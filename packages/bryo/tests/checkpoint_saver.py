"""A save loop to kill: `test_checkpoint_kills.py` runs this file as a script.

The script imports bryo once, prints `ready`, then reads one JSON command per stdin line
and forks a child for each (importing JAX, orbax and bryo takes seconds; a fork takes
milliseconds, so a test can kill dozens of saves). The parent prints the child's pid.
The child saves version after version of a small state, writing `start N` to its log
just before `save_state` and `saved N` just after, until the test kills it (SIGKILL).

A command is `{"directory": ..., "mode": "replace" | "steps", "first": N, "log": ...}`:
"replace" saves every version to `directory` with `force=True`; "steps" saves version N
to `directory/step_N`, next to the others. `state_for(N)` is version N's state; the tests
import this file to rebuild the state they expect bit for bit.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

import bryo
from bryo import nnx

SaveState = Callable[..., object]


def state_for(version: int) -> bryo.State:
    """A small state whose every value depends on `version` (float, key and count)."""
    flat = {
        ("layers", layer, "w"): bryo.VariableState(
            nnx.Param, np.full((16, 16), version + layer / 8, np.float32)
        )
        for layer in range(3)
    }
    flat["rngs", "key"] = bryo.VariableState(nnx.RngKey, jax.random.key(version))
    flat["rngs", "count"] = bryo.VariableState(nnx.RngCount, np.uint32(version))
    return bryo.State.from_flat_path(flat)


def target(directory: Path, mode: str, version: int) -> Path:
    return directory / f"step_{version}" if mode == "steps" else directory


def save_forever(command: dict, save_state: SaveState) -> None:
    directory, mode = Path(command["directory"]), command["mode"]
    log = os.open(command["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    for version in itertools.count(command["first"]):
        state = state_for(version)
        os.write(log, f"start {version}\n".encode())
        save_state(target(directory, mode, version), state, force=mode == "replace")
        os.write(log, f"saved {version}\n".encode())


def main(save_state: SaveState = bryo.save_state) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed children are reaped at once
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                save_forever(command, save_state)
            finally:
                os._exit(1)
        print(pid, flush=True)


if __name__ == "__main__":
    main()
