"""A save killed at any moment leaves the previous or the new checkpoint, bit for bit.

Two ways in. The fast tests freeze a copy of the folder before every rename and removal a
save makes (orbax's and bryo's: every window of the swap) and once it returned, as a kill
at that moment would leave it, plus a half-removed old folder; each copy must restore the
old or the new state and take the next save cleanly. The slow test SIGKILLs real saves
at random moments (`checkpoint_saver.py` forks a saver per kill): 20 saves replacing one
checkpoint and 8 saving steps next to each other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import jax
import numpy as np
import pytest

import bryo
from bryo import CheckpointError, restore_state, save_state

SAVER_PATH = Path(__file__).with_name("checkpoint_saver.py")


def _import_saver():
    spec = importlib.util.spec_from_file_location("checkpoint_saver", SAVER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


saver = _import_saver()


def _bytes(value: jax.Array) -> tuple[str, bytes]:
    if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return str(value.dtype), np.asarray(jax.random.key_data(value)).tobytes()
    return str(value.dtype), np.asarray(value).tobytes()


def is_version(restored: bryo.State, version: int) -> bool:
    """Whether a restored state is version `version`'s bit for bit (types, dtypes, bytes)."""
    got, want = restored.flat_state(), saver.state_for(version).flat_state()
    return list(got) == list(want) and all(
        got[path].type is want[path].type and _bytes(got[path].value) == _bytes(want[path].value)
        for path in want
    )


def restored_version(directory: Path, candidates: set[int]) -> int:
    restored = restore_state(directory)
    matches = [version for version in sorted(candidates) if is_version(restored, version)]
    assert len(matches) == 1, f"{directory} restored none of versions {candidates} bit for bit"
    return matches[0]


def leftovers(parent: Path) -> list[str]:
    return sorted(name for name in os.listdir(parent) if ".bryo-" in name or ".orbax-" in name)


# Every window of one save, frozen -------------------------------------------------------


class Freezer:
    """Copies `parent` before each rename and removal (as a kill then would leave it)."""

    def __init__(self, parent: Path, out: Path) -> None:
        self.parent, self.out, self.frozen = parent, out, []

    def freeze(self, label: str, half_removed: Path | None = None) -> None:
        copy = self.out / f"{len(self.frozen):02d}"
        shutil.copytree(self.parent, copy, symlinks=True)
        if half_removed is not None:  # a kill in the middle of removing a folder
            inside = sorted(p for p in (copy / half_removed.name).rglob("*") if p.is_file())
            for path in inside[::2]:
                path.unlink()
            label += " (half removed)"
        self.frozen.append((label, copy))

    def wrap(self, function: Callable, removes: bool = False) -> Callable:
        def frozen_first(path, *args, **kwargs):
            if Path(path).parent == self.parent or Path(path).parent.parent == self.parent:
                self.freeze(f"{function.__name__}({Path(path).name})")
                if removes:
                    self.freeze(f"{function.__name__}({Path(path).name})", Path(path))
            return function(path, *args, **kwargs)

        return frozen_first


def frozen_saves(
    monkeypatch: pytest.MonkeyPatch, parent: Path, out: Path, save: Callable[[], object]
) -> list[tuple[str, Path]]:
    """Copies of `parent` at every rename and removal `save()` makes, and after it."""
    freezer = Freezer(parent, out)
    with monkeypatch.context() as patch:
        patch.setattr(os, "rename", freezer.wrap(os.rename))
        patch.setattr(os, "replace", freezer.wrap(os.replace))
        patch.setattr(shutil, "rmtree", freezer.wrap(shutil.rmtree, removes=True))
        save()
    freezer.freeze("after the save")
    return freezer.frozen


def test_a_kill_in_any_window_of_a_replacing_save_leaves_old_or_new(tmp_path, monkeypatch):
    parent = tmp_path / "run"
    save_state(parent / "ckpt", saver.state_for(1))
    frozen = frozen_saves(
        monkeypatch,
        parent,
        tmp_path / "frozen",
        lambda: save_state(parent / "ckpt", saver.state_for(2), force=True),
    )
    labels = [label for label, _ in frozen]
    assert any(label.startswith("rename(ckpt)") for label in labels)  # the old one aside
    assert any(label.startswith("rename(ckpt.bryo-new-") for label in labels)  # new in place
    found = set()
    for label, copy in frozen:
        found.add(version := restored_version(copy / "ckpt", {1, 2}))
        assert read_back_after_next_save(copy, "ckpt"), label
        assert version == 2 or not label.startswith("after"), label
    assert found == {1, 2}


def test_a_kill_in_any_window_of_a_new_step_leaves_the_others_untouched(tmp_path, monkeypatch):
    parent = tmp_path / "run"
    save_state(parent / "step_1", saver.state_for(1))
    frozen = frozen_saves(
        monkeypatch,
        parent,
        tmp_path / "frozen",
        lambda: save_state(parent / "step_2", saver.state_for(2)),
    )
    absent = 0
    for label, copy in frozen:
        assert restored_version(copy / "step_1", {1}) == 1, label
        try:
            assert restored_version(copy / "step_2", {2}) == 2, label
        except CheckpointError as error:
            assert "is not a bryo checkpoint" in str(error), label
            absent += 1
        assert read_back_after_next_save(copy, "step_2"), label
        assert restored_version(copy / "step_1", {1}) == 1, label
    assert 0 < absent < len(frozen)


def read_back_after_next_save(parent: Path, name: str) -> bool:
    """The next save into a frozen folder removes the leftovers and restores exactly."""
    save_state(parent / name, saver.state_for(3), force=True)
    return restored_version(parent / name, {3}) == 3 and not leftovers(parent)


def test_a_save_that_fails_removes_what_it_wrote_and_keeps_the_old(tmp_path, monkeypatch):
    save_state(tmp_path / "ckpt", saver.state_for(1))

    def full_disk(folder):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bryo._checkpoint_files, "seal", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_state(tmp_path / "ckpt", saver.state_for(2), force=True)
    assert not leftovers(tmp_path)
    assert restored_version(tmp_path / "ckpt", {1, 2}) == 1


# Real kills -----------------------------------------------------------------------------


class Saver:
    """The forking saver script: `start(command)` forks a saving child, returns its pid."""

    def __init__(self) -> None:
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        self.process = subprocess.Popen(
            [sys.executable, str(SAVER_PATH)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.lines.get(timeout=120) == "ready"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def start(self, command: dict) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return int(self.lines.get(timeout=60))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@contextmanager
def running_saver() -> Iterator[Saver]:
    process = Saver()
    try:
        yield process
    finally:
        process.close()


def kill_during_saves(process: Saver, command: dict, rng: random.Random) -> tuple[int, int]:
    """Start saving, SIGKILL the saver at a random moment; (last saved, last started)."""
    log = Path(command["log"])
    pid = process.start(command)
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text()):
        assert time.monotonic() < deadline, "the saver never started saving"
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 1.0))
    os.kill(pid, signal.SIGKILL)
    while True:  # the saver reaps its children at once (SIGCHLD ignored)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    events = [line.split() for line in log.read_text().splitlines()]
    started = max(int(n) for kind, n in events if kind == "start")
    saved = max((int(n) for kind, n in events if kind == "saved"), default=command["first"] - 1)
    return saved, started


@pytest.mark.slow
def test_saves_killed_at_random_moments_leave_the_old_or_the_new_checkpoint(tmp_path):
    rng = random.Random(20261128)
    outcomes = {"old": 0, "new": 0, "step absent": 0, "step restored": 0}
    replaced, steps = tmp_path / "replace", tmp_path / "steps"
    with running_saver() as process:
        save_state(replaced / "ckpt", saver.state_for(0))
        current = 0
        for kill in range(20):
            command = {
                "directory": str(replaced / "ckpt"),
                "mode": "replace",
                "first": current + 1,
                "log": str(tmp_path / f"replace-{kill}.log"),
            }
            saved, started = kill_during_saves(process, command, rng)
            now = restored_version(replaced / "ckpt", {saved, started} | {current})
            assert now in (saved, started), f"kill {kill}: restored {now}"
            outcomes["new" if now == started else "old"] += 1
            current = now
        interrupted, good = [], {}
        first = 0
        for kill in range(8):
            command = {
                "directory": str(steps),
                "mode": "steps",
                "first": first,
                "log": str(tmp_path / f"steps-{kill}.log"),
            }
            saved, started = kill_during_saves(process, command, rng)
            good.update((step, step) for step in range(first, saved + 1))
            if started > saved:
                try:
                    assert restored_version(steps / f"step_{started}", {started}) == started
                    good[started] = started
                    interrupted.append(started)
                    outcomes["step restored"] += 1
                except CheckpointError as error:
                    assert "is not a bryo checkpoint" in str(error)
                    interrupted.append(started)
                    outcomes["step absent"] += 1
            for step, version in good.items():  # every finished step, bit for bit
                assert restored_version(steps / f"step_{step}", {version}) == version
            first = started + 1
    print(f"\n{sum(outcomes.values())} kills: {outcomes}")
    save_state(replaced / "ckpt", saver.state_for(99), force=True)
    assert not leftovers(replaced)
    for step in interrupted:  # saving an interrupted step again cleans up after it
        save_state(steps / f"step_{step}", saver.state_for(step), force=True)
    assert not leftovers(steps)
    assert all(restored_version(steps / f"step_{s}", {s}) == s for s in good)


# Processes sharing one folder -----------------------------------------------------------

needs_flock = pytest.mark.skipif(
    bryo._checkpoint_files.fcntl is None, reason="no advisory locks here"
)


def _is_locked(lock: Path, shared: bool = False) -> bool:
    """Whether another open file description can lock `lock` now (as another process)."""
    import fcntl

    descriptor = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


@needs_flock
def test_saves_and_restores_lock_their_checkpoint_for_other_processes(tmp_path, monkeypatch):
    # Two processes saving to one path would each take the other's unfinished folder for
    # a leftover and remove it (FileNotFoundError, and a damaged checkpoint in the end).
    lock = bryo._checkpoint_files.lock_path(tmp_path / "ckpt")
    seen = {}
    seal, restore_arrays = bryo._checkpoint_files.seal, bryo._checkpoint._restore_arrays

    def sealing(folder):
        seen["save"] = (_is_locked(lock), _is_locked(lock, shared=True))
        return seal(folder)

    def restoring(directory, targets):
        seen["restore"] = (_is_locked(lock), _is_locked(lock, shared=True))
        return restore_arrays(directory, targets)

    monkeypatch.setattr(bryo._checkpoint_files, "seal", sealing)
    monkeypatch.setattr(bryo._checkpoint, "_restore_arrays", restoring)
    save_state(tmp_path / "ckpt", saver.state_for(1))
    assert restored_version(tmp_path / "ckpt", {1}) == 1
    assert seen == {"save": (True, True), "restore": (True, False)}  # exclusive, shared
    assert not lock.exists()  # released and removed: the folder holds the checkpoint only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


@needs_flock
def test_the_lock_is_per_checkpoint(tmp_path, monkeypatch):
    # A restore of step_1 does not wait while another process saves step_2 beside it.
    seen = {}
    seal = bryo._checkpoint_files.seal
    save_state(tmp_path / "step_1", saver.state_for(1))

    def sealing(folder):
        beside = bryo._checkpoint_files.lock_path(tmp_path / "step_1")
        with bryo._checkpoint_files.checkpoint_lock(tmp_path / "step_1", exclusive=False):
            seen["beside"] = _is_locked(beside)  # only by this shared lock
            seen["beside_shared"] = _is_locked(beside, shared=True)
        seen["own"] = _is_locked(bryo._checkpoint_files.lock_path(tmp_path / "step_2"), True)
        return seal(folder)

    monkeypatch.setattr(bryo._checkpoint_files, "seal", sealing)
    save_state(tmp_path / "step_2", saver.state_for(2))
    assert seen == {"beside": True, "beside_shared": False, "own": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2"]


@needs_flock
def test_a_lock_file_removed_while_waiting_is_not_trusted(tmp_path):
    # The last holder removes the lock file; a process that was waiting on it then holds
    # a lock on a file no one else can find, so it must lock the file at the path again.
    import fcntl

    files = bryo._checkpoint_files
    lock = files.lock_path(tmp_path / "ckpt")
    other = os.open(lock, os.O_RDWR | os.O_CREAT)  # another process holding the lock
    fcntl.flock(other, fcntl.LOCK_EX)
    held = threading.Event()
    seen = []

    def restore():
        with files.checkpoint_lock(tmp_path / "ckpt", exclusive=False):
            # what another process finds at the path is locked (not an orphaned file)
            seen.append(lock.exists() and _is_locked(lock))
            held.set()

    thread = threading.Thread(target=restore)
    thread.start()
    assert not held.wait(0.2)  # waiting for the other process
    os.unlink(lock)  # the other process releases: removes the file, then unlocks it
    os.close(other)
    thread.join(10)
    assert held.is_set() and seen == [True]
    assert not lock.exists()


def assert_saving(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pytest.fail(f"saver {pid} exited: one of its saves raised")


@pytest.mark.slow
@needs_flock
def test_two_processes_replacing_one_checkpoint_take_turns(tmp_path):
    directory = tmp_path / "ckpt"
    save_state(directory, saver.state_for(0))
    with running_saver() as process:
        logs = [tmp_path / "a.log", tmp_path / "b.log"]
        pids = [
            process.start(
                {"directory": str(directory), "mode": "replace", "first": first, "log": str(log)}
            )
            for first, log in zip((1000, 2000), logs, strict=True)
        ]
        deadline = time.monotonic() + 120
        while not all(log.exists() and log.read_text().count("saved") >= 3 for log in logs):
            assert time.monotonic() < deadline, "the savers did not save three times each"
            for pid in pids:
                assert_saving(pid)
            time.sleep(0.05)
        for pid in pids:
            assert_saving(pid)  # both still saving: no save failed
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.005)
    started = {int(n) for log in logs for kind, n in map(str.split, log.read_text().splitlines())}
    restored_version(directory, started)  # one of them, bit for bit
    save_state(directory, saver.state_for(5), force=True)
    assert restored_version(directory, {5}) == 5 and not leftovers(tmp_path)
