"""Linen collections to NNX-style Variables and back, and Linen's metadata boxes.

Linen keeps each variable in a named collection (`params`, `batch_stats`, ...) as a
plain array or inside a metadata box (`nn.Partitioned`); NNX-style modules keep
Variables whose class names the kind of state. The two meet through the registry of
`bryo_graph.register_variable_name`: `params` is `Param`, `batch_stats` is `BatchStat`,
and an unregistered collection gets a Variable class of its own name. Boxes carry their
metadata across: a Linen box becomes Variable metadata (with `linen_meta_type` to come
back as the same box), and a Variable with metadata becomes an `NNXMeta` box in Linen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import jax

from bryo_graph import (
    Variable,
    get_partition_spec,
    variable_name_from_type,
    variable_type_from_name,
)
from bryo_graph import with_partitioning as nnx_with_partitioning

from ._flax import FrozenDict, meta, struct

A = TypeVar("A")
Path = tuple[Any, ...]

# The Variable metadata Flax 0.12.0 names `sharding_names` and later 0.12.x `out_sharding`
# (bryo's name): a Linen box's `to_nnx_metadata` gives one or the other.
_OLD_SHARDING = "sharding_names"
_SHARDING = "out_sharding"


class NNXMeta(struct.PyTreeNode, meta.AxisMetadata[A]):
    """A Linen metadata box around the value of a Variable that has metadata.

    `ToLinen` puts one in its Linen collections for each Variable with metadata (a
    sharding, a tag): `nn.unbox` gives the value, `nn.get_partition_spec` its sharding,
    and `to_nnx_variable()` the Variable back.

    Attributes:
        var_type: the Variable class.
        value: the value (the box's one pytree child).
        metadata: the Variable's metadata.
    """

    var_type: type[Variable] = struct.field(pytree_node=False)
    value: Any = struct.field(pytree_node=True)
    metadata: FrozenDict[str, Any] = struct.field(pytree_node=False)

    def unbox(self) -> A:
        return self.value

    def replace_boxed(self, val: Any) -> NNXMeta[Any]:
        return self.replace(value=val)

    def add_axis(self, index: int, params: dict[Any, Any]) -> NNXMeta[A]:
        """The box of a value that gained an axis at `index` (`nn.vmap`, `nn.scan`):
        a sharding gets the transform's `partition_name` (or None) there."""
        return self._with_sharding(index, params, insert=True)

    def remove_axis(self, index: int, params: dict[Any, Any]) -> NNXMeta[A]:
        """The box of a value that lost the axis at `index`."""
        return self._with_sharding(index, params, insert=False)

    def _with_sharding(self, index: int, params: dict[Any, Any], *, insert: bool) -> NNXMeta[A]:
        sharding = self.metadata.get(_SHARDING)
        if not sharding:
            return self
        names = list(sharding)
        if insert:
            names.insert(index, params.get("partition_name"))
        else:
            del names[index]
        return self.replace(metadata=FrozenDict({**self.metadata, _SHARDING: tuple(names)}))

    def get_partition_spec(self) -> jax.sharding.PartitionSpec:
        """The `PartitionSpec` the Variable's sharding metadata gives."""
        return get_partition_spec(self.to_nnx_variable()).get_value()

    def to_nnx_variable(self) -> Variable:
        """The Variable this box stands for."""
        metadata: dict[str, Any] = dict(self.metadata)
        return self.var_type(self.value, **metadata)


def to_linen_var(variable: Variable) -> Any:
    """A Variable as Linen keeps it: its value alone when it has no metadata, the Linen
    box it came from (`linen_meta_type`), or an `NNXMeta` box.

    Args:
        variable: the Variable.

    Returns:
        The value or box to put in a Linen collection.
    """
    metadata: dict[str, Any] = variable.metadata
    value = variable.get_value()
    linen_type = metadata.get("linen_meta_type")
    if linen_type is not None:
        if hasattr(linen_type, "from_nnx_metadata"):
            if _SHARDING in metadata:  # both spellings: each Flax 0.12.x reads its own
                metadata[_OLD_SHARDING] = metadata[_SHARDING]
            return linen_type.from_nnx_metadata({"value": value, **metadata})
        return linen_type(value, **metadata)
    if not metadata:
        return value
    return NNXMeta(type(variable), value, FrozenDict(metadata))


def to_nnx_var(collection: str, value: Any) -> Variable:
    """A value of the Linen collection `collection` (plain or boxed) as a Variable of the
    class registered for that collection (made on the fly for a new name).

    Args:
        collection: the Linen collection name (`'params'`).
        value: the value, or a Linen metadata box.

    Returns:
        The Variable.
    """
    variable_type = variable_type_from_name(collection, allow_register=True)
    if isinstance(value, NNXMeta):
        if value.var_type is not variable_type:
            raise ValueError(
                f"An NNXMeta box of a {value.var_type.__name__} sits in the Linen collection "
                f"{collection!r}, which holds {variable_type.__name__} Variables; move it to "
                f"the collection {variable_name_from_type(value.var_type, allow_register=True)!r}."
            )
        return value.to_nnx_variable()
    if isinstance(value, meta.AxisMetadata):
        to_metadata = getattr(value, "to_nnx_metadata", None)
        metadata = dict(to_metadata() if to_metadata is not None else vars(value))
        if _OLD_SHARDING in metadata:
            metadata[_SHARDING] = metadata.pop(_OLD_SHARDING)
        raw = metadata.pop("value")
        return variable_type(raw, **metadata, linen_meta_type=type(value))
    return variable_type(value)


def flatten_mapping(tree: Mapping[Any, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """`(path, leaf)` for every leaf of nested mappings (a Linen box is a leaf)."""
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from flatten_mapping(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def unflatten_mapping(pairs: Iterator[tuple[Path, Any]] | list[tuple[Path, Any]]) -> dict:
    """Nested dicts from `(path, leaf)` pairs."""
    tree: dict = {}
    for path, value in pairs:
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def linen_vars_to_nnx_attrs(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Linen variables (`{'params': {...}, 'batch_stats': {...}}`) as one tree of
    Variables, keyed without the collection level (`{'kernel': Param, ...}`).

    Raises:
        ValueError: two collections hold a variable at the same path.
    """
    found: dict[Path, tuple[str, Variable]] = {}
    for collection, tree in variables.items():
        for path, value in flatten_mapping(tree):
            if path in found:
                raise ValueError(
                    f"The Linen collections {found[path][0]!r} and {collection!r} both hold "
                    f"a variable at {'/'.join(map(str, path))!r}; an NNX-style module keeps "
                    "one Variable per path. Rename one of them in the Linen module."
                )
            found[path] = collection, to_nnx_var(collection, value)
    return unflatten_mapping((path, variable) for path, (_, variable) in found.items())


def nnx_attrs_to_linen_vars(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A tree of Variables as Linen variables, one collection per Variable class.

    Raises:
        ValueError: a leaf is not a Variable (its collection cannot be told).
    """
    pairs = []
    for path, value in flatten_mapping(attrs):
        if not isinstance(value, Variable):
            raise ValueError(
                f"Cannot tell the Linen collection of {'/'.join(map(str, path))!r}: it holds "
                f"a {type(value).__name__}, not a Variable. Keep only Variables (e.g. "
                "`nnx.Param`) in the attributes of a `ToNNX` module."
            )
        collection = variable_name_from_type(type(value), allow_register=True)
        pairs.append(((collection, *path), to_linen_var(value)))
    return unflatten_mapping(pairs)


def with_partitioning(
    fn: Callable[..., Any],
    names: Any,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[..., Any]:
    """Linen's `with_partitioning` for NNX-style initializers: the Variable gets the
    sharding `names`, and comes back from `ToLinen` as an `nn.Partitioned` box.

    Args:
        fn: the initializer.
        names: one logical axis name (or None) per dimension.
        mesh: the mesh, if any.

    Returns:
        The wrapped initializer.
    """
    return nnx_with_partitioning(fn, names, mesh, linen_meta_type=meta.Partitioned)
