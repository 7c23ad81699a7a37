"""A real multi-process run: two processes, 4 host CPU devices each, joined through
`jax.distributed.initialize` on 127.0.0.1, train a model sharded over all 8 devices.

Each process runs `sharding_worker.py multiprocess ID PORT`, asserts that its losses match
an unsharded run, and prints them; the test checks that both exit cleanly and agree. Both
are killed if either fails or the time runs out. JAX's CPU backend does the cross-process
collectives with gloo (its default), so nothing else needs configuring.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("sharding_worker.py")
TIMEOUT_S = 240


def worker_env(device_count: int) -> dict[str, str]:
    import os

    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={device_count}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_processes(port: int, logs: Path) -> list[tuple[int, str, str]]:
    """Start both processes, wait for both (killing both on timeout or a failure).

    Output goes to files, not pipes: a pipe nobody reads while we wait could fill up.
    """
    procs, files = [], []
    for i in range(2):
        out, err = open(logs / f"out{i}.txt", "w+"), open(logs / f"err{i}.txt", "w+")
        files.append((out, err))
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), "multiprocess", str(i), str(port)],
                env=worker_env(4),
                cwd=WORKER.parent,
                stdout=out,
                stderr=err,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the two processes did not finish within {TIMEOUT_S} s")
            if any(p.poll() not in (None, 0) for p in procs):
                break  # one failed: the other would wait for it forever
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    results = []
    for p, (out, err) in zip(procs, files, strict=True):
        out.seek(0)
        err.seek(0)
        results.append((p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return results


@pytest.mark.slow
def test_two_processes_train_and_agree_on_the_loss(tmp_path):
    results = run_processes(free_port(), tmp_path)
    for i, (code, out, err) in enumerate(results):
        assert code == 0, f"process {i} exited with {code}:\n{out}\n{err[-4000:]}"
    summaries = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]
    assert [s["process"] for s in summaries] == [0, 1]
    assert summaries[0]["losses"] == summaries[1]["losses"]
    assert summaries[0]["losses"] == pytest.approx(summaries[0]["reference"], rel=1e-5)
