"""The options of `bryo demo`, kept apart so `bryo --help` does not import the stack.

Every option is checked here, before the demo does any work: numbers are read as text
and must be integers within the demo's bounds (`--batch 1e9` or `--seed 2**70` is
refused, not a traceback or a hang), and the output folder must be a folder the demo can
write to. A bad value raises `DemoError`, which names the option and what it accepts;
the command prints it on one line and exits with code 2. Usage errors (an unknown
option) are one line too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import NamedTuple

from .cli import Argument

BACKEND_NAMES = ("equinox", "nnx")
#: The synthetic data set: this many samples, the last `TEST_SAMPLES` held out.
SAMPLES = 4096
TEST_SAMPLES = 512
#: The files `bryo demo` writes into `--out`.
OUTPUT_FILES = ("model.mox.xml", "model.mox.yson")
#: The orbax checkpoint folder `bryo demo` writes into `--out` (replaced when it exists).
CHECKPOINT_FOLDER = "checkpoint"


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Options of `bryo demo` (see `add_demo_arguments`)."""

    backend: str = "nnx"
    width: int = 32
    layers: int = 4
    steps: int = 300
    finetune_steps: int = 150
    batch: int = 64
    rank: int = 4
    learning_rate: float = 3e-3
    out: Path = Path("bryo-demo-out")
    seed: int = 0
    mesh: str | None = None
    quiet: bool = False


class DemoError(ValueError):
    """A bad `bryo demo` option; the message names it and the accepted values."""


class Bound(NamedTuple):
    """The integers an option accepts, and why its upper bound is what it is."""

    low: int
    high: int
    why: str = ""


#: Integer options: their bounds (the demo runs in about a minute on a laptop by default).
BOUNDS = {
    "width": Bound(1, 4096),
    "layers": Bound(1, 256),
    "steps": Bound(1, 1_000_000),
    "finetune_steps": Bound(0, 1_000_000),
    "batch": Bound(1, SAMPLES - TEST_SAMPLES, "the training set's size"),
    "rank": Bound(1, 4096),
    "seed": Bound(0, 2**63 - 1),
}
HELP = {
    "width": "hidden width",
    "layers": "blocks in the Stacked trunk",
    "steps": "training steps",
    "finetune_steps": "LoRA fine-tuning steps",
    "batch": "batch size",
    "rank": "LoRA rank",
    "seed": "random seed",
}


def demo_arguments() -> tuple[Argument, ...]:
    """The demo's command-line options (values are checked by `config_from_args`)."""
    defaults = DemoConfig()
    numbers = tuple(
        Argument(
            f"--{name.replace('_', '-')}",
            default=str(getattr(defaults, name)),
            metavar="N",
            help=f"{HELP[name]}, {bound.low} to {bound.high} (default: {getattr(defaults, name)})",
        )
        for name, bound in BOUNDS.items()
    )
    return (
        Argument(
            "--backend",
            choices=BACKEND_NAMES,
            default=defaults.backend,
            help="module style of the model (default: nnx)",
        ),
        *numbers,
        Argument(
            "--out",
            type=Path,
            default=defaults.out,
            help="folder for the MoX files and the checkpoint (created if missing; existing "
            f"{', '.join(OUTPUT_FILES)} and {CHECKPOINT_FOLDER}/ in it are replaced, symlinks "
            "among them are not followed)",
        ),
        Argument(
            "--mesh",
            default=None,
            help="device mesh, e.g. data=4,model=2 (default: all devices on data)",
        ),
        Argument(
            "--quiet",
            flag=True,
            help="no progress bars (they are drawn only on a terminal anyway); the one-line "
            "summaries stay",
        ),
    )


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """Check every option and build the config; a bad value raises `DemoError`."""
    numbers = {name: _integer(name, getattr(args, name)) for name in BOUNDS}
    if numbers["rank"] > numbers["width"]:
        raise DemoError(
            f"`--rank` ({numbers['rank']}) must not exceed `--width` ({numbers['width']})."
        )
    check_output_folder(Path(args.out))
    return DemoConfig(
        backend=args.backend,
        out=Path(args.out),
        mesh=args.mesh,
        quiet=bool(getattr(args, "quiet", False)),
        **numbers,
    )


def _integer(name: str, value: object) -> int:
    option = f"`--{name.replace('_', '-')}`"
    bound = BOUNDS[name]
    text = str(value).strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isascii() or not digits.isdigit():
        kind = "a positive integer" if bound.low > 0 else "an integer"
        raise DemoError(f"{option} must be {kind}, got {text!r}.")
    if len(digits) > 30:  # far out of range; do not convert thousands of digits
        raise DemoError(f"{option} must be at most {bound.high}, got {text[:30]}...")
    number = int(text)
    if number < bound.low:
        kind = {0: "0 or more", 1: "a positive integer"}.get(bound.low, f">= {bound.low}")
        raise DemoError(f"{option} must be {kind}, got {number}.")
    if number > bound.high:
        why = f" ({bound.why})" if bound.why else ""
        raise DemoError(f"{option} must be at most {bound.high}{why}, got {number}.")
    return number


def check_output_folder(out: Path) -> None:
    """`--out` must be a folder the demo can write, or a path where it can make one."""
    if out.exists() and not out.is_dir():
        raise DemoError(f"`--out {out}` is a file, not a folder; pass a folder.")
    if out.is_symlink() and not out.exists():
        raise DemoError(f"`--out {out}` is a broken symlink; pass a folder.")
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise DemoError(f"`--out {out}`: {existing} is a file, so the folder cannot be made.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DemoError(f"`--out {out}`: {existing} is not writable.")
    for name in OUTPUT_FILES:
        target = out / name
        if target.is_dir() and not target.is_symlink():
            raise DemoError(f"`--out {out}`: {target} is a folder; the demo writes a file there.")
