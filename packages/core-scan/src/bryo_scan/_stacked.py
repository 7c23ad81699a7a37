"""Scan over layers: `Stacked` (one block with stacked weights, applied with `fold`/`scan`),
`BlockSeq` (a list of blocks, applied with Python loops) and the `BlockFoldable` protocol
both implement.

Blocks are pytrees (Equinox modules, dataclasses) or, through the
`bryo_scan_block_splitters` hook, a backend's own module type. `Stacked.init` builds the
blocks under `jax.vmap`, so every array of the block gains the layers axis: in front for
plain arrays, as the named axis for NamedArrays. A block class with Haliax's `init`
static or class method is built by it; any other class or function is called.

Extra arguments of `fold`/`scan`/`vmap` are per layer when they carry the layers axis:
`blocks.fold(x, key=jax.random.split(key, L))` gives layer i the key `i`. NamedArrays with
the layers axis and arrays whose leading dimension is the number of layers are split
between the layers; everything else reaches every layer unchanged. The `*_via` methods
take `is_scanned` to decide otherwise.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import jax
import numpy as np

from bryo_graph import add_sharding_axis
from bryo_plugins import standing_in
from bryo_pytree import is_array, pytree_dataclass, static_field

from ._hooks import block_splitter, is_named_leaf, resolve_axis
from ._policy import ScanCheckpointPolicy
from ._scan import Remat, scan_arguments, split_carry_output
from ._state_dict import (
    StateDict,
    _is_struct,
    fields_from_state_dict,
    fields_to_state_dict,
    from_state_dict,
    merge_state_dict,
    to_state_dict,
    with_prefix,
)
from ._trees import (
    ArgNames,
    Inputs,
    IsScanned,
    OutputStacker,
    Rules,
    ScanPredicate,
    Unbound,
    every_array,
    has_extent,
    no_array,
    partition_arrays,
    scan_predicate,
    stack_trees,
    unbind_inputs,
)
from ._types import AxisInfo, PyTree, ScanAxisError
from ._vmap import vmap_arguments

M = TypeVar("M")
Carry = TypeVar("Carry")

_UNSET: Any = object()


@runtime_checkable
class BlockFoldable(Protocol[M]):
    """A sequence of blocks applied one after the other: `Stacked` and `BlockSeq`.

    `fold(init, *args)` feeds each block's output to the next; `scan` does the same for
    blocks returning `(carry, output)` and stacks the outputs; `vmap` applies every block
    to the same input. `fold_via(fn)`/`scan_via(fn)`/`vmap_via(fn)` do so with
    `fn(block, carry, *args)` (`fn(block, *args)` for `vmap_via`) in place of the call.
    """

    def fold(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...
    def scan(self, init: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]: ...
    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...
    def fold_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...
    def scan_via(self, fn: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]: ...
    def vmap_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...
    def unstacked(self) -> Sequence[M]: ...
    def get_layer(self, index: int) -> M: ...


# -- construction ----------------------------------------------------------------------


def _policy(
    gradient_checkpointing: Remat, remat: Remat, prevent_cse: bool | None
) -> ScanCheckpointPolicy:
    if remat is not _UNSET and gradient_checkpointing is not _UNSET:
        raise TypeError(
            "pass either `gradient_checkpointing` or `remat`, not both (they are aliases)."
        )
    chosen = remat if remat is not _UNSET else gradient_checkpointing
    policy = ScanCheckpointPolicy.from_remat(True if chosen is _UNSET else chosen)
    if prevent_cse is None:
        return policy
    warnings.warn(
        "`prevent_cse=` of `init` is Haliax's older spelling; pass "
        "ScanCheckpointPolicy(prevent_cse=...) as `gradient_checkpointing` instead.",
        DeprecationWarning,
        stacklevel=3,
    )
    return dataclasses.replace(policy, prevent_cse=prevent_cse)


def block_constructor(module: Callable[..., M]) -> Callable[..., M]:
    """How `Stacked.init`/`BlockSeq.init` build one block from `module`.

    Haliax's convention: a class with an `init` static or class method is built by it
    (`Linear.init(In, Out, key=...)`). Any other class (its `__init__`, as the seed's
    blocks) or function is called as it is. An instance method named `init` (Flax Linen's)
    does not count.
    """
    if isinstance(module, type):
        init = inspect.getattr_static(module, "init", None)
        if isinstance(init, staticmethod | classmethod):
            return module.init
    return module


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


# -- per-layer arguments ---------------------------------------------------------------


def per_layer(axis: AxisInfo) -> ScanPredicate:
    """The default `is_scanned` of a stack's extra arguments: what carries the layers axis.

    NamedArrays (they are split only if they have the axis) and arrays whose size along
    the axis (their first dimension for a named axis) is the number of layers.
    """
    position = axis.position if axis.position is not None else 0

    def carries_layers(leaf: object) -> bool:
        if is_named_leaf(leaf):
            return True
        shape = np.shape(leaf) if is_array(leaf) else ()
        return len(shape) > position and shape[position] == axis.size

    return carries_layers


def _argument_rules(
    axis: AxisInfo, is_scanned: IsScanned, n_args: int, leading: tuple[ScanPredicate, ...]
) -> Rules:
    """Rules for `(args, kwargs)`: `leading` for the first positional arguments (the
    stacked block, a shared input), `is_scanned` (default `per_layer`) for the rest."""
    extra = per_layer(axis) if is_scanned is None else scan_predicate(is_scanned)
    return Inputs((*leading, *(extra,) * (n_args - len(leading))), extra)  # type: ignore[arg-type]  # Inputs holds rules here: one predicate for every keyword


def _call_block(block: Any, carry: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return block(carry, *args, **kwargs)
    except Exception as error:
        note = _mixed_named_arrays(block, (carry, args, kwargs))
        if note is not None:
            error.add_note(note)
        raise


def _named_kinds(tree: object) -> set[type]:
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_named_leaf)
    return {type(leaf) for leaf in leaves if is_named_leaf(leaf)}


def _mixed_named_arrays(block: object, inputs: object) -> str | None:
    """Why a block may have failed: it holds one library's named arrays (Haliax's) and
    was given another's (bryo.hax's), which its code cannot combine."""
    held, given = _named_kinds(block), _named_kinds(inputs)
    foreign = given - held
    if not held or not foreign:
        return None
    names = lambda kinds: " and ".join(sorted(f"{k.__module__}.{k.__qualname__}" for k in kinds))
    return (
        f"The block holds {names(held)} arrays but was given {names(foreign)}: the named "
        "arrays of two libraries do not mix inside one block. Convert the inputs to the "
        "block's kind (Haliax and bryo.hax arrays: `bryo_haliax.to_haliax(x)` or "
        "`bryo_haliax.from_haliax(x)`)."
    )


def _names(fn: Callable, block: object, skip: int) -> ArgNames:
    """Error names of a block function's arguments (the block's own `__call__` for fold)."""
    named_after = type(block).__call__ if fn is _call_block and callable(block) else fn
    return ArgNames.of(named_after, skip)


# -- Stacked ---------------------------------------------------------------------------


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
        prevent_cse: bool | None = None,
    ) -> Callable[..., Stacked[M]]:
        """`Stacked.init(Layers, Block)(*args, **kwargs)`: build the blocks under vmap.

        Args:
            Block: the layers axis, with a size (e.g. `Axis("Layers", 12)`).
            module: the block: a class (built by its `init` static/class method if it has
                one, Haliax's convention, else by its constructor) or a function.
            gradient_checkpointing: checkpoint policy of `fold`/`scan` (default True).
            remat: alias of `gradient_checkpointing`.
            prevent_cse: Haliax's older way to set the policy's `prevent_cse` (deprecated).

        Returns:
            A function of the constructor's arguments. NamedArrays with the layers axis
            and JAX/NumPy arrays with at least one dimension (over their first axis) are
            mapped over the layers; everything else reaches every layer unchanged.
        """
        policy = _policy(gradient_checkpointing, remat, prevent_cse)
        build = block_constructor(module)

        def make(*args: Any, **kwargs: Any) -> Stacked[M]:
            info = _sized_axis(Block, "Stacked.init")
            return cls(_vmapped_blocks(build, info, args, kwargs), Block, policy)

        return make

    def _split(self) -> tuple[PyTree, Callable[[PyTree], M]]:
        tree, rebuild = block_splitter(self.stacked)(self.stacked)
        return tree, cast("Callable[[PyTree], M]", rebuild)  # it rebuilds the block's type

    def _rules(self, args: tuple, is_scanned: IsScanned, shared: int = 0) -> Rules:
        """Every array of the stacked block is scanned, the first `shared` arguments never,
        the other arguments per `is_scanned`."""
        axis = _sized_axis(self.Block, "Stacked")
        leading = (every_array, *(no_array,) * shared)
        return _argument_rules(axis, is_scanned, 1 + len(args), leading)

    def _scan_blocks(
        self, fn: Callable[..., Any], is_scanned: IsScanned, *, fold: bool
    ) -> Callable[..., Any]:
        """`run(init, *args)`: one scan of `fn(block, carry, *args)` over the layers."""

        def run(init: Any, *args: Any, **kwargs: Any) -> Any:
            tree, rebuild = self._split()

            def step(carry: Any, layer: PyTree, *a: Any, **k: Any) -> tuple[Any, Any]:
                block = rebuild(layer)
                with standing_in(block, self.stacked):  # its calls are named after the stack
                    out = fn(block, carry, *a, **k)
                return (out, None) if fold else split_carry_output(out, fn, "the block")

            carry, ys = scan_arguments(
                step,
                self.Block,
                init,
                (tree, *args),
                kwargs,
                policy=self.gradient_checkpointing,
                rules=self._rules(args, is_scanned),
                names=_names(fn, self.stacked, skip=2).prefixed("stacked"),
            )
            return carry if fold else (carry, ys)

        return run

    def fold_via(
        self, fn: Callable[..., Carry], *, is_scanned: IsScanned = None
    ) -> Callable[..., Carry]:
        """`fold_via(fn)(init, *args, **kwargs)` folds `fn(block, carry, *args, **kwargs)`.

        Arguments carrying the layers axis are split between the layers (see the module
        docstring); `is_scanned` (a predicate, True or False) picks them instead.
        """
        return self._scan_blocks(fn, is_scanned, fold=True)

    def scan_via(
        self, fn: Callable[..., tuple[Carry, Any]], *, is_scanned: IsScanned = None
    ) -> Callable[..., tuple[Carry, Any]]:
        """`scan_via(fn)(init, *args)` scans `fn(block, carry, *args) -> (carry, output)`."""
        return self._scan_blocks(fn, is_scanned, fold=False)

    def _vmap_blocks(
        self, fn: Callable[..., Any], is_scanned: IsScanned, shared: int
    ) -> Callable[..., Any]:
        """`run(*args)`: `fn(block, *args)` for every block under one `jax.vmap`."""

        def run(*args: Any, **kwargs: Any) -> Any:
            tree, rebuild = self._split()

            def apply(layer: PyTree, *a: Any, **k: Any) -> Any:
                block = rebuild(layer)
                with standing_in(block, self.stacked):
                    return fn(block, *a, **k)

            return vmap_arguments(
                apply,
                self.Block,
                (tree, *args),
                kwargs,
                rules=self._rules(args, is_scanned, shared),
                names=_names(fn, self.stacked, skip=1).prefixed("stacked"),
            )

        return run

    def vmap_via(
        self, fn: Callable[..., Any], *, is_scanned: IsScanned = None
    ) -> Callable[..., Any]:
        """`vmap_via(fn)(*args, **kwargs)`: `fn(block, *args, **kwargs)` for every block,
        in parallel; outputs gain the layers axis. Arguments are split as for `fold_via`."""
        return self._vmap_blocks(fn, is_scanned, shared=0)

    def fold(self, init: Carry, *args: Any, **kwargs: Any) -> Carry:
        """Apply the blocks in order, `x = block(x, *args, **kwargs)`, as one scan."""
        return self.fold_via(_call_block)(init, *args, **kwargs)

    def scan(self, init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        """Apply blocks returning `(carry, output)`; the outputs gain the layers axis."""
        return self.scan_via(_call_block)(init, *args, **kwargs)

    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply every block to the same `init`, in parallel; outputs gain the layers axis.

        `init` is never split; the other arguments are split as for `fold`."""
        return self._vmap_blocks(_call_block, None, shared=1)(init, *args, **kwargs)

    def get_layer(self, index: int) -> M:
        """The block of layer `index`, as a block of its own (no layers axis)."""
        info = _sized_axis(self.Block, "Stacked.get_layer")
        index = _check_index(index, info.size)  # type: ignore[arg-type]  # _sized_axis raised if the size is None
        return self._layers(info, [index], "get_layer")[0]

    def unstacked(self) -> list[M]:
        """Every layer as a block of its own, in order."""
        info = _sized_axis(self.Block, "Stacked.unstacked")
        return self._layers(info, range(info.size), "unstacked")  # type: ignore[arg-type]  # _sized_axis raised if the size is None

    def _layers(self, info: AxisInfo, indices: Iterable[int], op: str) -> list[M]:
        """The blocks of the layers `indices`, from one split of the stacked block."""
        tree, rebuild = self._split()
        layers = unbind_inputs(
            (tree,), {}, info, rules=every_array, names=ArgNames(("stacked",)), op=op
        )
        return [
            rebuild(layers.rebuild([array[i] for array in layers.arrays]).args[0]) for i in indices
        ]

    def __len__(self) -> int:
        return _sized_axis(self.Block, "Stacked").size  # type: ignore[return-value]  # _sized_axis raised if the size is None

    def to_state_dict(self, prefix: str | None = None) -> StateDict:
        """One state-dict entry per layer and array, `"{prefix}.{i}.{key}"`: the layout of
        a `torch.nn.Sequential` of the blocks, as Haliax writes a `Stacked`. A leaf that
        is not an array (a Python number or bool, the same in every layer: a dropout's
        `inference` flag) is written once, as `"{prefix}.{key}"`, as Haliax does."""
        out: StateDict = {}
        start = "" if prefix is None else prefix + "."
        for i, block in enumerate(self.unstacked()):
            layer = f"{start}{i}"
            for key, value in to_state_dict(block, layer).items():
                if not is_array(value):
                    if i > 0:
                        continue
                    key = start + key[len(layer) + 1 :]
                merge_state_dict({key: value}, out)
        return out

    def from_state_dict(self, state_dict: StateDict, prefix: str | None = None) -> Stacked[M]:
        """A new `Stacked` whose layer `i` is read from the keys `"{prefix}.{i}.*"` (the
        layout `to_state_dict` writes); each layer's arrays are stacked again. A layer's
        key missing there is also looked up as `"{prefix}.*"` when that holds a single
        value (the non-array leaves Haliax and `to_state_dict` write once)."""
        info = _sized_axis(self.Block, "Stacked.from_state_dict")
        shared = _shared_entries(state_dict, prefix, info.size)  # type: ignore[arg-type]  # _sized_axis raised if the size is None
        entries = collections.ChainMap(dict(state_dict), shared) if shared else state_dict
        layers = [
            from_state_dict(block, entries, with_prefix(prefix, str(i)))
            for i, block in enumerate(self._layer_templates())
        ]
        trees = [block_splitter(layer)(layer)[0] for layer in layers]
        _, rebuild = self._split()
        return dataclasses.replace(self, stacked=rebuild(stack_trees(trees, info)))

    def __iter__(self) -> Iterator[M]:
        return iter(self.unstacked())

    def _layer_templates(self) -> list[M]:
        """The layers as templates for `from_state_dict`: `unstacked()`, or, when the
        stack holds `jax.ShapeDtypeStruct`s (`eqx.filter_eval_shape` of a model), each
        layer's shapes found by `jax.eval_shape` (a struct cannot be sliced)."""
        leaves, treedef = jax.tree_util.tree_flatten(self)
        if not any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves):
            return self.unstacked()
        shaped = [i for i, leaf in enumerate(leaves) if is_array(leaf) or _is_struct(leaf)]
        return [_abstract_layer(leaves, treedef, shaped, i) for i in range(len(self))]


def _shared_entries(state_dict: StateDict, prefix: str | None, size: int) -> dict[str, Any]:
    """Each single value under `prefix` that is not a layer's (`"{prefix}.{key}"`, `key`
    not starting with a layer number), keyed as every layer's `"{prefix}.{i}.{key}"`."""
    start = "" if prefix is None else prefix + "."
    shared: dict[str, Any] = {}
    for key, value in state_dict.items():
        rest = key[len(start) :]
        if key.startswith(start) and not rest.split(".", 1)[0].isdigit() and np.ndim(value) == 0:
            shared.update({f"{start}{i}.{rest}": value for i in range(size)})
    return shared


def _abstract_layer(leaves: list[Any], treedef: Any, shaped: list[int], index: int) -> Any:
    """Layer `index` of the `Stacked` flattened to `leaves`, its arrays as
    `ShapeDtypeStruct`s; its other leaves (functions, numbers) kept as they are."""
    kept: dict[str, Any] = {}

    def layer(*arrays: Any) -> list[Any]:
        full = list(leaves)
        for position, array in zip(shaped, arrays, strict=True):
            full[position] = array
        block_leaves, block_def = jax.tree_util.tree_flatten(
            treedef.unflatten(full).get_layer(index)
        )
        kept.update(leaves=block_leaves, treedef=block_def)
        return [leaf for leaf in block_leaves if isinstance(leaf, jax.Array)]

    structs = iter(jax.eval_shape(layer, *(leaves[i] for i in shaped)))
    rebuilt = [next(structs) if isinstance(leaf, jax.Array) else leaf for leaf in kept["leaves"]]
    return kept["treedef"].unflatten(rebuilt)


def _vmapped_blocks(build: Callable[..., M], info: AxisInfo, args: tuple, kwargs: dict) -> M:
    inputs = unbind_inputs(
        args, kwargs, info, rules=has_extent, names=ArgNames.of(build, 0), op="Stacked.init"
    )
    outputs = OutputStacker(static_nonarrays=True)
    rebuilds: list[Callable[[PyTree], M]] = []

    def one(slices: list[jax.Array]) -> list[jax.Array]:
        step = inputs.rebuild(slices)
        block = build(*step.args, **step.kwargs)
        tree, rebuild = block_splitter(block)(block)
        _check_is_pytree(block, tree)
        rebuilds.append(cast("Callable[[PyTree], M]", rebuild))  # rebuilds the block's type
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
            "bryo_pytree.pytree_dataclass), or declare its type to bryo as a graph node (a "
            "backend's `bryo_graph_node_types` hook; then it stacks by its State), or give "
            "its backend a `bryo_scan_block_splitters` hook."
        )


# -- BlockSeq --------------------------------------------------------------------------


def _layer(inputs: Unbound, index: int) -> Inputs:
    """The arguments of layer `index`: its slice of every per-layer argument."""
    return inputs.rebuild([array[index] for array in inputs.arrays])


@pytree_dataclass
class BlockSeq(Generic[M]):
    """A list of blocks with `Stacked`'s interface, applied with plain Python loops.

    Compiles each block separately (slower to compile for deep stacks), but the blocks may
    differ in structure. `gradient_checkpointing` wraps each block call in
    `jax.checkpoint` (`nested` has no meaning for a loop and is ignored). Extra arguments
    are split between the layers as for `Stacked`.
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
        prevent_cse: bool | None = None,
    ) -> Callable[..., BlockSeq[M]]:
        """`BlockSeq.init(Layers, Block)(*args, **kwargs)`, mapped like `Stacked.init`."""
        policy = _policy(gradient_checkpointing, remat, prevent_cse)
        build = block_constructor(module)

        def make(*args: Any, **kwargs: Any) -> BlockSeq[M]:
            info = _sized_axis(Block, "BlockSeq.init")
            names = ArgNames.of(build, 0)
            inputs = unbind_inputs(
                args, kwargs, info, rules=has_extent, names=names, op="BlockSeq.init"
            )
            blocks = []
            for i in range(info.size):  # type: ignore[arg-type]  # _sized_axis raised if the size is None
                layer = _layer(inputs, i)
                blocks.append(build(*layer.args, **layer.kwargs))
            return cls(blocks, Block, policy)

        return make

    def _per_layer(
        self,
        fn: Callable,
        args: tuple,
        kwargs: dict,
        is_scanned: IsScanned,
        *,
        skip: int,
        shared: int = 0,
    ) -> Unbound:
        """The arguments split between the layers (the first `shared` ones are not)."""
        axis = dataclasses.replace(resolve_axis(self.Block), size=len(self.blocks))
        return unbind_inputs(
            args,
            kwargs,
            axis,
            rules=_argument_rules(axis, is_scanned, len(args), (no_array,) * shared),
            names=_names(fn, self.blocks[0] if self.blocks else None, skip),
            op="BlockSeq",
        )

    def _step(self, fn: Callable[..., Any]) -> Callable[[M, Any, Inputs], Any]:
        """`step(block, carry, inputs) -> fn(block, carry, *inputs...)`, checkpointed."""
        if self.gradient_checkpointing.disable:
            return lambda block, carry, inputs: fn(block, carry, *inputs.args, **inputs.kwargs)
        policy = dataclasses.replace(self.gradient_checkpointing, nested=False)

        def step(block: M, carry: Any, inputs: Inputs) -> Any:
            arrays, rebuild = partition_arrays(block)
            body = lambda c, a: fn(rebuild(a), c, *inputs.args, **inputs.kwargs)
            return policy.checkpoint(body)(carry, arrays)

        return step

    def _loop(
        self, fn: Callable[..., Any], is_scanned: IsScanned, *, fold: bool
    ) -> Callable[..., Any]:
        """`run(init, *args)`: `fn(block, carry, *args)` for each block in a Python loop."""

        def run(init: Any, *args: Any, **kwargs: Any) -> Any:
            inputs = self._per_layer(fn, args, kwargs, is_scanned, skip=2)
            step = self._step(fn)
            carry, outputs = init, []
            for i, block in enumerate(self.blocks):
                out = step(block, carry, _layer(inputs, i))
                if fold:
                    carry = out
                else:
                    carry, y = split_carry_output(out, fn, "the block")
                    outputs.append(y)
            return carry if fold else (carry, stack_trees(outputs, resolve_axis(self.Block)))

        return run

    def fold_via(
        self, fn: Callable[..., Carry], *, is_scanned: IsScanned = None
    ) -> Callable[..., Carry]:
        """`fold_via(fn)(init, *args, **kwargs)`: a loop of `fn(block, carry, *args)`."""
        return self._loop(fn, is_scanned, fold=True)

    def scan_via(
        self, fn: Callable[..., tuple[Carry, Any]], *, is_scanned: IsScanned = None
    ) -> Callable[..., tuple[Carry, Any]]:
        """`scan_via(fn)(init, *args)`: a loop of `fn(block, carry, *args) -> (carry, out)`."""
        return self._loop(fn, is_scanned, fold=False)

    def _each_block(
        self, fn: Callable[..., Any], is_scanned: IsScanned, shared: int
    ) -> Callable[..., Any]:
        """`run(*args)`: `fn(block, *args)` for every block; outputs stacked."""

        def run(*args: Any, **kwargs: Any) -> Any:
            inputs = self._per_layer(fn, args, kwargs, is_scanned, skip=1, shared=shared)
            outputs = []
            for i, block in enumerate(self.blocks):
                layer = _layer(inputs, i)
                outputs.append(fn(block, *layer.args, **layer.kwargs))
            return stack_trees(outputs, resolve_axis(self.Block))

        return run

    def vmap_via(
        self, fn: Callable[..., Any], *, is_scanned: IsScanned = None
    ) -> Callable[..., Any]:
        """`vmap_via(fn)(*args)`: `fn(block, *args)` for every block; outputs stacked."""
        return self._each_block(fn, is_scanned, shared=0)

    def fold(self, init: Carry, *args: Any, **kwargs: Any) -> Carry:
        """Apply the blocks in order, `x = block(x, *args, **kwargs)`."""
        return self.fold_via(_call_block)(init, *args, **kwargs)

    def scan(self, init: Carry, *args: Any, **kwargs: Any) -> tuple[Carry, Any]:
        """Apply blocks returning `(carry, output)`; the outputs gain the layers axis."""
        return self.scan_via(_call_block)(init, *args, **kwargs)

    def vmap(self, init: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply every block to the same `init`; outputs stacked on the layers axis."""
        return self._each_block(_call_block, None, shared=1)(init, *args, **kwargs)

    def _state_dict_key_map(self) -> dict[str, str | None]:
        return {"blocks": None}

    def to_state_dict(self, prefix: str | None = None) -> StateDict:
        """One state-dict entry per layer, `"{prefix}.{i}.{key}"`, as Haliax writes a
        `BlockSeq` (a `torch.nn.Sequential` of the blocks)."""
        return fields_to_state_dict(self, prefix)

    def from_state_dict(self, state_dict: StateDict, prefix: str | None = None) -> BlockSeq[M]:
        """A new `BlockSeq` whose block `i` is read from the keys `"{prefix}.{i}.*"`."""
        return fields_from_state_dict(self, state_dict, prefix)

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
