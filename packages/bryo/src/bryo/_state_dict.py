"""`bryo.hax.state_dict`'s Equinox base class, torch-compatible exports and safetensors files.

The state-dict walk itself (`to_state_dict`, `from_state_dict`) is core-scan's; this
module adds what needs Equinox or the file system: `ModuleWithStateDictSerialization`
(Haliax's base class for modules that rename or flatten their entries),
`to_torch_compatible_state_dict` and its inverse, and `save_state_dict`/`load_state_dict`,
which write and read the safetensors format (Hugging Face's: an 8-byte header length, a
JSON header naming each tensor's dtype, shape and byte range, then the raw bytes).

The reader trusts nothing in a file: the header's length, every dtype, shape and byte
range are checked against the file's size before any tensor is allocated, so a damaged or
hostile file raises `StateDictFileError` naming the tensor, and never allocates more than
the file holds.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from bryo_pytree import is_array
from bryo_scan import (
    StateDict,
    fields_from_state_dict,
    fields_to_state_dict,
    from_state_dict,
    to_state_dict,
)

T = TypeVar("T")
Mod = TypeVar("Mod", bound="ModuleWithStateDictSerialization")

MAX_HEADER_BYTES = 100_000_000
"""The largest safetensors header read (the limit of Hugging Face's own reader)."""

_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("<u1"),
    "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "BF16": np.dtype(jnp.bfloat16),
    "F8_E5M2": np.dtype(jnp.float8_e5m2),
    "F8_E4M3": np.dtype(jnp.float8_e4m3fn),
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


class StateDictFileError(ValueError):
    """A safetensors file that cannot be read (damaged, truncated, not safetensors), or a
    state dict that cannot be written as one."""


class ModuleWithStateDictSerialization(eqx.Module):
    """An `eqx.Module` that customises its state-dict entries (Haliax's base class).

    Override `_state_dict_key_map` to rename fields (`{"blocks": "h"}`; None splices a
    field's entries into the module's own prefix), `to_state_dict`/`from_state_dict` for
    anything else, and `flatten_for_export`/`unflatten_from_export` for the layout
    `to_torch_compatible_state_dict` writes. Any pytree works with bryo's state-dict
    functions without this class; it is here for code written against Haliax's.
    """

    def to_state_dict(self, prefix: str | None = None) -> StateDict:
        """The module's entries, field by field (after `_state_dict_key_map`)."""
        return fields_to_state_dict(self, prefix)

    def from_state_dict(self: Mod, state_dict: StateDict, prefix: str | None = None) -> Mod:
        """A new module read field by field from `state_dict`."""
        return fields_from_state_dict(self, state_dict, prefix)

    def _state_dict_key_map(self) -> dict[str, str | None]:
        return {}

    def flatten_for_export(self: Mod) -> Mod:
        """The module in PyTorch's layout (e.g. a linear layer's input axes as one)."""
        return self

    def unflatten_from_export(self: Mod, template: Mod) -> Mod:
        """The inverse of `flatten_for_export`, with `template`'s structure."""
        del template
        return self


def _is_exportable(node: object) -> bool:
    # By the methods, not the class: Haliax's own layers (`haliax.nn.Linear` flattens its
    # axis tuples) subclass Haliax's base class, not this one.
    cls = type(node)
    return isinstance(node, eqx.Module) and all(
        callable(getattr(cls, name, None)) for name in _EXPORT_METHODS
    )


_EXPORT_METHODS = ("flatten_for_export", "unflatten_from_export")


def flatten_modules_for_export(tree: T) -> T:
    """`tree` with every module in it that has `flatten_for_export` (bryo's or Haliax's
    `ModuleWithStateDictSerialization`, outermost first) replaced by its result."""

    def flatten(node: Any) -> Any:
        if not _is_exportable(node):
            return node
        flat = node.flatten_for_export()
        return jax.tree.map(flatten, flat, is_leaf=lambda x: x is not flat and _is_exportable(x))

    return jax.tree.map(flatten, tree, is_leaf=_is_exportable)


def unflatten_modules_from_export(tree: T, template: T) -> T:
    """The inverse of `flatten_modules_for_export`, module by module of `template`."""

    def unflatten(node: Any, like: Any) -> Any:
        if not _is_exportable(node):
            return node
        module = node.unflatten_from_export(like)
        return jax.tree.map(
            unflatten, module, like, is_leaf=lambda x: x is not module and _is_exportable(x)
        )

    return jax.tree.map(unflatten, tree, template, is_leaf=_is_exportable)


def to_torch_compatible_state_dict(
    tree: Any,
    *,
    flatten: bool = True,
    prefix: str | None = None,
    filter: Callable[[Any], bool] = is_array,
) -> StateDict:
    """A state dict of NumPy arrays in PyTorch's layout: `tree` filtered to its arrays
    (`filter`), its modules flattened for export (`flatten`), then `to_numpy_state_dict`."""
    tree = eqx.filter(tree, filter)
    if flatten:
        tree = flatten_modules_for_export(tree)
    return to_numpy_state_dict(tree, prefix=prefix)


def from_torch_compatible_state_dict(
    tree: T, state_dict: Mapping[str, Any], *, unflatten: bool = True, prefix: str | None = None
) -> T:
    """`tree` read from a state dict `to_torch_compatible_state_dict` wrote: flattened
    for export, read, then unflattened again with `tree` as the template."""
    if not unflatten:
        return from_state_dict(tree, state_dict, prefix)

    def real(leaf: Any) -> Any:  # a ShapeDtypeStruct template cannot be reshaped
        return jnp.zeros(leaf.shape, leaf.dtype) if isinstance(leaf, jax.ShapeDtypeStruct) else leaf

    tree = jax.tree.map(real, tree)
    flat = from_state_dict(flatten_modules_for_export(tree), state_dict, prefix)
    return unflatten_modules_from_export(flat, tree)


def to_numpy_state_dict(tree: Any, prefix: str | None = None) -> StateDict:
    """`to_state_dict` with every array copied to host memory as a NumPy array."""

    def to_host(leaf: Any) -> Any:
        return np.asarray(leaf) if isinstance(leaf, jax.Array) else leaf

    return {key: to_host(value) for key, value in to_state_dict(tree, prefix).items()}


def save_state_dict(state_dict: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write `state_dict` to `path` as a safetensors file (readable by Hugging Face's
    `safetensors`, PyTorch and `load_state_dict`).

    Arrays are copied to the host; Python numbers are written as 0-d arrays, None
    entries are left out. The file is written next to `path` and renamed over it once
    complete, so a crash leaves the old file or the new one, never half of one.

    Raises:
        StateDictFileError: a key is not a string or a value is not an array of a dtype
            safetensors holds (naming the key); nothing is written then.
    """
    tensors = {}
    for key, value in state_dict.items():
        if value is None:
            continue
        if not isinstance(key, str):
            raise StateDictFileError(f"state dict keys must be strings; got {key!r}.")
        array = np.asarray(value)
        if array.dtype not in _NAMES:
            raise StateDictFileError(
                f"the state dict's {key!r} has dtype {array.dtype}, which safetensors cannot "
                f"hold (it holds {', '.join(_DTYPES)}). Cast it first."
            )
        if array.dtype.byteorder == ">":
            array = array.byteswap().view(array.dtype.newbyteorder("<"))
        tensors[key] = array if array.flags.c_contiguous else array.copy(order="C")
    # largest alignment first, then by name, as Hugging Face's writer orders them
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.alignment, k))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key in order:
        size = tensors[key].nbytes
        header[key] = {
            "dtype": _NAMES[tensors[key].dtype],
            "shape": list(tensors[key].shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    target = Path(path)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(len(text).to_bytes(8, "little"))
            file.write(text)
            for key in order:
                file.write(tensors[key].tobytes())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_state_dict(path: str | os.PathLike[str]) -> StateDict:
    """The state dict in the safetensors file at `path`, as NumPy arrays, e.g. a
    Hugging Face checkpoint.

    Raises:
        StateDictFileError: the file is not a complete safetensors file; the message
            names the tensor or header field and the byte range at fault.
    """
    where = Path(path)
    with open(where, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        header, start = _read_header(file, size, where)
        entries = _check_entries(header, size - start, where)
        out: StateDict = {}
        for name, (dtype, shape, begin, end) in entries.items():
            array = np.empty(shape, dtype)
            file.seek(start + begin)
            if file.readinto(array.reshape(-1).view(np.uint8).data) != end - begin:
                raise StateDictFileError(f"{where}: the data of {name!r} ends early.")
            out[name] = array
    return out


def _read_header(file: Any, size: int, where: Path) -> tuple[dict[str, Any], int]:
    if size < 8:
        raise StateDictFileError(
            f"{where}: {size} bytes is too short for a safetensors file (8 bytes of header "
            "length, then the header). The file is truncated or not safetensors."
        )
    length = int.from_bytes(file.read(8), "little")
    if length > min(MAX_HEADER_BYTES, size - 8):
        raise StateDictFileError(
            f"{where}: the header says it is {length} bytes long, but the file has "
            f"{size - 8} bytes after the length (and headers over {MAX_HEADER_BYTES} bytes "
            "are refused). The file is truncated or not safetensors."
        )
    raw = file.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise StateDictFileError(
            f"{where}: bytes 8 to {8 + length} should be the JSON header but do not parse "
            f"({type(error).__name__}: {str(error)[:200]}). The file is damaged or not "
            "safetensors."
        ) from None
    if not isinstance(header, dict):
        raise StateDictFileError(
            f"{where}: the header is a JSON {type(header).__name__}, not an object."
        )
    return header, 8 + length


def _check_entries(
    header: dict[str, Any], data_bytes: int, where: Path
) -> dict[str, tuple[np.dtype, tuple[int, ...], int, int]]:
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StateDictFileError(f"{where}: `__metadata__` must map strings to strings.")
    entries = {}
    for name, entry in header.items():
        entries[name] = _check_entry(name, entry, data_bytes, where)
    spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items())
    position = 0
    for begin, end, name in spans:
        if begin != position:
            problem = "overlaps the one before" if begin < position else "leaves a gap before it"
            raise StateDictFileError(
                f"{where}: the data of {name!r} (bytes {begin} to {end}) {problem}: "
                "safetensors tensors fill the data without gaps or overlaps. The file is "
                "damaged."
            )
        position = end
    if position != data_bytes:
        raise StateDictFileError(
            f"{where}: the tensors' data ends at byte {position} of the {data_bytes} after "
            "the header: the file is damaged or has bytes appended."
        )
    return entries


def _check_entry(
    name: str, entry: object, data_bytes: int, where: Path
) -> tuple[np.dtype, tuple[int, ...], int, int]:
    def refuse(problem: str) -> StateDictFileError:
        return StateDictFileError(f"{where}: tensor {name!r}: {problem} The file is damaged.")

    if not isinstance(entry, dict):
        raise refuse(f"its header entry is a {type(entry).__name__}, not an object.")
    dtype = _DTYPES.get(entry.get("dtype"))  # type: ignore[arg-type]  # a non-str key misses
    if dtype is None:
        raise refuse(f"dtype {entry.get('dtype')!r} is not one of {', '.join(_DTYPES)}.")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(
        type(n) is int and n >= 0 for n in shape
    ):  # bools are ints: type() refuses them
        raise refuse(f"shape {shape!r} is not a list of non-negative integers.")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(n) is int for n in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_bytes
    ):
        raise refuse(
            f"data_offsets {offsets!r} is not a [begin, end] range within the "
            f"{data_bytes} bytes of data."
        )
    expected = math.prod(shape) * dtype.itemsize
    if offsets[1] - offsets[0] != expected:
        raise refuse(
            f"shape {shape} of {entry['dtype']} needs {expected} bytes, but its data_offsets "
            f"span {offsets[1] - offsets[0]}."
        )
    return dtype, tuple(shape), offsets[0], offsets[1]
