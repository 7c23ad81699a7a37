"""Checkpoints of a whole model `State` through orbax-checkpoint, the JAX ecosystem's format.

orbax saves and restores the arrays (sharded or not, typed PRNG keys included, no pickle
anywhere); this module adds the glue a model state needs around it:

- the arrays go to orbax as a plain nested dict keyed by the state's paths, so the files
  do not depend on how `State` flattens as a pytree;
- an index written next to them (JSON, through orbax's `JsonSave`) records each path's
  Variable type, shape, dtype and JSON-able metadata (logical sharding axes, rng tags);
- `restore_state(directory, abstract)` restores into an abstract state (from `eval_shape`),
  optionally placed on a mesh with the Variables' logical axes, after checking that the
  checkpoint has the same paths, types, shapes and dtypes (an error names the first path
  that differs and how to fix it); without `abstract` it rebuilds the State from the index,
  resolving type names only among the Variable classes already imported (a checkpoint can
  never make Python import or unpickle anything).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import orbax.checkpoint as ocp

from bryo_graph import State, Variable, VariableState, get_named_sharding
from bryo_pytree import Key

#: The names of the two items of a bryo checkpoint (orbax `Composite` items).
ARRAYS_ITEM = "arrays"
INDEX_ITEM = "variables"
INDEX_VERSION = 1
RAW_ARRAY = "array"  # the index type of a raw array State leaf (not in a Variable)

StatePath = tuple[Key, ...]
"""A State path; the JSON index holds those of str and int keys (`_nested` writes them as str)."""


class CheckpointError(ValueError):
    """A checkpoint that does not fit what it is restored into, or a state it cannot save."""


class IndexEntry(NamedTuple):
    """What the index records about one Variable of the saved state."""

    path: StatePath
    type: str
    shape: tuple[int, ...]
    dtype: str
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "path": list(self.path), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> IndexEntry:
        metadata = {k: _tuples(v) for k, v in dict(entry["metadata"]).items()}
        return cls(
            tuple(entry["path"]), entry["type"], tuple(entry["shape"]), entry["dtype"], metadata
        )


def save_state(directory: str | Path, state: State, *, force: bool = False) -> Path:
    """Save a whole model state (every Variable type, rng keys and counts) with orbax.

    Args:
        directory: the checkpoint folder to create (absolute or relative).
        state: a `State` (from `bryo.split`, `bryo.state` or `nnx.split`).
        force: replace an existing checkpoint at `directory`.

    Returns:
        The checkpoint's absolute path.
    """
    directory = Path(directory).absolute()
    flat = state.flat_state()
    index = [_index_entry(path, leaf) for path, leaf in flat.items()]
    arrays = _nested({path: _value(leaf) for path, leaf in flat.items()})
    document = {"version": INDEX_VERSION, "variables": [e.to_json() for e in index]}
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        checkpointer.save(
            directory,
            ocp.args.Composite(
                **{
                    ARRAYS_ITEM: ocp.args.StandardSave(arrays),
                    INDEX_ITEM: ocp.args.JsonSave(document),
                }
            ),
            force=force,
        )
    return directory


def restore_state(
    directory: str | Path,
    abstract: State | None = None,
    *,
    mesh: jax.sharding.Mesh | None = None,
    rules: Any = None,
) -> State:
    """Restore a state saved by `save_state`.

    Args:
        directory: the checkpoint folder.
        abstract: the state to restore into, usually `bryo.split(nnx.eval_shape(make))[1]`
            (leaves may be `jax.ShapeDtypeStruct`s or arrays; their shardings are kept).
            Without it the State is rebuilt from the checkpoint's index.
        mesh: place every array on this mesh, by its Variable's logical axes (`abstract`
            is then required).
        rules: logical-to-mesh axis rules, as for `bryo_graph.shard`.

    Returns:
        The restored `State`, with the abstract state's Variable types and metadata (or
        the index's, without `abstract`).
    """
    directory = Path(directory).absolute()
    index = read_index(directory)
    if abstract is None:
        if mesh is not None:
            raise CheckpointError("`mesh=` needs `abstract=`: pass the abstract state too.")
        return _restore_from_index(directory, index)
    flat = abstract.flat_state()
    _check_fits(directory, index, flat)
    targets = _targets(abstract, mesh, rules)
    arrays = _restore_arrays(directory, _nested(targets))
    return State.from_flat_path(
        {path: _with_value(leaf, _lookup(arrays, path)) for path, leaf in flat.items()}
    )


def read_index(directory: str | Path) -> list[IndexEntry]:
    """The index of a checkpoint: each saved Variable's path, type, shape, dtype, metadata."""
    directory = Path(directory).absolute()
    if not (directory / INDEX_ITEM).is_dir():
        raise CheckpointError(
            f"{directory} is not a bryo checkpoint (no `{INDEX_ITEM}` item); write one with "
            "`bryo.save_state`, or restore a plain orbax checkpoint with orbax itself."
        )
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        restored = checkpointer.restore(
            directory, ocp.args.Composite(**{INDEX_ITEM: ocp.args.JsonRestore()})
        )
    document = restored[INDEX_ITEM]
    if document.get("version") != INDEX_VERSION:
        raise CheckpointError(
            f"{directory}: index version {document.get('version')!r}, this bryo reads "
            f"version {INDEX_VERSION}."
        )
    return [IndexEntry.from_json(entry) for entry in document["variables"]]


def _value(leaf: object) -> Any:
    """A State leaf's array: a Variable's value, or the leaf itself (a raw array
    attribute stays raw in States, as in Flax NNX 0.12)."""
    return leaf.value if isinstance(leaf, Variable) else leaf


def _with_value(leaf: object, value: object) -> object:
    return leaf.replace(value) if isinstance(leaf, Variable) else value


def _kind(leaf: object) -> str:
    """The index's type of a State leaf: its Variable class, or `RAW_ARRAY`."""
    return _type_name(type(leaf)) if isinstance(leaf, Variable) else RAW_ARRAY


def _index_entry(path: StatePath, leaf: VariableState) -> IndexEntry:
    value = _value(leaf)
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise CheckpointError(
            f"state path {'/'.join(map(str, path))}: a {type(value).__name__} is not an "
            "array; checkpoints hold arrays only (split such values out of the state first)."
        )
    metadata = (
        {k: v for k, v in leaf.metadata.items() if _is_json(v)}
        if isinstance(leaf, Variable)
        else {}
    )
    return IndexEntry(path, _kind(leaf), tuple(value.shape), str(value.dtype), metadata)


def _type_name(variable_type: type) -> str:
    return f"{variable_type.__module__}.{variable_type.__qualname__}"


def _check_fits(directory: Path, index: list[IndexEntry], flat: Mapping[StatePath, Any]) -> None:
    saved = {entry.path: entry for entry in index}
    for path, leaf in flat.items():
        where = f"{directory}: state path {'/'.join(map(str, path))}"
        entry = saved.get(path)
        if entry is None:
            raise CheckpointError(
                f"{where} is not in the checkpoint; restore into a state of the model that "
                "was saved (same structure), or filter it out of `abstract` first."
            )
        found = (entry.type, entry.shape, entry.dtype)
        value = _value(leaf)
        wanted = (_kind(leaf), tuple(value.shape), str(value.dtype))
        if found != wanted:
            raise CheckpointError(
                f"{where}: the checkpoint holds a {_describe(found)}, the abstract state "
                f"wants a {_describe(wanted)}; build the abstract state with the saved "
                "model's sizes and types."
            )
    extra = sorted(set(saved) - set(flat), key=str)
    if extra:
        names = ", ".join("/".join(map(str, p)) for p in extra[:5])
        raise CheckpointError(
            f"{directory}: the checkpoint holds {len(extra)} path(s) the abstract state lacks "
            f"({names}); restore into the whole model's state."
        )


def _describe(found: tuple[str, tuple[int, ...], str]) -> str:
    type_name, shape, dtype = found
    return f"{type_name.rsplit('.', 1)[-1]} {dtype}{list(shape)}"


def _targets(abstract: State, mesh: Any, rules: Any) -> dict[StatePath, Any]:
    flat = abstract.flat_state()
    shardings = get_named_sharding(abstract, mesh, rules).flat_state() if mesh is not None else {}
    targets = {}
    for path, leaf in flat.items():
        value = _value(leaf)
        sharding = shardings[path].value if path in shardings else getattr(value, "sharding", None)
        targets[path] = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
    return targets


def _restore_arrays(directory: Path, targets: Any) -> Any:
    items = {ARRAYS_ITEM: ocp.args.StandardRestore(targets)}
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        return checkpointer.restore(directory, ocp.args.Composite(**items))[ARRAYS_ITEM]


def _restore_from_index(directory: Path, index: list[IndexEntry]) -> State:
    types = _known_variable_types()
    arrays = _restore_arrays(directory, None)
    flat = {}
    for entry in index:
        if entry.type == RAW_ARRAY:
            flat[entry.path] = _lookup(arrays, entry.path)
            continue
        variable_type = types.get(entry.type)
        if variable_type is None:
            raise CheckpointError(
                f"{directory}: state path {'/'.join(map(str, entry.path))} is a {entry.type}, "
                "a Variable type not imported here; import the module defining it, or pass "
                "`abstract=`."
            )
        flat[entry.path] = VariableState(
            variable_type, _lookup(arrays, entry.path), **entry.metadata
        )
    return State.from_flat_path(flat)


def _known_variable_types() -> dict[str, type]:
    found: dict[str, type] = {}
    pending = [Variable]
    while pending:
        cls = pending.pop()
        found.setdefault(_type_name(cls), cls)
        pending.extend(cls.__subclasses__())
    return found


def _nested(flat: Mapping[StatePath, Any]) -> dict[str, Any]:
    """`{("a", 0, "b"): x}` -> `{"a": {"0": {"b": x}}}` (orbax keys are strings)."""
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(str(key), {})
        if str(path[-1]) in node:
            raise CheckpointError(
                f"state path {'/'.join(map(str, path))} collides with another one once its "
                "keys are written as strings (e.g. 0 and '0'); rename one of them."
            )
        node[str(path[-1])] = value
    return tree


def _lookup(tree: Mapping[str, Any], path: StatePath) -> Any:
    node: Any = tree
    for key in path:
        node = node[str(key)]
    return node


def _is_json(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _tuples(value: Any) -> Any:
    """JSON wrote the metadata's tuples (logical sharding axes) as lists: undo that."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
