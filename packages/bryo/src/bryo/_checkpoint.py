"""Checkpoints of a whole model `State` through orbax-checkpoint, the JAX ecosystem's format.

orbax saves and restores the arrays (sharded or not, typed PRNG keys included, no pickle
anywhere); this module adds the glue a model state needs around it:

- the arrays go to orbax as a plain nested dict keyed by the state's paths, so the files
  do not depend on how `State` flattens as a pytree;
- an index written next to them (JSON, through orbax's `JsonSave`) records each path's
  Variable type, shape, dtype, JSON-able metadata (logical sharding axes, rng tags) and
  the SHA-256 of its values;
- the folder is written beside the checkpoint it replaces and swapped in by rename, with
  a manifest of every file's SHA-256 (`_checkpoint_files`): a killed save leaves the old
  or the new checkpoint, and a damaged file is found before orbax reads it;
- `restore_state(directory, abstract)` restores into an abstract state (from `eval_shape`),
  optionally placed on a mesh with the Variables' logical axes, after checking that the
  checkpoint has the same paths, types, shapes and dtypes (an error names the first path
  that differs and how to fix it); without `abstract` it rebuilds the State from the index,
  resolving type names only among the Variable classes already imported (a checkpoint can
  never make Python import or unpickle anything).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts

from bryo_graph import State, Variable, VariableState, get_named_sharding
from bryo_pytree import Key

from . import _checkpoint_files as files
from ._checkpoint_files import CheckpointError as CheckpointError

#: The names of the two items of a bryo checkpoint (orbax `Composite` items).
ARRAYS_ITEM = "arrays"
INDEX_ITEM = "variables"
#: Where orbax's `JsonSave` puts the index inside its item.
INDEX_FILE = f"{INDEX_ITEM}/metadata"
#: Version 2 adds each array's SHA-256 and the manifest; version 1 (no checksums) still
#: restores, unchecked.
INDEX_VERSION = 2
UNCHECKED_INDEX_VERSION = 1
RAW_ARRAY = "array"  # the index type of a raw array State leaf (not in a Variable)
#: Files whose presence marks a folder as a checkpoint that `force=True` may replace.
CHECKPOINT_MARKERS = (files.MANIFEST, INDEX_ITEM, "_CHECKPOINT_METADATA")
MAX_RANK = 64  # numpy's limit
#: Keys orbax cannot write into file names (it joins a path's keys with `.`; a `/` in a
#: key is kept, so `/`-separated parts are checked on the joined name).
_UNSAFE_KEYS = ("", ".", "..")
_UNSAFE_IN_KEYS = ("\\", "\0")

#: Names `VariableState(type, value, **metadata)` takes itself: never metadata keys.
_RESERVED_METADATA = frozenset({"type", "value"})

StatePath = tuple[Key, ...]
"""A State path; the JSON index holds those of str and int keys (`_nested` writes them as str)."""


class IndexEntry(NamedTuple):
    """What the index records about one Variable of the saved state."""

    path: StatePath
    type: str
    shape: tuple[int, ...]
    dtype: str
    metadata: dict[str, Any]
    sha256: str | None = None  # of the values' bytes; None for arrays on other hosts

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "path": list(self.path), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, entry: object) -> IndexEntry:
        """An entry read from an index file, checked field by field (`CheckpointError`)."""
        if not isinstance(entry, dict) or not {"path", "type", "shape", "dtype"} <= set(entry):
            raise CheckpointError("needs `path`, `type`, `shape` and `dtype`")
        path, shape, dtype = entry["path"], entry["shape"], entry["dtype"]
        metadata, digest = entry.get("metadata", {}), entry.get("sha256")
        if not isinstance(path, list) or not path:
            raise CheckpointError(f"its path {path!r} is not a non-empty list of keys")
        for key in path:
            problem = _key_problem(key)
            if problem:
                raise CheckpointError(f"its path {path!r}: {problem}")
        if not isinstance(entry["type"], str):
            raise CheckpointError(f"its type {entry['type']!r} is not a type name")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_RANK
            or not all(type(size) is int and 0 <= size < 2**62 for size in shape)
        ):
            raise CheckpointError(f"its shape {shape!r} is not a list of sizes")
        _dtype(dtype)
        if not isinstance(metadata, dict):
            raise CheckpointError("its metadata is not an object")
        reserved = sorted(_RESERVED_METADATA & set(metadata))
        if reserved:
            raise CheckpointError(
                f"its metadata holds {reserved[0]!r}, which is a Variable's own field, not metadata"
            )
        if digest is not None and not (isinstance(digest, str) and files.is_sha256(digest)):
            raise CheckpointError("its sha256 is not 64 hexadecimal digits")
        return cls(
            tuple(path),
            entry["type"],
            tuple(shape),
            dtype,
            {k: _tuples(v) for k, v in metadata.items()},
            digest,
        )


class _Checkpoint(NamedTuple):
    """An opened checkpoint folder: its files, manifest (None before checksums) and index."""

    path: Path
    files: dict[str, Path]
    manifest: dict[str, files.FileRecord] | None
    index: list[IndexEntry]


#: orbax's `Checkpointer` is not safe to use from several threads at once, even on
#: different folders: two threads saving `a` and `b` fail in its temporary folders
#: (`FileNotFoundError`/`FileExistsError`, orbax-checkpoint 0.12.8). Saves, restores and
#: index reads of this process take turns (re-entrant: a restore reads the index).
_TURNS = threading.RLock()
_F = TypeVar("_F", bound=Callable[..., Any])


def _one_at_a_time(function: _F) -> _F:
    """`function`, run while holding `_TURNS`."""

    @functools.wraps(function)
    def in_turn(*args: Any, **kwargs: Any) -> Any:
        with _TURNS:
            return function(*args, **kwargs)

    return cast(_F, in_turn)


@_one_at_a_time
def save_state(directory: str | Path, state: State, *, force: bool = False) -> Path:
    """Save a whole model state (every Variable type, rng keys and counts) with orbax.

    The checkpoint is written beside `directory` and renamed into place once complete:
    a save killed at any moment leaves the previous checkpoint or the new one, and the
    next save removes what the killed one left.

    Args:
        directory: the checkpoint folder to create (absolute or relative).
        state: a `State` (from `bryo.split`, `bryo.state` or `nnx.split`).
        force: replace an existing checkpoint at `directory` (a folder that is not a
            checkpoint is never replaced).

    Returns:
        The checkpoint's absolute path.
    """
    directory = Path(directory).absolute()
    if jax.process_count() > 1:
        raise CheckpointError(
            f"{directory}: `save_state` writes from one process and this job has "
            f"{jax.process_count()}; save a multi-host state with orbax's CheckpointManager."
        )
    flat = state.flat_state()
    index = [_index_entry(path, leaf) for path, leaf in flat.items()]
    arrays = _nested({path: _value(leaf) for path, leaf in flat.items()})
    document = {"version": INDEX_VERSION, "variables": [e.to_json() for e in index]}
    _make_parent(directory)
    with files.checkpoint_lock(directory, exclusive=True):  # other processes' saves
        files.recover(directory)
        _check_destination(directory, force)
        staging = files.staging_folder(directory)
        try:
            with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
                checkpointer.save(
                    staging,
                    ocp.args.Composite(
                        **{
                            ARRAYS_ITEM: ocp.args.StandardSave(arrays),
                            INDEX_ITEM: ocp.args.JsonSave(document),
                        }
                    ),
                )
            files.seal(staging)
        except BaseException:
            for leftover in files.find_leftovers(directory):
                if leftover.path.name.startswith(staging.name):
                    files.remove(leftover.path)
            raise
        files.swap_in(staging, directory)
    return directory


@_one_at_a_time
def restore_state(
    directory: str | Path,
    abstract: State | None = None,
    *,
    mesh: jax.sharding.Mesh | None = None,
    rules: Any = None,
) -> State:
    """Restore a state saved by `save_state`, checking every file against its checksum.

    Args:
        directory: the checkpoint folder.
        abstract: the state to restore into, usually `bryo.split(nnx.eval_shape(make))[1]`
            (leaves may be `jax.ShapeDtypeStruct`s or arrays; their shardings are kept,
            except that one on an abstract mesh, which `jax.eval_shape` of a sharded state
            gives, needs `mesh=`).
            Without it the State is rebuilt from the checkpoint's index.
        mesh: place every array on this mesh, by its Variable's logical axes (`abstract`
            is then required).
        rules: logical-to-mesh axis rules, as for `bryo_graph.shard`.

    Returns:
        The restored `State`, with the abstract state's Variable types and metadata (or
        the index's, without `abstract`).

    Raises:
        CheckpointError: the checkpoint is damaged (a file missing, resized or changed
            since saving), crafted (links, bad names, shapes beyond this machine's memory)
            or does not fit `abstract`; the message names the file or state path.
    """
    if abstract is None and mesh is not None:
        raise CheckpointError("`mesh=` needs `abstract=`: pass the abstract state too.")
    directory = Path(directory).absolute()
    with files.checkpoint_lock(directory, exclusive=False):  # no save swaps meanwhile
        checkpoint = _open(directory)
        if abstract is None:
            return _restore_from_index(checkpoint)
        flat = abstract.flat_state()
        _check_fits(checkpoint.path, checkpoint.index, flat)
        arrays = _restore_checked(checkpoint, _targets(directory, abstract, mesh, rules))
    return State.from_flat_path(
        {path: _with_value(leaf, _lookup(arrays, path)) for path, leaf in flat.items()}
    )


@_one_at_a_time
def read_index(directory: str | Path) -> list[IndexEntry]:
    """The index of a checkpoint: each saved Variable's path, type, shape, dtype, metadata
    and checksum (the index file is checked against the manifest first)."""
    directory = Path(directory).absolute()
    with files.checkpoint_lock(directory, exclusive=False):
        return _open(directory).index


# Opening and checking -------------------------------------------------------------------


def _open(directory: str | Path) -> _Checkpoint:
    """Find a checkpoint (or the complete one a killed save left), refuse links, and read
    its manifest and index, the index checked against the manifest before parsing."""
    requested = Path(directory).absolute()
    path = files.resolve(requested)
    if not path.is_dir():
        raise _not_a_checkpoint(requested, "a file" if path.exists() else "no such folder")
    found = files.walk(path)
    manifest = files.read_manifest(path) if files.MANIFEST in found else None
    if manifest is not None:
        record = manifest.get(INDEX_FILE)
        damage = (
            files.Damage(INDEX_FILE, "is not listed in the manifest", changed=False)
            if record is None
            else files.check_file(path, INDEX_FILE, record)
        )
        if damage is not None:
            raise _damage_error(path, [damage])
    elif INDEX_FILE not in found:
        raise _not_a_checkpoint(requested, f"no `{INDEX_FILE}` index")
    index_file = path / INDEX_FILE
    version, index = _parse_index(files.read_json(index_file, "index"), index_file)
    if manifest is None and version != UNCHECKED_INDEX_VERSION:
        raise CheckpointError(
            f"{path / files.MANIFEST}: missing; this checkpoint (index version {version}) was "
            "saved with one, so it was deleted. Restore an earlier checkpoint or save again."
        )
    return _Checkpoint(path, found, manifest, index)


def _not_a_checkpoint(directory: Path, reason: str) -> CheckpointError:
    leftovers = [leftover.path.name for leftover in files.find_leftovers(directory)]
    unfinished = (
        f" An unfinished save left {', '.join(leftovers)}, which is not a checkpoint; the "
        "next `save_state` here removes it."
        if leftovers
        else ""
    )
    return CheckpointError(
        f"{directory} is not a bryo checkpoint ({reason}); write one with `bryo.save_state`, "
        f"or restore a plain orbax checkpoint with orbax itself.{unfinished}"
    )


def _parse_index(document: object, index_file: Path) -> tuple[int, list[IndexEntry]]:
    if not isinstance(document, dict) or not isinstance(document.get("variables"), list):
        raise CheckpointError(f"{index_file}: not a bryo index (no `variables` list).")
    version = document.get("version")
    if version not in (UNCHECKED_INDEX_VERSION, INDEX_VERSION):
        raise CheckpointError(
            f"{index_file}: index version {version!r}, this bryo reads versions "
            f"{UNCHECKED_INDEX_VERSION} and {INDEX_VERSION}."
        )
    index = []
    for number, raw in enumerate(document["variables"]):
        try:
            index.append(IndexEntry.from_json(raw))
        except CheckpointError as error:
            raise CheckpointError(
                f"{index_file}: variable {number} {error}; the index is damaged or crafted."
            ) from None
    paths: dict[StatePath, None] = {}
    for entry in index:
        if entry.path in paths:
            raise CheckpointError(f"{index_file}: state path {_show(entry.path)} is listed twice.")
        paths[entry.path] = None
    try:
        _nested(paths)
    except CheckpointError as error:
        raise CheckpointError(f"{index_file}: {error}") from None
    return version, index


def _restore_checked(checkpoint: _Checkpoint, targets: dict[StatePath, Any]) -> Any:
    """The arrays of a checkpoint whose every file matches its manifest."""
    if checkpoint.manifest is not None:
        damages = files.check_files(checkpoint.path, checkpoint.files, checkpoint.manifest)
        if damages:
            raise _damage_error(checkpoint.path, damages, checkpoint, targets)
    return _restore_arrays(checkpoint.path, targets)


def _damage_error(
    path: Path,
    damages: list[files.Damage],
    checkpoint: _Checkpoint | None = None,
    targets: dict[StatePath, Any] | None = None,
) -> CheckpointError:
    """The error for files that differ from the manifest: the first one, the number of
    others, and where only array data changed, the state paths whose values changed."""
    first, others = damages[0], [damage.name for damage in damages[1:]]
    message = f"{path / first.name}: {first.problem}"
    if others:
        more = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        message += f"; {len(others)} more damaged file(s): {more}"
    array_data_only = all(
        damage.changed and damage.name.startswith(f"{ARRAYS_ITEM}/") for damage in damages
    )
    if checkpoint is not None and targets is not None and array_data_only:
        message += _changed_values(checkpoint, targets)
    return CheckpointError(
        f"{message}. The checkpoint is damaged: restore an earlier one, or save again."
    )


def _changed_values(checkpoint: _Checkpoint, targets: dict[StatePath, Any]) -> str:
    """Which state paths a change in array files altered, found by restoring the arrays
    and comparing them with the checksums the index holds."""
    try:
        arrays = _restore_arrays(checkpoint.path, targets)
    except CheckpointError as error:
        return f" ({error.args[0].split(': ', 1)[-1]})"
    changed = [
        _show(entry.path)
        for entry in checkpoint.index
        if entry.sha256 is not None and _digest(_lookup(arrays, entry.path)) != entry.sha256
    ]
    return f"; it holds the values of state path(s) {', '.join(changed)}" if changed else ""


def _make_parent(directory: Path) -> None:
    if directory.name in ("", ".."):
        raise CheckpointError(f"{directory}: a checkpoint needs a folder name of its own.")
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CheckpointError(
            f"{directory}: its folder {directory.parent} cannot be made, a part of that path "
            "is a file; choose a path inside a folder."
        ) from None


def _check_destination(directory: Path, force: bool) -> None:
    if not (directory.is_symlink() or directory.exists()):
        return
    if not force:
        raise CheckpointError(
            f"{directory} already exists; pass `force=True` to replace it (the old "
            "checkpoint stays until the new one is complete)."
        )
    if not files.is_replaceable(directory, CHECKPOINT_MARKERS):
        raise CheckpointError(
            f"{directory} exists and is not a checkpoint; `force=True` replaces checkpoints "
            "only. Move it away or choose another folder."
        )


# Index entries and values ---------------------------------------------------------------


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
    for key in path:
        problem = _key_problem(key)
        if problem:
            raise CheckpointError(f"state path {_show(path)}: {problem}; rename it.")
    value = _value(leaf)
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise CheckpointError(
            f"state path {_show(path)}: a {type(value).__name__} is not an "
            "array; checkpoints hold arrays only (split such values out of the state first)."
        )
    metadata = (
        {k: v for k, v in leaf.metadata.items() if _is_json(v)}
        if isinstance(leaf, Variable)
        else {}
    )
    return IndexEntry(
        path, _kind(leaf), tuple(value.shape), str(value.dtype), metadata, _digest(value)
    )


def _key_problem(key: object) -> str | None:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        return f"key {key!r} is not a string or an integer"
    if isinstance(key, str) and (key in _UNSAFE_KEYS or any(bad in key for bad in _UNSAFE_IN_KEYS)):
        return (
            f"key {key!r} cannot name an array in a checkpoint (orbax writes keys into file "
            "names, so empty keys, `.`, `..`, `\\` and NUL are refused)"
        )
    return None


def _digest(value: Any) -> str | None:
    """SHA-256 of an array's values (a typed key's data), or None when this process holds
    only part of it."""
    if isinstance(value, jax.Array):
        if not value.is_fully_addressable:
            return None
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
    host = np.ascontiguousarray(np.asarray(value))
    return hashlib.sha256(host.reshape(-1).view(np.uint8).data).hexdigest()


def _type_name(variable_type: type) -> str:
    return f"{variable_type.__module__}.{variable_type.__qualname__}"


def _show(path: StatePath) -> str:
    return "/".join(map(str, path))


@functools.cache
def _key_dtypes() -> dict[str, tuple[Any, int]]:
    """Typed PRNG key dtypes by name (`key<fry>`), with the bytes of one key's data."""
    found = {}
    for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
        key = jax.eval_shape(lambda impl=impl: jax.random.key(0, impl=impl))
        data = jax.eval_shape(lambda impl=impl: jax.random.key_data(jax.random.key(0, impl=impl)))
        found[str(key.dtype)] = (key.dtype, data.dtype.itemsize * math.prod(data.shape))
    return found


def _dtype(name: object) -> tuple[Any, int]:
    """The dtype an index names, with its bytes per element: a number, bool or PRNG key
    type; any other name (objects, strings, structures) is refused."""
    if isinstance(name, str) and name in _key_dtypes():
        return _key_dtypes()[name]
    dtype = None
    if isinstance(name, str) and len(name) < 64:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                dtype = jnp.dtype(name)
            except (TypeError, ValueError):
                dtype = None
    if (
        dtype is None
        or str(dtype) != name
        or not (dtype == np.bool_ or jnp.issubdtype(dtype, jnp.number))
    ):
        raise CheckpointError(f"its dtype {name!r} is not a numeric, bool or PRNG key dtype")
    return dtype, dtype.itemsize


# Checking against an abstract state -----------------------------------------------------


def _check_fits(directory: Path, index: list[IndexEntry], flat: Mapping[StatePath, Any]) -> None:
    saved = {entry.path: entry for entry in index}
    for path, leaf in flat.items():
        where = f"{directory}: state path {_show(path)}"
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
        names = ", ".join(_show(p) for p in extra[:5])
        raise CheckpointError(
            f"{directory}: the checkpoint holds {len(extra)} path(s) the abstract state lacks "
            f"({names}); restore into the whole model's state."
        )


def _describe(found: tuple[str, tuple[int, ...], str]) -> str:
    type_name, shape, dtype = found
    return f"{type_name.rsplit('.', 1)[-1]} {dtype}{list(shape)}"


def _targets(directory: Path, abstract: State, mesh: Any, rules: Any) -> dict[StatePath, Any]:
    flat = abstract.flat_state()
    shardings = get_named_sharding(abstract, mesh, rules).flat_state() if mesh is not None else {}
    targets = {}
    for path, leaf in flat.items():
        value = _value(leaf)
        if path in shardings:
            sharding = shardings[path].value
        else:
            sharding = getattr(value, "sharding", None)
            _check_placeable(directory, path, sharding)
        targets[path] = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
    return targets


def _check_placeable(directory: Path, path: StatePath, sharding: object) -> None:
    """Refuse a sharding on an `AbstractMesh` (what `jax.eval_shape` of a sharded state gives
    on recent jax): it names no devices, and orbax fails on it obscurely."""
    if isinstance(sharding, jax.sharding.NamedSharding) and isinstance(
        sharding.mesh, jax.sharding.AbstractMesh
    ):
        raise CheckpointError(
            f"{directory}: state path {_show(path)}: the abstract state places it on an "
            "abstract mesh (`jax.eval_shape` of a sharded state gives one), which names no "
            "devices; pass `mesh=` (and `rules=`) to place every array by its logical axes, "
            "or give it a sharding on a real mesh."
        )


# Restoring ------------------------------------------------------------------------------


def _restore_arrays(directory: Path, targets: dict[StatePath, Any]) -> Any:
    _check_stored_sizes(directory, targets)
    items = {ARRAYS_ITEM: ocp.args.StandardRestore(_nested(targets))}
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            return checkpointer.restore(directory, ocp.args.Composite(**items))[ARRAYS_ITEM]
    except Exception as error:  # orbax and tensorstore raise many types; name the item
        detail = str(error).strip().split("\n", 1)[0][:300]
        raise CheckpointError(
            f"{directory / ARRAYS_ITEM}: orbax could not restore the arrays "
            f"({type(error).__name__}: {detail})."
        ) from error


def _check_stored_sizes(directory: Path, targets: dict[StatePath, Any]) -> None:
    """Refuse arrays whose stored layout claims more memory than their target.

    tensorstore, not bryo, reads each array's zarr metadata (its shape, dtype and chunk
    shape, inside orbax's OCDBT files, or plain files where orbax's `_METADATA` says
    `use_ocdbt: false`) and allocates a whole chunk to read one: a crafted checkpoint of a
    few KB, its manifest resealed, could claim a chunk of gigabytes for an array of 4
    values. Each array is opened first in every layout orbax may read it in (metadata
    only, all at once) and refused when its stored bytes, or one chunk's, exceed its
    target's. An array that cannot be opened is left to orbax, which names it."""
    arrays = directory / ARRAYS_ITEM
    context = ts.Context()  # (one cache: the OCDBT manifest and b-tree are read once)
    opening = []
    for kvstore, driver in _array_layouts(arrays):
        for path, target in targets.items():
            where = {**kvstore, "path": f"{kvstore.get('path', '')}{_stored_name(path)}/"}
            spec = {"driver": driver, "kvstore": where}
            try:
                opening.append((path, target, ts.open(spec, open=True, read=True, context=context)))
            except Exception:  # (a spec tensorstore refuses: orbax names it)
                continue
    for path, target, future in opening:
        try:
            store = future.result()
            stored, chunk = tuple(store.shape), tuple(store.chunk_layout.read_chunk.shape)
            itemsize = store.dtype.numpy_dtype.itemsize
        except Exception:  # (no such array in this layout: orbax names what it misses)
            continue
        wanted = math.prod(target.shape) * _dtype(str(target.dtype))[1]
        claimed = max(math.prod(stored), math.prod(chunk)) * itemsize
        if claimed > max(wanted, itemsize):
            raise CheckpointError(
                f"{arrays}: state path {_show(path)} is stored with shape {list(stored)} in "
                f"chunks of {list(chunk)} ({claimed:,} bytes), and restores into "
                f"{wanted:,} bytes ({target.dtype}{list(target.shape)}); its stored metadata "
                "is damaged or crafted."
            )


def _array_layouts(arrays: Path) -> list[tuple[dict[str, str], str]]:
    """(kvstore, zarr driver) pairs orbax may read the arrays with: the ones its
    `_METADATA` names (`use_ocdbt`, `use_zarr3`), every one where it names none."""
    try:
        metadata = files.read_json(arrays / "_METADATA", "orbax metadata")
    except CheckpointError:
        metadata = None
    flags = metadata if isinstance(metadata, dict) else {}
    ocdbt, zarr3 = flags.get("use_ocdbt"), flags.get("use_zarr3")
    kvstores = {
        True: {"driver": "ocdbt", "base": f"{arrays.as_uri()}/"},
        False: {"driver": "file", "path": f"{arrays}/"},
    }
    return [
        (kvstores[use_ocdbt], "zarr3" if use_zarr3 else "zarr")
        for use_ocdbt in ((ocdbt,) if isinstance(ocdbt, bool) else (True, False))
        for use_zarr3 in ((zarr3,) if isinstance(zarr3, bool) else (False, True))
    ]


def _stored_name(path: StatePath) -> str:
    """The name orbax stores a state path's array under (its keys joined with `.`)."""
    return ".".join(map(str, path))


def _index_targets(checkpoint: _Checkpoint) -> dict[StatePath, Any]:
    """Shapes and dtypes to restore from the index alone, refused when they claim more
    bytes than this machine's memory (before anything is allocated)."""
    targets, claimed = {}, 0
    for entry in checkpoint.index:
        dtype, itemsize = _dtype(entry.dtype)
        claimed += math.prod(entry.shape) * itemsize
        targets[entry.path] = entry.shape, dtype
    memory = _memory_bytes()
    if claimed > memory:
        raise CheckpointError(
            f"{checkpoint.path / INDEX_FILE}: the index claims arrays of {claimed:,} bytes, "
            f"more than this machine's {memory:,} bytes of memory; the index is damaged or "
            "crafted (pass `abstract=` to restore a checkpoint onto a mesh)."
        )
    return {path: jax.ShapeDtypeStruct(*spec) for path, spec in targets.items()}


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: a generous 1 TiB
        return 2**40


def _restore_from_index(checkpoint: _Checkpoint) -> State:
    types = _known_variable_types()
    for entry in checkpoint.index:
        if entry.type != RAW_ARRAY and entry.type not in types:
            raise CheckpointError(
                f"{checkpoint.path}: state path {_show(entry.path)} is a {entry.type}, "
                "a Variable type not imported here; import the module defining it, or pass "
                "`abstract=`."
            )
    arrays = _restore_checked(checkpoint, _index_targets(checkpoint))
    flat: dict[StatePath, Any] = {}
    for entry in checkpoint.index:
        value = _lookup(arrays, entry.path)
        flat[entry.path] = (
            value
            if entry.type == RAW_ARRAY
            else VariableState(types[entry.type], value, **entry.metadata)
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
    """`{("a", 0, "b"): x}` -> `{"a": {"0": {"b": x}}}` (orbax keys are strings).

    Refuses paths orbax would store under one name (it joins the keys with `.`), names
    that would leave the folder (`a/..`), and paths that hold one another."""
    tree: dict[str, Any] = {}
    names: dict[str, StatePath] = {}
    for path, value in flat.items():
        name = _stored_name(path)
        if any(part in _UNSAFE_KEYS for part in name.split("/")):
            raise CheckpointError(
                f"state path {_show(path)} would be stored by orbax as `{name}`, a file name "
                "leaving its folder (a `/` next to an empty, `.` or `..` part); rename it."
            )
        if name in names:
            raise CheckpointError(
                f"state paths {_show(names[name])} and {_show(path)} would both be stored "
                f"as `{name}` (orbax joins keys with `.` and writes them as strings); "
                "rename one of them."
            )
        names[name] = path
        node: Any = tree
        for key in path[:-1]:
            node = node.setdefault(str(key), {})
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict) or str(path[-1]) in node:
            raise CheckpointError(
                f"state path {_show(path)} overlaps another path (one holds the other)."
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
    """JSON wrote the metadata's tuples (logical sharding axes) as lists: undo that.
    (The index's depth is bounded when it is read, so this recursion is too.)"""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
