"""Torch-style state dicts (Haliax's `haliax.state_dict`): flat `{"a.0.weight": array}`.

`to_state_dict(tree)` walks any pytree (Equinox modules, dicts, lists, bryo modules, a
`Stacked`) and names each array by its path, joined with dots as PyTorch does; a
`Stacked` writes one entry per layer (`"blocks.0.weight"`, `"blocks.1.weight"`), as a
`torch.nn.Sequential` would. `from_state_dict(template, state_dict)` is the inverse: a
new tree shaped like `template` holding the state dict's arrays.

A node renames its fields through a `_state_dict_key_map()` method (`{"blocks": "h"}`;
None splices the field's entries into the node's own prefix), or takes over with its own
`to_state_dict(prefix)`/`from_state_dict(state_dict, prefix)` methods, as in Haliax.
Named arrays (any leaf type a backend registers with `bryo_scan_named_leaves`, Haliax's
too) are written as their plain array and read back with the template's axes.

Where Haliax is silent bryo says what went wrong: a missing key, an array whose shape
differs from the template's, or two leaves that would write the same key raise a
`StateDictError` naming the key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from bryo_graph import Variable
from bryo_pytree import is_array, is_shaped

from ._hooks import named_leaf_handler

T = TypeVar("T")

StateDict = dict[str, Any]
"""A flat mapping from dotted keys (`"layers.0.weight"`) to arrays."""

_SCALARS = (bool, int, float, complex)
# Haliax's base class's own methods walk the fields: a node whose method is one of those
# (or bryo's equivalent) is walked here instead, so that fields Haliax cannot walk (a bryo
# `Stacked`) are written too.
_DEFAULT_METHODS = frozenset(
    {
        "ModuleWithStateDictSerialization.to_state_dict",
        "ModuleWithStateDictSerialization.from_state_dict",
    }
)


class StateDictError(KeyError, ValueError):
    """A state dict that does not fit its model: a missing key, a mis-shaped array, or
    two leaves that write the same key. A `KeyError` (what Haliax raises for a missing
    key) and a `ValueError`."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def with_prefix(prefix: str | None, leaf: str | None) -> str | None:
    """`prefix` and `leaf` joined with a dot; either may be None (then the other).

    >>> with_prefix("model", "weight"), with_prefix(None, "weight"), with_prefix("model", None)
    ('model.weight', 'weight', 'model')
    """
    if prefix is None:
        return leaf
    if leaf is None:
        return prefix
    return f"{prefix}.{leaf}"


def _own_method(node: object, name: str) -> Callable[..., Any] | None:
    """`node`'s own `to_state_dict`/`from_state_dict` method, if it has one that is not
    Haliax's (or bryo's) default field walk."""
    method = getattr(type(node), name, None)
    if not callable(method) or getattr(method, "__qualname__", "") in _DEFAULT_METHODS:
        return None
    return getattr(node, name)


def _key_of(entry: object) -> str:
    for attr in ("name", "key", "idx"):  # GetAttrKey, DictKey/FlattenedIndexKey, SequenceKey
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry).lstrip(".")


def _children(node: object) -> tuple[list[tuple[str | None, object]], Any] | None:
    """`node`'s children with their keys (after its `_state_dict_key_map`) and its
    treedef, or None when `node` is a leaf. A bryo `Variable` adds no key of its own."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    if treedef.num_nodes == 1:  # no node above the leaves: `node` is a leaf
        return None
    key_map = getattr(node, "_state_dict_key_map", None)
    renames = cast("Mapping[str, str | None]", key_map() if callable(key_map) else {})
    keyed: list[tuple[str | None, object]] = []
    for path, child in flat:
        if isinstance(node, Variable):
            keyed.append((None, child))
            continue
        key = _key_of(path[0])
        keyed.append((renames.get(key, key), child))
    return keyed, treedef


def to_state_dict(tree: Any, prefix: str | None = None) -> StateDict:
    """The state dict of `tree`: every array (and Python number) leaf under its dotted path.

    Args:
        tree: any pytree: an Equinox module, a dict, a list, a bryo module, a `Stacked`
            (one entry per layer, `"0.weight"`, `"1.weight"`, ...).
        prefix: prepended to every key (`"model"` gives `"model.weight"`).

    Named arrays are written as their plain arrays. Leaves that are neither arrays nor
    numbers (an activation function held as a field) are left out: a state dict holds
    weights. Raises `StateDictError` when two leaves would write the same key.

    >>> to_state_dict({"layers": [{"w": jnp.ones(2)}], "scale": 2.0})
    {'layers.0.w': Array([1., 1.], dtype=float32), 'scale': 2.0}
    """
    out: StateDict = {}
    _write(tree, prefix, out)
    return out


def fields_to_state_dict(node: object, prefix: str | None = None) -> StateDict:
    """`to_state_dict` of `node` by walking its fields, even if it has its own
    `to_state_dict` method (which may call this, as Haliax's default does)."""
    out: StateDict = {}
    _write(node, prefix, out, own=False)
    return out


def _write(node: object, prefix: str | None, out: StateDict, *, own: bool = True) -> None:
    if node is None:
        return
    method = _own_method(node, "to_state_dict") if own else None
    if method is not None:
        merge_state_dict(method(prefix), out)
        return
    handler = named_leaf_handler(node)
    if handler is not None:
        _put(out, prefix, handler.unbind(node, None)[0])
        return
    if is_array(node) or isinstance(node, _SCALARS) or _is_struct(node):
        _put(out, prefix, node)
        return
    children = _children(node)
    if children is None:
        return  # a function, a string: not a weight
    for key, child in children[0]:
        _write(child, with_prefix(prefix, key), out)


def _is_struct(node: object) -> bool:
    return isinstance(node, jax.ShapeDtypeStruct)


def _put(out: StateDict, key: str | None, value: object) -> None:
    if key is None:
        raise StateDictError(
            f"a leaf ({_describe(value)}) needs a key in a state dict: pass "
            "`prefix='name'` to name it, or give it a container (`{'name': leaf}`)."
        )
    if key in out:
        raise StateDictError(
            f"two leaves write the state dict key {key!r}: a `_state_dict_key_map` sends two "
            "fields to one name, or maps a field to None over a sibling with the same "
            "names. Give each its own name."
        )
    out[key] = value


def merge_state_dict(entries: Mapping[str, object], out: StateDict) -> None:
    """Add `entries` to `out`, raising `StateDictError` on a key `out` already has."""
    for key, value in entries.items():
        _put(out, key, value)


def from_state_dict(tree: T, state_dict: Mapping[str, Any], prefix: str | None = None) -> T:
    """A new `tree` with the arrays of `state_dict` (the inverse of `to_state_dict`).

    Args:
        tree: the template: its structure, and its arrays' shapes (their values are not
            read, so `jax.ShapeDtypeStruct`s work as well as arrays).
        state_dict: dotted keys to arrays (NumPy or JAX), e.g. from `load_state_dict`.
        prefix: the keys' common prefix, as given to `to_state_dict`.

    Each array keeps the dtype it has in the state dict (as in Haliax); named arrays get
    the template's axes. Keys the template does not name are ignored. Python-number
    leaves take the state dict's value when it has one. `tree` itself is not changed.

    Raises:
        StateDictError: a key the template needs is missing, or its array's shape is
            not the template's (both name the key).
    """
    return _read(tree, state_dict, prefix)  # type: ignore[return-value]  # same structure as `tree`


def fields_from_state_dict(node: T, state_dict: Mapping[str, Any], prefix: str | None = None) -> T:
    """`from_state_dict` of `node` by walking its fields, even if it has its own
    `from_state_dict` method (which may call this, as Haliax's default does)."""
    return _read(node, state_dict, prefix, own=False)  # type: ignore[return-value]  # same structure


def _read(node: Any, state_dict: Mapping[str, Any], prefix: str | None, *, own: bool = True) -> Any:
    if node is None:
        return None
    method = _own_method(node, "from_state_dict") if own else None
    if method is not None:
        return method(state_dict, prefix)
    handler = named_leaf_handler(node)
    if handler is not None:
        array, _, rebuild = handler.unbind(node, None)
        return rebuild(_array_at(state_dict, prefix, array, f"a {handler.describe(node)}"))
    if is_array(node) or _is_struct(node):
        return _array_at(state_dict, prefix, node, _describe(node))
    if isinstance(node, _SCALARS):
        if prefix is None or prefix not in state_dict:
            return node
        value = state_dict[prefix]
        return type(node)(np.asarray(value).item()) if np.size(value) == 1 else value
    children = _children(node)
    if children is None:
        return node
    keyed, treedef = children
    return treedef.unflatten(
        [_read(child, state_dict, with_prefix(prefix, key)) for key, child in keyed]
    )


def _array_at(
    state_dict: Mapping[str, Any], key: str | None, template: Any, what: str
) -> jax.Array:
    if key is None:
        raise StateDictError(
            f"a leaf ({what}) needs a key to be read from a state dict: pass `prefix='name'`."
        )
    if key not in state_dict:
        close = difflib.get_close_matches(key, [str(k) for k in state_dict], n=3)
        hint = f" Close keys: {', '.join(map(repr, close))}." if close else ""
        raise StateDictError(
            f"the state dict has no key {key!r} (the model holds {what} there; the state "
            f"dict has {len(state_dict)} keys).{hint} Check the `prefix` and the model's "
            "structure (a `_state_dict_key_map` renames fields)."
        )
    value = state_dict[key]
    shape = tuple(getattr(value, "shape", np.shape(value)))
    expected = tuple(template.shape) if is_shaped(template) else shape
    if shape != expected:
        transposed = len(shape) == 2 and shape == expected[::-1]
        hint = (
            " It is the transpose: PyTorch's Linear stores its weight as (out, in); "
            "transpose it, or export with the same layout."
            if transposed
            else " Load a state dict written for this model's configuration."
        )
        raise StateDictError(
            f"the state dict's {key!r} has shape {shape}, but the model holds {what} there.{hint}"
        )
    return jnp.asarray(value)


def _describe(value: object) -> str:
    if is_shaped(value):
        return f"an array of shape {tuple(value.shape)}, {value.dtype}"  # type: ignore[attr-defined]  # is_shaped checked
    return f"a {type(value).__name__}"
