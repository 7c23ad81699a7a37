"""`ScanCheckpointPolicy`: what a scan keeps for the backward pass, and what it recomputes.

A policy becomes a `jax.checkpoint` around each block (the scan body) with a
`jax.checkpoint_policies` policy built from its options; `nested` additionally splits the
scan into an outer scan of checkpointed inner scans, with an outer block count that
`nested_outer_blocks` picks from a memory model of the carries and scanned inputs. The
block's inputs (the carry and the scanned slice) are what `jax.checkpoint` keeps by
construction, so saving them costs nothing extra: they are named (`checkpoint_name`) only
when they are to be offloaded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import jax
from jax.ad_checkpoint import Offloadable, Saveable, checkpoint_name

from ._types import OffloadUnavailableError

F = TypeVar("F", bound=Callable)

CARRY_NAME = "bryo_scan.carry"
INPUTS_NAME = "bryo_scan.inputs"

RematSpec = "bool | str | ScanCheckpointPolicy"

_ALIASES_HELP = (
    "Use remat=False, True, 'full', 'recompute', 'nested', 'offload', 'save_all' or a "
    "ScanCheckpointPolicy."
)


def _check_saving(value: object, option: str) -> bool | str:
    if value is True or value is False or value == "offload":
        return value  # type: ignore[return-value]  # True, False or 'offload', checked on this line
    raise ValueError(f"`{option}` must be True, False or 'offload'; got {value!r}.")


def _check_names(value: object, option: str, *, allow_bool: bool) -> bool | tuple[str, ...]:
    if allow_bool and isinstance(value, bool):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        kinds = "a bool or a list of names" if allow_bool else "a list of names"
        raise ValueError(
            f"`{option}` must be {kinds}; got {value!r}. "
            + (f"Write [{value!r}] for one name." if isinstance(value, str) else "")
        )
    names = tuple(value)
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise ValueError(f"`{option}` must hold checkpoint names (strings); got {bad!r}.")
    return names


@dataclasses.dataclass(frozen=True)
class ScanCheckpointPolicy:
    """Gradient checkpointing (rematerialization) for `scan`, `fold` and `Stacked`.

    Attributes:
        save_carries: keep the carry entering each block (True), move it to host memory
            ("offload"). `jax.checkpoint` needs a block's inputs to recompute it, so
            False keeps them too; it differs from True only in not naming them.
        save_inputs: the same for each block's scanned inputs (its slice of `xs`).
        save_block_internals: also keep the block's internals: all of them (True, the
            same as no remat), or those named with `tree_checkpoint_name` in the list.
        offload_block_internals: names of internals to move to host memory.
        prevent_cse: `jax.checkpoint`'s `prevent_cse` (not needed inside scans).
        disable: no checkpointing at all (`remat=False`).
        simple: plain `jax.checkpoint` of each block: keep its inputs, recompute the rest
            (Haliax's `remat=True`; the same as the defaults here). It cannot be combined
            with saved or offloaded internals, offloading, or `disable`.
        nested: split the scan into an outer scan of `nested` checkpointed blocks (an
            int that divides the length), or (True) as many as the memory model of
            `nested_outer_blocks` says use the least memory: True never keeps more than
            `remat=True`, and falls back to it when no split saves memory (small carries
            next to large per-step inputs, such as a small batch through wide layers).

    Example:
        >>> policy = ScanCheckpointPolicy(save_block_internals=["y"])
        >>> ScanCheckpointPolicy.from_remat("nested") == ScanCheckpointPolicy(nested=True)
        True
    """

    save_carries: bool | Literal["offload"] = True
    save_inputs: bool | Literal["offload"] = True
    save_block_internals: bool | Sequence[str] = False
    offload_block_internals: Sequence[str] = ()
    prevent_cse: bool = False
    disable: bool = False
    simple: bool = False
    nested: bool | int = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)
        set_("save_carries", _check_saving(self.save_carries, "save_carries"))
        set_("save_inputs", _check_saving(self.save_inputs, "save_inputs"))
        set_(
            "save_block_internals",
            _check_names(self.save_block_internals, "save_block_internals", allow_bool=True),
        )
        set_(
            "offload_block_internals",
            _check_names(self.offload_block_internals, "offload_block_internals", allow_bool=False),
        )
        if isinstance(self.nested, bool) or self.nested is None:
            set_("nested", bool(self.nested))
        elif not isinstance(self.nested, int) or self.nested < 1:
            raise ValueError(
                "`nested` must be a bool or a positive number of outer blocks; "
                f"got {self.nested!r}."
            )
        self._check_simple()
        both = set(self._saved_names()) & set(self.offload_block_internals)
        if both:
            raise ValueError(
                f"checkpoint names {sorted(both)} are in both `save_block_internals` and "
                "`offload_block_internals`; keep each name in one of them."
            )

    def _check_simple(self) -> None:
        if not self.simple:
            return
        clashes = [
            f"{name}={getattr(self, name)!r}"
            for name, plain in (
                ("save_block_internals", False),
                ("offload_block_internals", ()),
                ("disable", False),
            )
            if getattr(self, name) != plain
        ] + [
            f"{name}='offload'"
            for name in ("save_carries", "save_inputs")
            if getattr(self, name) == "offload"
        ]
        if clashes:
            raise ValueError(
                f"`simple=True` keeps only each block's inputs, which contradicts "
                f"{', '.join(clashes)}; drop `simple=True` or those options."
            )

    @classmethod
    def from_remat(cls, remat: bool | str | ScanCheckpointPolicy) -> ScanCheckpointPolicy:
        """The policy of a `remat=` argument: a policy, a bool, or a string alias.

        `True`/"full": save carries and inputs; `False`: disable; "nested": nested=True;
        "offload": offload carries and inputs; "save_all": save everything; "recompute"
        (Haliax's name): save neither carries nor inputs by name, which keeps the same
        values as "full" (a checkpointed block always keeps its inputs).
        """
        if isinstance(remat, ScanCheckpointPolicy):
            return remat
        if remat is True or remat == "full":
            return cls()
        if remat is False:
            return cls(disable=True)
        if remat == "recompute":
            return cls(save_carries=False, save_inputs=False)
        if remat == "nested":
            return cls(nested=True)
        if remat == "offload":
            return cls(save_carries="offload", save_inputs="offload")
        if remat == "save_all":
            return cls(save_block_internals=True)
        raise ValueError(f"`remat` {remat!r} is not a checkpoint policy. {_ALIASES_HELP}")

    from_bool_or_str = from_remat

    # -- what the options mean for jax.checkpoint ---------------------------------------

    def _saved_names(self) -> tuple[str, ...]:
        internals = self.save_block_internals
        return internals if isinstance(internals, tuple) else ()

    def _offloaded_names(self) -> tuple[str, ...]:
        names = list(self.offload_block_internals)
        if self.save_carries == "offload":
            names.append(CARRY_NAME)
        if self.save_inputs == "offload":
            names.append(INPUTS_NAME)
        return tuple(names)

    def jax_policy(self) -> Callable | None:
        """The `jax.checkpoint` policy of a block (None: recompute all but the inputs)."""
        offloaded = self._offloaded_names()
        if offloaded:
            check_can_offload(offloaded)
        if self.save_block_internals is True:
            return (
                _everything_but_offloaded(offloaded)
                if offloaded
                else (jax.checkpoint_policies.everything_saveable)
            )
        if offloaded:
            return jax.checkpoint_policies.save_and_offload_only_these_names(
                names_which_can_be_saved=list(self._saved_names()),
                names_which_can_be_offloaded=list(offloaded),
                offload_src="device",
                offload_dst="pinned_host",
            )
        if self._saved_names():
            return jax.checkpoint_policies.save_only_these_names(*self._saved_names())
        return None

    def checkpoint(self, block: F) -> F:
        """`block(carry, x) -> out` wrapped in `jax.checkpoint` under this policy."""
        if self.disable:
            return block
        policy = self.jax_policy()
        name_carry = self.save_carries == "offload"
        name_inputs = self.save_inputs == "offload"

        def named_block(carry, x):
            if name_carry:
                carry = tree_checkpoint_name(carry, CARRY_NAME)
            if name_inputs:
                x = tree_checkpoint_name(x, INPUTS_NAME)
            return block(carry, x)

        body = named_block if (name_carry or name_inputs) else block
        return jax.checkpoint(body, policy=policy, prevent_cse=self.prevent_cse)  # type: ignore[return-value]  # jax.checkpoint keeps the block's signature

    def outer_blocks(self, length: int, carry_bytes: int = 0, step_bytes: int = 0) -> int | None:
        """How many outer blocks a nested scan of `length` steps uses (None: not nested).

        `carry_bytes` is the size of the carry, `step_bytes` that of one step's scanned
        inputs; `nested=True` picks the count from them (`nested_outer_blocks`), an
        explicit `nested=k` is used as it is.
        """
        if self.disable or self.nested is False:
            return None
        if self.nested is True:
            return nested_outer_blocks(length, carry_bytes, step_bytes)
        if length % self.nested:
            raise ValueError(
                f"`nested={self.nested}` outer blocks do not divide the scan length {length}; "
                "pick a divisor of the length or nested=True."
            )
        return self.nested


# Fraction of `remat=True`'s memory a nested split must stay under to be used: the model
# leaves out small terms (the outer scan's own buffers), so near-ties are not worth it.
_NESTED_MARGIN = 0.9


def nested_outer_blocks(length: int, carry_bytes: int, step_bytes: int) -> int | None:
    """The outer block count of `nested=True`, or None when nesting saves no memory.

    The memory model, for `N = length` steps, a carry of `C = carry_bytes` and scanned
    inputs of `X = step_bytes` per step (a block's weights, for a stack of layers):

    - `remat=True` keeps the carry entering every block: `N * C`;
    - a nested scan of `k` outer blocks of `m = N / k` steps keeps the `k` outer carries
      and, while the backward pass recomputes one outer block, its `m` inner carries,
      its chunk of the scanned inputs and that chunk's gradient: `(k + m) * C + 2 * m * X`.

    The count is the divisor `k` of `N` (with `1 < k < N`) that minimizes the nested
    cost, used only if that cost stays below `remat=True`'s. Nesting helps when the
    carries dominate (long scans, large batches, narrow layers); with a small carry next
    to large per-layer weights it does not, and the scan stays a plain checkpointed one.

    >>> nested_outer_blocks(64, carry_bytes=2**20, step_bytes=2**19)  # batch 1024, width 256
    8
    >>> nested_outer_blocks(64, carry_bytes=2**15, step_bytes=2**19) is None  # batch 32
    True
    """
    plain = length * carry_bytes
    best: tuple[int, int] | None = None
    for outer in range(2, length):
        if length % outer:
            continue
        inner = length // outer
        cost = (outer + inner) * carry_bytes + 2 * inner * step_bytes
        if best is None or cost < best[0]:
            best = (cost, outer)
    if best is None or best[0] >= _NESTED_MARGIN * plain:
        return None
    return best[1]


def tree_bytes(tree: object) -> int:
    """The bytes of the array leaves of `tree` (tracers included; other leaves count 0)."""
    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            continue
        total += math.prod(shape) * getattr(dtype, "itemsize", 8)
    return total


def tree_checkpoint_name(tree: object, name: str) -> object:
    """Name every array leaf of `tree` for checkpoint policies (`jax.ad_checkpoint`).

    Pytree leaves such as NamedArray are named through their array child.
    """
    return jax.tree_util.tree_map(lambda leaf: checkpoint_name(leaf, name), tree)


def _everything_but_offloaded(offloaded: tuple[str, ...]) -> Callable:
    offload = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=list(offloaded),
        offload_src="device",
        offload_dst="pinned_host",
    )

    def policy(prim, *args, **params):
        decision = offload(prim, *args, **params)
        return decision if isinstance(decision, Offloadable) else Saveable

    return policy


def check_can_offload(names: Sequence[str]) -> None:
    """Raise `OffloadUnavailableError` unless the default device can offload to host."""
    device = jax.devices()[0]
    kinds = {memory.kind for memory in device.addressable_memories()}
    if device.platform != "cpu" and "pinned_host" in kinds:
        return
    what = ", ".join(repr(n) for n in names)
    raise OffloadUnavailableError(
        f"the checkpoint policy offloads {what} to host memory, but the default device "
        f"{device} ({device.platform}) cannot offload: "
        + (
            "its memory already is host memory and XLA ignores the transfer there. "
            if device.platform == "cpu"
            else "it has no 'pinned_host' memory. "
        )
        + "Save those values instead (save_carries=True, save_inputs=True, names in "
        "save_block_internals) or run on a GPU or TPU."
    )
