"""Scan over layers: `Stacked` (one block with stacked weights, applied with `fold`/`scan`),
`BlockSeq` (a list of blocks, applied with Python loops) and the `BlockFoldable` protocol
both implement.

Blocks are pytrees (Equinox modules, dataclasses) or, through the
`bryo_scan_block_splitters` hook, a backend's own module type. `Stacked.init` builds the
blocks under `jax.vmap`, so every array of the block gains the layers axis: in front for
plain arrays, as the named axis for NamedArrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import jax

from bryo_graph import add_sharding_axis
from bryo_pytree import pytree_dataclass, static_field

from ._hooks import block_splitter, resolve_axis
from ._policy import ScanCheckpointPolicy
from ._scan import Remat, fold, scan
from ._trees import OutputStacker, partition_arrays, stack_trees, unbind_tree
from ._types import AxisInfo, PyTree, ScanAxisError
from ._vmap import vmap

M = TypeVar("M")
Carry = TypeVar("Carry")

_UNSET: Any = object()


@runtime_checkable
class BlockFoldable(Protocol[M]):
    """A sequence of blocks applied one after the other: `Stacked` and `BlockSeq`.

    `fold(init, *args)` feeds each block's output to the next; `scan` does the same for
    blocks returning `(carry, output)` and stacks the outputs; `vmap` applies every block
    to the same input. `fold_via(fn)`/`scan_via(fn)` do so with `fn(block, carry, *args)`
    in place of `block(carry, *args)`.
    """

    def fold(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...
    def scan(self, init: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]: ...
    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...
    def fold_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...
    def scan_via(self, fn: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]: ...
    def unstacked(self) -> Sequence[M]: ...
    def get_layer(self, index: int) -> M: ...


def _policy(gradient_checkpointing: Remat, remat: Remat) -> ScanCheckpointPolicy:
    if remat is not _UNSET and gradient_checkpointing is not _UNSET:
        raise TypeError(
            "pass either `gradient_checkpointing` or `remat`, not both (they are aliases)."
        )
    chosen = remat if remat is not _UNSET else gradient_checkpointing
    return ScanCheckpointPolicy.from_remat(True if chosen is _UNSET else chosen)


def _sized_axis(axis: object, where: str) -> AxisInfo:
    info = resolve_axis(axis)
    if info.size is None:
        raise ScanAxisError(
            f"`{where}` needs the number of layers, but {info} has no size; "
            "pass an Axis with a size, e.g. Axis('Layers', 12)."
        )
    return info


def _check_index(index: int, size: int) -> int:
    if not -size <= index < size:
        raise IndexError(f"layer `index` {index} is out of range for {size} layers.")
    return index % size


def _call_block(block: Any, carry: Any, *args: Any, **kwargs: Any) -> Any:
    return block(carry, *args, **kwargs)


@pytree_dataclass
class Stacked(Generic[M]):
    """A stack of identical blocks stored as one block whose arrays have a layers axis.

    Attributes:
        stacked: the block with stacked arrays (a layers axis on every array).
        Block: the layers axis (an `Axis` with a size).
        gradient_checkpointing: the `ScanCheckpointPolicy` of `fold` and `scan`.

    Example:
        >>> keys = jax.random.split(key, 4)  # doctest: +SKIP
        >>> blocks = Stacked.init(Layers, MyBlock)(config, key=keys)  # doctest: +SKIP
        >>> y = blocks.fold(x)  # doctest: +SKIP
    """

    stacked: M
    Block: Any = static_field()
    gradient_checkpointing: ScanCheckpointPolicy = static_field(default=ScanCheckpointPolicy())

    @classmethod
    def init(
        cls,
        Block: object,
        module: Callable[..., M],
        *,
        gradient_checkpointing: Remat = _UNSET,
        remat: Remat = _UNSET,
    ) -> Callable[..., Stacked[M]]:
        """`Stacked.init(Layers, Block)(*args, **kwargs)`: build the blocks under vmap.

        Args:
            Block: the layers axis, with a size (e.g. `Axis("Layers", 12)`).
            module: the block constructor (a class or function).
            gradient_checkpointing: checkpoint policy of `fold`/`scan` (default True).
            remat: alias of `gradient_checkpointing`.

        Returns:
            A function of the constructor's arguments. NamedArrays with the layers axis
            and JAX/NumPy arrays (over their first axis) are mapped over the layers;
            everything else reaches every layer unchanged.
        """
        policy = _policy(gradient_checkpointing, remat)

        def make(*args: Any, **kwargs: Any) -> Stacked[M]:
            info = _sized_axis(Block, "Stacked.init")
            return cls(_vmapped_blocks(module, info, args, kwargs), Block, policy)

        return make

    def _split(self) -> tuple[PyTree, Callable[[PyTree], M]]:
        return block_splitter(self.stacked)(self.stacked)

    def fold_via(self, fn: Callable[..., Carry]) -> Callable[..., Carry]:
        """`fold_via(fn)(init, *args, **kwargs)` folds `fn(block, carry, *args, **kwargs)`."""

        def run(init: Carry, *args: Any, **kwargs: Any) -> Carry:
            tree, rebuild = self._split()
            step = lambda carry, layer: fn(rebuild(layer), carry, *args, **kwargs)
            return fold(step, self.Block, remat=self.gradient_checkpointing)(init, tree)

        return run

    def scan_via(self, fn: Callable[..., tuple[Carry, Any]]) -> Callable[..., tuple[Carry, Any]]:
        """`scan_via(fn)(init, *args)` scans `fn(block, carry, *args) -> (carry, output)`."""

        def run(init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
            tree, rebuild = self._split()
            step = lambda carry, layer: fn(rebuild(layer), carry, *args, **kwargs)
            return scan(step, self.Block, remat=self.gradient_checkpointing)(init, tree)

        return run

    def fold(self, init: Carry, *args: Any, **kwargs: Any) -> Carry:
        """Apply the blocks in order, `x = block(x, *args, **kwargs)`, as one scan."""
        return self.fold_via(_call_block)(init, *args, **kwargs)

    def scan(self, init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        """Apply blocks returning `(carry, output)`; the outputs gain the layers axis."""
        return self.scan_via(_call_block)(init, *args, **kwargs)

    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply every block to the same `init`, in parallel; outputs gain the layers axis."""
        tree, rebuild = self._split()
        apply = lambda layer: rebuild(layer)(init, *args, **kwargs)
        return vmap(apply, self.Block, map_unnamed=True)(tree)

    def get_layer(self, index: int) -> M:
        """The block of layer `index`, as a block of its own (no layers axis)."""
        info = _sized_axis(self.Block, "Stacked.get_layer")
        index = _check_index(index, info.size)  # type: ignore[arg-type]
        tree, rebuild = self._split()
        layers = unbind_tree(tree, info, what="stacked")
        return rebuild(layers.rebuild([array[index] for array in layers.arrays]))

    def unstacked(self) -> list[M]:
        """Every layer as a block of its own, in order."""
        return [self.get_layer(i) for i in range(len(self))]

    def __len__(self) -> int:
        return _sized_axis(self.Block, "Stacked").size  # type: ignore[return-value]

    def __iter__(self) -> Iterator[M]:
        return iter(self.unstacked())


def _vmapped_blocks(module: Callable[..., M], info: AxisInfo, args: tuple, kwargs: dict) -> M:
    inputs = unbind_tree((args, kwargs), info, what="args", missing="broadcast", map_unnamed=True)
    outputs = OutputStacker(static_nonarrays=True)
    rebuilds: list[Callable[[PyTree], M]] = []

    def one(slices: list[jax.Array]) -> list[jax.Array]:
        step_args, step_kwargs = inputs.rebuild(slices)
        block = module(*step_args, **step_kwargs)
        tree, rebuild = block_splitter(block)(block)
        _check_is_pytree(block, tree)
        rebuilds.append(rebuild)
        return outputs.flatten(tree)

    stacked = jax.vmap(one, axis_size=info.size)(inputs.arrays)
    # Sharding metadata names one axis per dimension: the new layers axis is not sharded.
    return rebuilds[-1](add_sharding_axis(outputs.unflatten(stacked, info), 0, None))


def _check_is_pytree(block: object, tree: PyTree) -> None:
    leaves = jax.tree_util.tree_leaves(tree)
    if leaves == [tree] and not isinstance(tree, jax.Array):
        raise TypeError(
            f"`module` built a block of type {type(block).__name__}, which is not a pytree, so "
            "its arrays cannot be stacked. Make it a pytree (an Equinox module, a "
            "bryo_pytree.pytree_dataclass) or give its backend a `bryo_scan_block_splitters` hook."
        )


@pytree_dataclass
class BlockSeq(Generic[M]):
    """A list of blocks with `Stacked`'s interface, applied with plain Python loops.

    Compiles each block separately (slower to compile for deep stacks), but the blocks may
    differ in structure. `gradient_checkpointing` wraps each block call in
    `jax.checkpoint` (`nested` has no meaning for a loop and is ignored).
    """

    blocks: list[M]
    Block: Any = static_field()
    gradient_checkpointing: ScanCheckpointPolicy = static_field(default=ScanCheckpointPolicy())

    @classmethod
    def init(
        cls,
        Block: object,
        module: Callable[..., M],
        *,
        gradient_checkpointing: Remat = _UNSET,
        remat: Remat = _UNSET,
    ) -> Callable[..., BlockSeq[M]]:
        """`BlockSeq.init(Layers, Block)(*args, **kwargs)`, mapped like `Stacked.init`."""
        policy = _policy(gradient_checkpointing, remat)

        def make(*args: Any, **kwargs: Any) -> BlockSeq[M]:
            info = _sized_axis(Block, "BlockSeq.init")
            inputs = unbind_tree(
                (args, kwargs), info, what="args", missing="broadcast", map_unnamed=True
            )
            blocks = []
            for i in range(info.size):  # type: ignore[arg-type]
                step_args, step_kwargs = inputs.rebuild([array[i] for array in inputs.arrays])
                blocks.append(module(*step_args, **step_kwargs))
            return cls(blocks, Block, policy)

        return make

    def _step(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[Any, M], Any]:
        """`step(carry, block) -> fn(block, carry, *args, **kwargs)`, checkpointed per policy."""
        if self.gradient_checkpointing.disable:
            return lambda carry, block: fn(block, carry, *args, **kwargs)
        policy = dataclasses.replace(self.gradient_checkpointing, nested=False)

        def step(carry: Any, block: M) -> Any:
            arrays, rebuild = partition_arrays(block)
            body = lambda c, a: fn(rebuild(a), c, *args, **kwargs)
            return policy.checkpoint(body)(carry, arrays)

        return step

    def fold_via(self, fn: Callable[..., Carry]) -> Callable[..., Carry]:
        """`fold_via(fn)(init, *args, **kwargs)`: a loop of `fn(block, carry, *args)`."""

        def run(init: Carry, *args: Any, **kwargs: Any) -> Carry:
            step = self._step(fn, args, kwargs)
            carry = init
            for block in self.blocks:
                carry = step(carry, block)
            return carry

        return run

    def scan_via(self, fn: Callable[..., tuple[Carry, Any]]) -> Callable[..., tuple[Carry, Any]]:
        """`scan_via(fn)(init, *args)`: a loop of `fn(block, carry, *args) -> (carry, out)`."""

        def run(init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
            step = self._step(fn, args, kwargs)
            carry, outputs = init, []
            for block in self.blocks:
                carry, out = step(carry, block)
                outputs.append(out)
            return carry, stack_trees(outputs, resolve_axis(self.Block))

        return run

    def fold(self, init: Carry, *args: Any, **kwargs: Any) -> Carry:
        """Apply the blocks in order, `x = block(x, *args, **kwargs)`."""
        return self.fold_via(_call_block)(init, *args, **kwargs)

    def scan(self, init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        """Apply blocks returning `(carry, output)`; the outputs gain the layers axis."""
        return self.scan_via(_call_block)(init, *args, **kwargs)

    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply every block to the same `init`; outputs stacked on the layers axis."""
        outputs = [block(init, *args, **kwargs) for block in self.blocks]
        return stack_trees(outputs, resolve_axis(self.Block))

    def get_layer(self, index: int) -> M:
        """The block of layer `index`."""
        return self.blocks[_check_index(index, len(self.blocks))]

    def unstacked(self) -> list[M]:
        """The blocks, as a new list."""
        return list(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def __iter__(self) -> Iterator[M]:
        return iter(self.blocks)
