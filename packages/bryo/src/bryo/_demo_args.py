"""The options of `bryo demo`, kept apart so `bryo --help` does not import the stack."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

BACKEND_NAMES = ("equinox", "nnx")


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Options of `bryo demo` (see `add_arguments`)."""

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


class DemoError(ValueError):
    """A bad `bryo demo` option; the message names it and the accepted values."""


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line options."""
    defaults = DemoConfig()
    parser.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default=defaults.backend,
        help="module style of the model (default: nnx)",
    )
    parser.add_argument("--width", type=int, default=defaults.width, help="hidden width")
    parser.add_argument(
        "--layers", type=int, default=defaults.layers, help="blocks in the Stacked trunk"
    )
    parser.add_argument("--steps", type=int, default=defaults.steps, help="training steps")
    parser.add_argument(
        "--finetune-steps", type=int, default=defaults.finetune_steps, help="LoRA fine-tuning steps"
    )
    parser.add_argument("--batch", type=int, default=defaults.batch, help="batch size")
    parser.add_argument("--rank", type=int, default=defaults.rank, help="LoRA rank")
    parser.add_argument(
        "--out", type=Path, default=defaults.out, help="folder for the MoX files and the checkpoint"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument(
        "--mesh",
        default=None,
        help="device mesh, e.g. data=4,model=2 (default: all devices on data)",
    )


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """Check the options and build the config; a bad value raises `DemoError`."""
    for name in ("width", "layers", "steps", "batch", "rank"):
        value = getattr(args, name)
        if value < 1:
            raise DemoError(f"`--{name}` must be a positive integer, got {value}.")
    if args.finetune_steps < 0:
        raise DemoError(f"`--finetune-steps` must be 0 or more, got {args.finetune_steps}.")
    if args.rank > args.width:
        raise DemoError(f"`--rank` ({args.rank}) must not exceed `--width` ({args.width}).")
    return DemoConfig(
        backend=args.backend,
        width=args.width,
        layers=args.layers,
        steps=args.steps,
        finetune_steps=args.finetune_steps,
        batch=args.batch,
        rank=args.rank,
        out=args.out,
        seed=args.seed,
        mesh=args.mesh,
    )
