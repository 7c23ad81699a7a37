"""`Variable`s hold a model's state in place: a value plus metadata, and a JAX pytree.

A `Variable` is a mutable box that modules keep as attributes. Its subclass says what kind
of state it is (`Param`, `BatchStat`, ...), and filters select on that; its metadata (a
stream `tag`, logical `sharding` axes, ...) reads as attributes. As in Flax NNX 0.12 a
Variable behaves like its value: arithmetic, comparisons (`Param(a) == Param(b)` compares
values), indexing (`v[...]`, `v[...] = 3`) and `jnp` functions all see the value, read and
written through `get_value`/`set_value`, which subclasses may override to transform it.

A Variable made with `ref=True` (or under `var_defaults(ref=True)`) keeps its value in a
JAX mutable array (`jax.new_ref`): reads and writes go through the ref, so a write inside
`jax.jit` is seen outside, and `v.ref` is True (its metadata holds `ref=True`).

Every Variable class is a JAX pytree with one child, its value, and its metadata as aux
data, so `jax.tree.map(f, param)` returns a new `Param` and `jax.jit`/`jax.grad` take
Variables (and modules holding them) directly. A Variable's metadata dict is never changed
in place once set (changes replace it), so pytree round trips and `split`/`merge` share
it instead of copying it.

`VariableState` is the older NNX name of a Variable snapshot, kept for code written
against it (seed 000): `VariableState(type=Param, value=0)` builds a `Param`, and every
Variable is an instance of `VariableState`, as Flax 0.12 aliases the two.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import operator
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any as _Any
from typing import ClassVar, NamedTuple, cast

import jax
import numpy as np
from jax.core import Tracer
from jax.tree_util import GetAttrKey, register_pytree_with_keys
from numpy.typing import DTypeLike

from bryo_pytree import (
    ARITHMETIC_OPERATORS,
    COMPARISON_OPERATORS,
    CONVERSION_OPERATORS,
    UNARY_OPERATORS,
    forward_operators,
    safe_equal,
)

from ._compat import current_trace, is_ref, new_ref
from ._eager_sharding import placed, using_eager_sharding
from ._errors import MUTATION_FIX, TraceContextError
from ._hijax import check_hijax_available, traced_class
from ._hijax import register as register_hitype
from ._tracking import WATCHES, structure_changed
from ._var_defaults import check_flag, default_hijax, default_ref


class _Missing:
    """The default of optional arguments where None is a legitimate value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: _Any = _Missing()


def _value_repr(value: object) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None and len(shape) > 0:
        from bryo_pytree import describe_leaf

        return describe_leaf(value)
    return repr(value)


class Metadata(dict):
    """A Variable's metadata: a dict nobody changes in place once a Variable holds it.

    Variables replace their Metadata instead of mutating it, so one Metadata is shared
    by a Variable, its pytree aux data and the Variables rebuilt from that aux data.
    It hashes once (by its items, or by its keys when a value does not hash).
    """

    __slots__ = ("_hash",)

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            pass
        try:
            value = hash(tuple(self.items()))
        except TypeError:
            value = hash(tuple(self))
        self._hash = value
        return value

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, dict) and metadata_equal(self, other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __reduce__(self) -> tuple:
        return (Metadata, (dict(self),))


NO_METADATA = Metadata()


def as_metadata(metadata: Mapping[str, object]) -> Metadata:
    """`metadata` as a `Metadata` (itself when it already is one)."""
    if type(metadata) is Metadata:
        return metadata
    return Metadata(metadata) if metadata else NO_METADATA


def metadata_equal(a: Mapping, b: Mapping) -> bool:
    """Whether two metadata mappings are equal; values that cannot compare count as different."""
    if a.keys() != b.keys():
        return False
    return all(safe_equal(x, b[k]) for k, x in a.items())


# Pytree registration: one child (the value), the Metadata as aux data ----------------------

_VALUE_KEY = GetAttrKey("value")


class Held(NamedTuple):
    """A Variable's pytree children: its value, the one item."""

    value: object


class Flattened(NamedTuple):
    """Where a Variable keeps its value and metadata: its pytree flattening itself, so
    that JAX flattens a Variable with `operator.attrgetter("_flattened")`, one lookup in C
    (a Python flatten function per Variable was most of a plain `jax.jit` call's cost on
    a module). `raw_value` and `_metadata` read it through the fields' C getters; a write
    of either stores a new `Flattened` (`store`)."""

    children: Held
    metadata: Metadata


_hold = functools.partial(tuple.__new__, Held)  # `_hold((value,))`: a Held, made in C
_flattened = functools.partial(tuple.__new__, Flattened)
_flatten = operator.attrgetter("_flattened")
_read_stored_value = operator.attrgetter("_flattened.children.value")  # a plain `raw_value`


def _flatten_with_keys(variable: Variable) -> tuple[tuple, Metadata]:
    (value,), metadata = _get_flattened(variable)
    return ((_VALUE_KEY, value),), metadata


def store(variable: Variable, value: object, metadata: Metadata) -> None:
    """Store `value` and `metadata` in a plain Variable as they are (no `set_value`, no
    checks, no change reported): for code that fills Variables it made."""
    _set_flattened(variable, _flattened((_hold((value,)), metadata)))


def store_raw_value(variable: Variable, value: object) -> None:
    """`raw_value`'s setter: store `value` as is, keeping the metadata."""
    try:
        metadata = _get_flattened(variable)[1]
    except AttributeError:  # not made yet (`__init__`, unpickling)
        metadata = NO_METADATA
    _set_flattened(variable, _flattened((_hold((value,)), metadata)))  # (`store`, inline)


def _store_metadata(variable: Variable, metadata: Metadata) -> None:
    """`_metadata`'s setter (the change is reported by the callers that need it)."""
    store(variable, _get_flattened(variable).children.value, metadata)


def _unflatter(cls: type) -> Callable[[Metadata, Iterable[object]], Variable]:
    def unflatten(metadata: Metadata, children: Iterable[object]) -> Variable:
        (value,) = children
        variable = _new(cls)
        store(variable, value, metadata)
        return variable

    unflatten.__qualname__ = f"unflatten_{cls.__name__}"
    return unflatten


class _VariableType(type):
    """Variable classes get empty `__slots__` unless they declare them, and are pytrees
    (hijax ones are JAX hi-types instead); `Cls(..., hijax=True)` (or under
    `var_defaults(hijax=True)`) makes a hijax Variable."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **kwargs: object) -> type:
        namespace.setdefault("__slots__", ())
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        if getattr(cls, "_hijax_type", False):
            if "_hijax_base" in namespace:  # a class `hijax_class` made
                register_hitype(cls)
            return cls
        register_pytree_with_keys(
            cast("type[Variable]", cls),  # this metaclass makes Variable and its subclasses
            _flatten_with_keys,
            _unflatter(cls),
            flatten_func=_flatten,
        )
        return cls

    def __call__(cls, *args: object, **kwargs: object) -> _Any:
        hijax = kwargs.get("hijax")
        if (hijax is None and not default_hijax()) or hijax is False:
            return super().__call__(*args, **kwargs)
        where = f"`{cls.__name__}(...)`"
        if hijax is not None:
            check_flag("hijax", hijax, where)
        check_hijax_available(where)
        plain = super().__call__(*args, **{**kwargs, "hijax": False})
        return to_hijax(plain)


class Variable(metaclass=_VariableType):
    """A box for one piece of state: a value, plus keyword metadata readable as attributes.

    >>> count = Variable(0, tag="dropout")
    >>> count.value += 1
    >>> count.value, count.tag
    (1, 'dropout')

    Subclass it to name a kind of state (`class Count(Variable): pass`); the subclass is a
    filter for that kind. Override `get_value`/`set_value` to transform the value on its
    way out or in: `.value`, `v[...]` and the operators all go through them.
    """

    # WATCHES: the watches of cached flattenings, which a metadata change expires;
    # _owner: the JAX trace `__init__` ran in (unset on Variables that `merge`, unflattening
    # or copying made: those are never refused); a tracer written from another one raises.
    __slots__ = ("__weakref__", WATCHES, "_flattened", "_owner")

    raw_value: _Any = property(  # type: ignore[assignment]  # read in C, written by `store_raw_value`
        _read_stored_value,
        store_raw_value,
        doc="The value as stored, without `get_value`'s transformation.",
    )
    _metadata: Metadata = property(  # type: ignore[assignment]  # read in C
        operator.attrgetter("_flattened.metadata"), _store_metadata
    )

    #: The type under which a module's repr counts this class's Variables (None: the class
    #: itself). `RngState` sets itself, so keys and counts add up as one `RngState` entry.
    stats_type: ClassVar[type[Variable] | None] = None

    def __init__(
        self,
        value: object,
        *,
        hijax: bool | None = None,
        ref: bool | None = None,
        **metadata: object,
    ) -> None:
        if type(value) is VariableMetadata:  # from an initializer `with_metadata` wrapped
            metadata = {**metadata, **value.metadata}
            value = value.raw_value
        if "ref" in metadata or "hijax" in metadata:  # from `with_metadata(..., ref=True)`
            ref = _flag_once(metadata, "ref", ref)
            hijax = _flag_once(metadata, "hijax", hijax)
        where = f"`{type(self).__name__}(...)`"
        if hijax:  # (from wrapped metadata: the keyword is handled before `__init__`)
            raise ValueError(
                f"{where} got `hijax=True` in an initializer's metadata (`with_metadata`); "
                "pass `hijax=True` to the Variable itself (or use `nnx.var_defaults`)."
            )
        ref = default_ref() if ref is None else check_flag("ref", ref, where)
        if is_ref(value):
            raise ValueError(
                f"`{type(self).__name__}(...)` got a `jax.Ref` as its value; pass the array "
                "with `ref=True` to make a ref-backed Variable (or `set_raw_value(ref)` to "
                "put an existing ref in one)."
            )
        if "sharding" in metadata or "sharding_names" in metadata:
            metadata = out_sharding_metadata(metadata, where)
        if metadata.get("eager_sharding", MISSING) is using_eager_sharding():
            del metadata["eager_sharding"]  # the default (from `get_metadata`): not stored
        if metadata and isinstance(value, jax.Array):  # under a mesh: placed
            value = placed(value, metadata, type(self).__name__)
        if ref:
            value = _as_ref(value, type(self).__name__)
            metadata["ref"] = True
        store(self, value, Metadata(metadata) if metadata else NO_METADATA)
        object.__setattr__(self, "_owner", current_trace())

    def __class_getitem__(cls, item: object) -> types.GenericAlias:
        """`Param[jax.Array]`: a typing alias of the class (calling it builds a Param)."""
        return types.GenericAlias(cls, item)

    # The value -------------------------------------------------------------------------
    def get_value(self, *, index: object = MISSING) -> _Any:
        """The value, or `value[index]`; subclasses override it to transform reads."""
        value = self.raw_value
        if is_ref(value):  # (a traced ref is also a `jax.Array` on JAX 0.7)
            return value[Ellipsis if index is MISSING else index]
        if index is MISSING:
            return value
        whole = index is Ellipsis
        if whole and (isinstance(value, jax.Array) or not hasattr(value, "__getitem__")):
            return value  # the whole array (or a scalar, which `[...]` cannot index)
        return value[index]

    def set_value(self, value: object, *, index: object = MISSING) -> None:
        """Store `value`, or write it at `index` of the held array; subclasses override it
        to transform writes.

        A jax array takes `value` functionally (`array.at[index].set(value)`, so
        `v[...] = 3` keeps the array's shape and dtype); a NumPy array is copied first;
        other containers (dicts, lists) are written in place.
        """
        current = self.raw_value
        if isinstance(value, Tracer) and not isinstance(current, Tracer):
            check_variable_owner(self)
        if is_ref(current):  # written into the ref: every holder of it sees the write
            current[Ellipsis if index is MISSING else index] = _value_of(value)
            return
        if index is not MISSING:
            value = _written(current, index, value)
        object.__setattr__(self, "raw_value", value)

    @property
    def value(self) -> _Any:
        """The value held (through `get_value`)."""
        return self.get_value()

    @value.setter
    def value(self, value: object) -> None:
        self.set_value(value)

    def get_raw_value(self) -> _Any:
        """The value as stored, without `get_value`'s transformation."""
        return self.raw_value

    def set_raw_value(self, value: object) -> None:
        """Store `value` as is, without `set_value`'s transformation."""
        if type(self).raw_value is _PLAIN_RAW_VALUE:  # (hijax Variables redefine it)
            store_raw_value(self, value)  # (what the property's setter runs, called directly)
        else:
            object.__setattr__(self, "raw_value", value)

    @property
    def ref(self) -> bool:
        """Whether the Variable was made array-ref backed (`ref=True`): its metadata says
        so, kept by pytree round trips even where JAX gave plain arrays back."""
        return self._metadata.get("ref") is True

    @property
    def hijax(self) -> bool:
        """Whether this is a hijax Variable (`HijaxVariable`; see `var_defaults`)."""
        return False

    @property
    def sharding_names(self) -> _Any:
        """The `out_sharding` metadata (None without it): Flax's deprecated older name."""
        warnings.warn(_OLD_SHARDING.format(old="sharding_names"), DeprecationWarning, stacklevel=2)
        return self._metadata.get("out_sharding")

    @property
    def type(self) -> type[Variable]:
        """The Variable's class (the older `VariableState.type`)."""
        return type(self)

    @property
    def var_type(self) -> type[Variable]:
        """The Variable's class, as Flax names it."""
        return type(self)

    # Metadata ---------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, object]:
        """The metadata, as a dict (a copy)."""
        return dict(self._metadata)

    def get_metadata(
        self, name: str | None = None, default: object = MISSING, *, exclude_required: object = None
    ) -> _Any:
        """All metadata as a dict (a copy), or the entry `name` (`default` when absent).

        As in Flax NNX 0.12, the flags `hijax`, `ref` and
        `eager_sharding` are part of it; `metadata` has the other entries only."""
        metadata = self._metadata
        if name is None:
            if default is not MISSING:
                raise TypeError(
                    "`get_metadata` takes a `default` only together with a `name`; got "
                    f"default={default!r} without one."
                )
            return {**metadata, **self._flags()}
        if name in metadata:
            return metadata[name]
        if name in _FLAG_KEYS:
            return self._flags()[name]
        if default is not MISSING:
            return default
        raise KeyError(
            f"{type(self).__name__} has no metadata {name!r}; its metadata is {sorted(metadata)}. "
            "Pass a `default` to `get_metadata` for optional entries."
        )

    def set_metadata(self, *args: object, **kwargs: object) -> None:
        """Set metadata: `set_metadata({...})` replaces all of it, `set_metadata(name, value)`
        sets one entry, `set_metadata(name=value, ...)` sets several."""
        if args and kwargs:
            raise TypeError(
                "`set_metadata` takes a dict, a `(name, value)` pair or keywords, not a mix; "
                f"got {len(args)} positional argument(s) and keywords {sorted(kwargs)}."
            )
        if len(args) == 1 and isinstance(args[0], Mapping):
            new = dict(args[0])
        elif len(args) == 2 and isinstance(args[0], str):
            new = {**self._metadata, args[0]: args[1]}
        elif not args and kwargs:
            new = {**self._metadata, **kwargs}
        else:
            raise TypeError(
                "`set_metadata` takes a dict (`set_metadata({'tag': 'x'})`), a name and a "
                "value (`set_metadata('tag', 'x')`) or keywords (`set_metadata(tag='x')`); "
                f"got {args!r}."
            )
        self._set_user_metadata(new)

    def _flags(self) -> dict[str, bool]:
        """The flags `get_metadata` reports beside the entries (Flax's defaults)."""
        eager = self._metadata.get("eager_sharding", MISSING)
        return {
            "hijax": self.hijax,
            "ref": self.ref,
            "eager_sharding": using_eager_sharding() if eager is MISSING else bool(eager),
        }

    def has_metadata(self, name: str) -> bool:
        """Whether the metadata has an entry `name` (the flags of `get_metadata` included)."""
        return name in self._metadata or name in _FLAG_KEYS

    def del_metadata(self, name: str) -> None:
        """Remove the metadata entry `name`."""
        if name not in self._metadata:
            raise KeyError(
                f"{type(self).__name__} has no metadata {name!r} to delete; its metadata is "
                f"{sorted(self._metadata)}."
            )
        self._set_user_metadata({k: v for k, v in self._metadata.items() if k != name})

    def _set_user_metadata(self, metadata: Mapping[str, object]) -> None:
        """`_replace_metadata` for the user's metadata setters, which keep `ref`/`hijax`."""
        if "sharding" in metadata or "sharding_names" in metadata:
            current = self._metadata.get("out_sharding", MISSING)  # carried over: replaced
            metadata = {
                k: v for k, v in metadata.items() if k != "out_sharding" or v is not current
            }
            where = f"`{type(self).__name__}` metadata"
            metadata = out_sharding_metadata(metadata, where, stacklevel=4)
        ref = metadata.get("ref", False)
        if ref is not self._metadata.get("ref", False) or metadata.get("hijax", False):
            raise ValueError(
                f"cannot change the `ref`/`hijax` metadata of a {type(self).__name__} in "
                f"place (it has ref={self.ref}); make a converted copy with "
                "`nnx.with_vars(node, ref=...)` or `variable.copy(ref=...)`."
            )
        eager = using_eager_sharding()
        self._replace_metadata(
            {
                k: v
                for k, v in metadata.items()
                if k != "hijax"
                and not (k == "ref" and not v)
                and not (k == "eager_sharding" and v is eager)
            }
        )

    def _replace_metadata(self, metadata: Mapping[str, object]) -> None:
        # Filters read metadata, and bryo caches their results with the structure.
        object.__setattr__(self, "_metadata", as_metadata(metadata))
        structure_changed(self)

    def __getattr__(self, name: str) -> _Any:
        try:
            metadata = object.__getattribute__(self, "_metadata")
        except AttributeError:  # not initialised yet (unpickling, copying)
            raise AttributeError(name) from None
        if name in metadata:
            return metadata[name]
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(object.__getattribute__(self, "raw_value"), name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no metadata or value attribute {name!r}; its "
                f"metadata is {sorted(metadata)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        if name == "value":
            self.set_value(value)
        elif name == "sharding" or name == "sharding_names":  # older names of out_sharding
            self._set_user_metadata({**self._metadata, name: value})
        elif name == "raw_value" or name in _SLOT_NAMES:
            object.__setattr__(self, name, value)
        elif name in _FLAGS:  # properties of what the metadata says; never changed in place
            self._set_user_metadata({**self._metadata, name: value})
        elif name.startswith("__") or isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)  # dunders and subclasses' properties
        else:
            self._set_user_metadata({**self._metadata, name: value})

    def __delattr__(self, name: str) -> None:
        if name in self._metadata:
            self.del_metadata(name)
        else:
            object.__delattr__(self, name)

    # Transforms that add or remove an axis ---------------------------------------------
    def add_axis(self, axis_index: int, axis_name: object) -> None:
        """Called after a transform (`vmap`, `scan` with `transform_metadata`) gave the
        value a new axis at `axis_index` named `axis_name`, once the sharding metadata is
        updated; does nothing here. Subclasses override it to adjust their own metadata."""

    def remove_axis(self, axis_index: int, axis_name: object) -> None:
        """Called when a transform takes the axis `axis_index` named `axis_name` off the
        value; does nothing here. Subclasses override it, as `add_axis`."""

    # Copies -----------------------------------------------------------------------------
    @classmethod
    def from_metadata(cls, value: object, metadata: Mapping[str, object]) -> Variable:
        """A Variable of this class with `value` and `metadata`, without calling `__init__`."""
        hijax = False
        if "ref" in metadata or "hijax" in metadata:
            hijax = metadata.get("hijax") is True
            metadata = _without_false_flags(metadata, cls.__name__)
        variable = _new(cls)
        store(variable, value, as_metadata(metadata))
        return _as_hijax(variable, f"`{cls.__name__}.from_metadata`") if hijax else variable

    def copy(self, value: object = MISSING, **metadata: object) -> Variable:
        """A new Variable of the same class: this value (or `value`), this metadata updated
        with `metadata`.

        A ref-backed copy (this Variable's `ref`, or `ref=True` given) gets a new ref of
        the value, so the two never write into each other; `ref=False` copies the value
        out of the ref."""
        new_value = self.raw_value if value is MISSING else value
        if "sharding" in metadata or "sharding_names" in metadata:
            metadata = out_sharding_metadata(metadata, f"`{type(self).__name__}.copy(...)`")
        merged = {**self._metadata, **metadata} if metadata else self._metadata
        if is_ref(new_value) or merged.get("ref"):
            return _copied_ref(type(self), new_value, merged)
        return type(self).from_metadata(new_value, merged)

    replace = copy
    to_state = copy  # the older snapshot spelling: a Variable is its own snapshot now
    to_variable = copy

    def copy_from(self, other: Variable) -> None:
        """Take `other`'s value and metadata, in place (a ref-backed Variable keeps its
        ref and takes the value into it)."""
        current = self.raw_value
        if is_ref(current):
            current[...] = _dereferenced(other.raw_value)
            other_metadata = {**other._metadata, "ref": True}
        else:
            object.__setattr__(self, "raw_value", other.raw_value)
            other_metadata = other._metadata
        if not metadata_equal(self._metadata, other_metadata):
            self._replace_metadata(other_metadata)

    update_from_state = copy_from

    def __getstate__(self) -> dict[str, object]:
        return {"raw_value": self.raw_value, "metadata": dict(self._metadata)}

    def __setstate__(self, state: dict[str, object]) -> None:
        store(self, state["raw_value"], as_metadata(state["metadata"]))  # type: ignore[arg-type]  # __getstate__ wrote a dict

    def __repr__(self) -> str:
        fields = [f"value={_value_repr(self.raw_value)}"]
        fields += [f"{k}={v!r}" for k, v in self._metadata.items()]
        return f"{self.var_type.__name__}({', '.join(fields)})"

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_variable

        return render_variable(self, path, subtree_renderer)

    # The value's protocols, so `x @ kernel` and `jnp.sum(param)` work on Variables --------
    def __jax_array__(self) -> jax.Array:
        return self.get_value()

    def __array__(self, dtype: DTypeLike | None = None, copy: object = None) -> _Any:
        return np.asarray(self.get_value(), dtype=dtype)

    def __getitem__(self, index: object) -> _Any:
        return self.get_value(index=index)

    def __setitem__(self, index: object, value: object) -> None:
        self.set_value(value, index=index)

    def __delitem__(self, index: object) -> None:
        value = self.get_value()
        del value[index]
        self.set_value(value)

    def __call__(self, *args: object, **kwargs: object) -> _Any:
        return self.get_value()(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.get_value())

    def __iter__(self) -> Iterator[_Any]:
        return iter(self.get_value())

    def __contains__(self, item: object) -> bool:
        return item in self.get_value()

    def __bool__(self) -> bool:
        return bool(self.get_value())

    def __round__(self, ndigits: int | None = None) -> _Any:
        return round(self.get_value(), ndigits)

    # `==` compares values (as Flax 0.12 does); hashing stays by identity, so Variables
    # can key identity maps and sets.
    __hash__ = object.__hash__


_SLOT_NAMES = frozenset({"_metadata", "_owner"})
_get_owner = Variable._owner.__get__  # type: ignore[attr-defined]  # a slot's descriptor


def check_variable_owner(variable: Variable) -> None:
    """Raise `TraceContextError` if `variable` was made (by `__init__`) in another JAX trace
    than the one running now: called before a tracer is written into a Variable that holds
    no tracer. (One that holds a tracer was put in a trace by whoever traces it, a lifted
    transform, which also takes the new value back out.)"""
    if not made_in_another_trace(variable):
        return
    kind = type(variable).__name__
    raise TraceContextError(
        f"Cannot mutate {kind} from a different trace level: a tracer was written into "
        f"{variable!r}. " + MUTATION_FIX
    )


def made_in_another_trace(variable: Variable) -> bool:
    """Whether `variable` was made (by `__init__`) in another JAX trace than the one
    running now: a Variable a traced function reaches through its closure. (Variables that
    `merge`, unflattening or a copy made have no known trace: False.)"""
    try:
        owner = _get_owner(variable)
    except AttributeError:  # made by merge, unflattening or a copy: not checked
        return False
    now = current_trace()
    return not (owner is now or owner == now)


_read_raw_value = operator.attrgetter("raw_value")


def raw_value_getter(variables: Iterable[Variable]) -> Callable[[Variable], object]:
    """The fastest function that reads `raw_value` off each of `variables`, for code that
    reads the same Variables again and again (a lifted transform's call reads every
    Variable of its arguments).

    When none of them redefines `raw_value` (hijax Variables do: theirs is rebuilt from
    the hijax value), it reads the stored value in C, three attribute lookups and no
    `raw_value` property call (~30% less per Variable); otherwise it reads `raw_value`.

    >>> variables = [Param(1), Param(2)]
    >>> list(map(raw_value_getter(variables), variables))
    [1, 2]
    """
    if all(type(v).raw_value is _PLAIN_RAW_VALUE for v in variables):
        return _read_stored_value
    return _read_raw_value


_FLAGS = frozenset({"ref", "hijax"})
#: The flags `get_metadata` reports (Flax NNX 0.12's defaults) beside the stored entries.
_FLAG_KEYS = frozenset({"hijax", "ref", "eager_sharding"})
_new = object.__new__
_get_flattened = Variable._flattened.__get__  # type: ignore[attr-defined]  # a slot's descriptor
_PLAIN_RAW_VALUE = Variable.__dict__["raw_value"]  # the property of Variables that store plainly
_set_flattened = Variable._flattened.__set__  # type: ignore[attr-defined]  # a slot's descriptor


_OLD_SHARDING = (
    "'{old}' is deprecated, use 'out_sharding' instead (Flax NNX 0.12 keeps a Variable's "
    "axes under `out_sharding`; bryo stores the older keyword there too)."
)


def out_sharding_metadata(
    metadata: Mapping[str, object], where: str, *, stacklevel: int = 3
) -> dict[str, object]:
    """`metadata` with the older `sharding` / `sharding_names` keys stored as
    `out_sharding`, as Flax NNX 0.12 does (with its DeprecationWarning).

    Args:
        metadata: Variable metadata as given (not changed).
        where: what took it (`Param(...)`), named by the error.
        stacklevel: where the DeprecationWarning points, counted from here (3: the
            caller of the function that calls this one).

    Raises:
        ValueError: two spellings given with different axes.
    """
    remapped = dict(metadata)
    for old in ("sharding", "sharding_names"):
        if old not in remapped:
            continue
        axes = remapped.pop(old)
        if "out_sharding" in remapped and remapped["out_sharding"] != axes:
            raise ValueError(
                f"{where} got `{old}={axes!r}` and `out_sharding={remapped['out_sharding']!r}`:"
                f" `{old}` is the older name of `out_sharding`; give only `out_sharding`."
            )
        warnings.warn(_OLD_SHARDING.format(old=old), DeprecationWarning, stacklevel=stacklevel)
        remapped["out_sharding"] = axes
    return remapped


def _flag_once(metadata: dict[str, object], name: str, given: bool | None) -> bool | None:
    """The `ref`/`hijax` flag given once: as a keyword or in wrapped metadata, not both."""
    if name not in metadata:
        return given
    wrapped = metadata.pop(name)
    if given is not None and given != wrapped:
        raise ValueError(
            f"`{name}` given twice with different values: {name}={given!r} as a keyword and "
            f"{name}={wrapped!r} in the initializer's metadata (`with_metadata`); drop one."
        )
    return wrapped  # type: ignore[return-value]  # checked by `check_flag` next


def _as_ref(value: object, where: str) -> object:
    """`value` in a new JAX mutable array, or a TypeError naming the Variable class."""
    try:
        return new_ref(value)
    except TypeError:
        raise TypeError(
            f"`{where}(..., ref=True)` keeps its value in a `jax.new_ref` mutable array, "
            f"which takes one array or number; got a {type(value).__name__}. Use a "
            "Variable per array, or `ref=False`."
        ) from None


def _as_hijax(variable: Variable, where: str) -> Variable:
    """The hijax Variable holding `variable` (a ValueError naming `where` on a JAX without
    hijax)."""
    check_hijax_available(where)
    return to_hijax(variable)


def _without_false_flags(metadata: Mapping[str, object], where: str) -> Mapping[str, object]:
    """Metadata as bryo keeps it: `ref` only when True, `hijax` never (the Variable's class
    says it)."""
    check_flag("hijax", metadata.get("hijax", False), f"`{where}.from_metadata`")
    if metadata.get("ref", True) is False or "hijax" in metadata:
        return {k: v for k, v in metadata.items() if k != "hijax" and not (k == "ref" and not v)}
    return metadata


def _dereferenced(value: object) -> object:
    """The value a ref holds, or `value` itself when it is no ref."""
    return value[...] if is_ref(value) else value  # type: ignore[index]  # a ref reads whole with [...]


def _copied_ref(cls: type[Variable], value: object, metadata: Mapping[str, object]) -> Variable:
    """A copy of a ref-backed Variable (or one asked to be): a new ref, or the plain value."""
    value = _dereferenced(value)
    hijax = metadata.get("hijax", getattr(cls, "_hijax_type", False)) is True
    metadata = _without_false_flags(metadata, cls.__name__)
    if metadata.get("ref"):
        value = _as_ref(value, cls.__name__)
    plain = getattr(cls, "_hijax_base", cls).from_metadata(value, metadata)
    return _as_hijax(plain, f"`{cls.__name__}.copy`") if hijax else plain


def _written(current: object, index: object, value: object) -> object:
    """`current` with `value` written at `index` (see `Variable.set_value`)."""
    if isinstance(current, jax.Array):
        if (
            index is Ellipsis
            and isinstance(value, jax.Array)
            and value.shape == current.shape
            and value.dtype == current.dtype
        ):
            return value
        return current.at[index].set(value)
    if isinstance(current, np.ndarray):
        current = current.copy()
    elif index is Ellipsis and not hasattr(current, "__setitem__"):
        return value  # a scalar or None: `v[...] = x` replaces it
    current[index] = value  # type: ignore[index]  # has __setitem__
    return current


def _value_of(other: object) -> object:
    return other.get_value() if isinstance(other, Variable) else other


def _forward(name: str, op: Callable[[object, object], object]) -> Callable:
    def forward(self: Variable, other: object) -> _Any:
        return op(self.get_value(), _value_of(other))

    return forward


def _reflected(name: str, op: Callable[[object, object], object]) -> Callable:
    def reflected(self: Variable, other: object) -> _Any:
        return op(_value_of(other), self.get_value())

    return reflected


def _in_place(name: str, op: Callable[[object, object], object]) -> Callable:
    def in_place(self: Variable, other: object) -> Variable:
        self.set_value(op(self.get_value(), _value_of(other)))
        return self

    return in_place


def _unary(name: str, op: Callable[[object], object]) -> Callable:
    def forward(self: Variable) -> _Any:
        return op(self.get_value())

    return forward


forward_operators(Variable, _forward, ARITHMETIC_OPERATORS)
forward_operators(Variable, _reflected, ARITHMETIC_OPERATORS, prefix="r")
forward_operators(Variable, _in_place, ARITHMETIC_OPERATORS, prefix="i")
forward_operators(Variable, _forward, COMPARISON_OPERATORS)
forward_operators(Variable, _unary, {**UNARY_OPERATORS, **CONVERSION_OPERATORS})
Variable.__divmod__ = lambda self, other: divmod(self.get_value(), _value_of(other))  # type: ignore[method-assign]  # divmod of the value


@dataclasses.dataclass(frozen=True)
class VariableMetadata:
    """A value on its way into a Variable, with metadata the Variable takes on.

    Initializers wrapped by `with_metadata` (or `with_partitioning`) return one;
    `Variable(VariableMetadata(value, {...}))` builds the Variable of `value` with that
    metadata added to its keywords (the wrapped metadata wins on a clash).
    """

    raw_value: _Any
    metadata: Mapping[str, object] = dataclasses.field(default_factory=dict)


def with_metadata(initializer: Callable[..., _Any], **metadata: object) -> Callable[..., _Any]:
    """`initializer` whose result carries `metadata` into the Variable built from it.

    >>> import jax.numpy as jnp
    >>> init = with_metadata(lambda: jnp.zeros(2), tag="frozen")
    >>> Param(init()).tag
    'frozen'

    Args:
        initializer: any function returning a value (an array initializer).
        **metadata: the Variable metadata to attach (e.g. `out_sharding=('embed', None)`).

    Returns:
        A function with `initializer`'s arguments returning a `VariableMetadata`.
    """
    if not callable(initializer):
        raise TypeError(
            "`with_metadata` wraps an initializer (a function returning the value), e.g. "
            f"`with_metadata(nnx.initializers.lecun_normal(), tag='x')`; got {initializer!r}."
        )
    hooks = sorted(k for k in metadata if k.startswith("on_") and k.endswith("_value"))
    if hooks:
        raise TypeError(
            f"`with_metadata` does not take the Variable hooks {hooks} (deprecated in Flax "
            "0.12): subclass the Variable and override `get_value`/`set_value` instead."
        )

    @functools.wraps(initializer)
    def wrapped(*args: object, **kwargs: object) -> VariableMetadata:
        return VariableMetadata(initializer(*args, **kwargs), metadata)

    return wrapped


class Param(Variable):
    """A trainable parameter."""


class BatchStat(Variable):
    """A running statistic (BatchNorm's mean and variance)."""


class Cache(Variable):
    """A cached value (an attention key/value cache)."""


class Intermediate(Variable):
    """A value a module sowed during its call, for inspection."""


HIJAX_SLOT = Variable.__dict__["_flattened"]
"""The slot where a hijax Variable keeps its contents, `(leaves, treedef)` of the plain
Variable it stands for (its `raw_value` is a property reading them)."""


def _through_plain(slot: str, set_slot: Callable[[Variable, _Any], None]) -> property:
    """A hijax Variable's `slot` (`raw_value`, `_metadata`): that of the plain Variable it
    holds, read from it, or written into it and the result stored back."""

    def get(self: HijaxVariable) -> _Any:
        from ._hijax import read  # (defined only on a JAX with hijax)

        return getattr(read(self), slot)

    def set_(self: HijaxVariable, value: _Any) -> None:
        from ._hijax import read, write

        plain = read(self)
        set_slot(plain, value)
        write(self, plain)

    return property(get, set_, doc=f"The `{slot}` of the plain Variable this one holds.")


class HijaxVariable(Variable):
    """A hijax Variable (Flax NNX 0.12's `hijax=True`): one that plain `jax.jit`,
    `jax.grad` and `jax.lax.scan` update in place, also through a function's closure.

    `Param(x, hijax=True)`, `nnx.with_vars(node, hijax=True)` or any Variable made under
    `nnx.var_defaults(hijax=True)` is an instance of a subclass of this class and of its
    Variable class (`isinstance(v, Param)` holds; `v.var_type` is `Param`). It reads and
    writes like any Variable; JAX sees it as one mutable value (see `_hijax`). Needs
    JAX 0.10 or newer (`jax.experimental.hijax`).

    >>> import jax, jax.numpy as jnp                        # doctest: +SKIP
    >>> count = Variable(jnp.array(0), hijax=True)          # doctest: +SKIP
    >>> jax.jit(lambda c: c.__setitem__(..., c[...] + 1))(count)  # doctest: +SKIP
    >>> int(count[...])                                     # doctest: +SKIP
    1
    """

    _hijax_type: ClassVar[bool] = True
    _hijax_base: ClassVar[type[Variable]] = Variable

    raw_value = _through_plain("raw_value", store_raw_value)
    _metadata = _through_plain("_metadata", _store_metadata)  # type: ignore[assignment]  # a property, as the base class's

    @property
    def hijax(self) -> bool:
        """True: this is a hijax Variable."""
        return True

    @property
    def type(self) -> type[Variable]:
        """The Variable class this hijax Variable is one of (`Param`, ...)."""
        return type(self)._hijax_base

    var_type = type

    @classmethod
    def from_metadata(cls, value: object, metadata: Mapping[str, object]) -> Variable:
        """A Variable of this one's Variable class: a hijax one unless `metadata` has
        `hijax=False`."""
        hijax = metadata.get("hijax", True) is True
        plain = cls._hijax_base.from_metadata(value, {**metadata, "hijax": False})
        return _as_hijax(plain, f"`{cls.__name__}.from_metadata`") if hijax else plain

    def cur_qdd(self) -> _Any:
        """What it holds now, as JAX's quasi-dynamic data (called by JAX)."""
        from ._hijax import contents_now

        return contents_now(self)

    def _hijax_stored(self) -> tuple[tuple, _Any]:
        """`(leaves, treedef)` of the plain Variable this one holds now."""
        return HIJAX_SLOT.__get__(self)

    def _hijax_store(self, leaves: tuple, treedef: _Any) -> None:
        HIJAX_SLOT.__set__(self, (leaves, treedef))

    def __getstate__(self) -> dict[str, object]:
        return {"raw_value": self.raw_value, "metadata": dict(self._metadata), "hijax": True}

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + ", hijax=True)"


_HIJAX_CLASSES: dict[type, type[HijaxVariable]] = {Variable: HijaxVariable}


def hijax_class(var_type: type[Variable]) -> type[HijaxVariable]:
    """The class of the hijax Variables of the Variable class `var_type` (made once): a
    subclass of `HijaxVariable` and of `var_type`."""
    if issubclass(var_type, HijaxVariable):
        return var_type
    found = _HIJAX_CLASSES.get(var_type)
    if found is None:
        metaclass: _Any = type(var_type)
        found = metaclass(
            var_type.__name__,
            (HijaxVariable, var_type),
            {"__slots__": (), "__module__": var_type.__module__, "_hijax_base": var_type},
        )
        found.__qualname__ = f"HijaxVariable[{var_type.__qualname__}]"
        _HIJAX_CLASSES[var_type] = found
    return found  # type: ignore[return-value]  # made above as a HijaxVariable subclass


def _instance_or_hijax_tracer(cls: type, instance: object) -> bool:
    """`isinstance` for Variable classes once hijax Variables exist: also true of a JAX
    tracer of a hijax Variable of the class (inside a plain `jax.jit`, a hijax `Param`
    argument is a tracer, and `isinstance(it, Param)` holds, as in Flax)."""
    if type.__instancecheck__(cls, instance):
        return True
    if not isinstance(instance, Tracer):
        return False
    traced = traced_class(instance)
    return traced is not None and issubclass(traced, cls)


def variable_class(variable: object) -> type:
    """`type(variable)` of a Variable, or of what `isinstance` takes for one: for a JAX
    tracer of a hijax Variable, the class of the hijax Variable it stands for (what a
    GraphDef records, so one made inside a plain `jax.jit` equals one made outside)."""
    if isinstance(variable, Tracer):
        return traced_class(variable) or type(variable)
    return type(variable)


def _see_hijax_tracers() -> None:
    """Make `isinstance(tracer, Param)` hold for tracers of hijax Params, from the first
    hijax Variable on: only then can such tracers exist, and every program that makes
    none keeps C-speed `isinstance` checks on Variable classes (a Python
    `__instancecheck__` costs ~70 ns a check, and graph operations make many)."""
    if "__instancecheck__" not in _VariableType.__dict__:
        _VariableType.__instancecheck__ = _instance_or_hijax_tracer  # type: ignore[method-assign]


def to_hijax(plain: Variable) -> HijaxVariable:
    """The hijax Variable holding the plain Variable `plain` (its leaves and treedef)."""
    _see_hijax_tracers()
    leaves, treedef = jax.tree.flatten(plain)
    made = _new(hijax_class(type(plain)))
    made._hijax_store(tuple(leaves), treedef)
    return made


class _VariableStateType(type):
    """`VariableState(...)` builds a Variable; any Variable is a `VariableState`."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, Variable)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return isinstance(subclass, builtins.type) and issubclass(subclass, Variable)

    def __call__(
        cls, type: builtins.type[Variable] = Variable, value: object = None, **metadata: object
    ) -> Variable:
        if not (isinstance(type, builtins.type) and issubclass(type, Variable)):
            raise TypeError(
                "`VariableState(type, value, **metadata)` needs a Variable class as `type` "
                f"(e.g. `VariableState(type=Param, value=0)`); got {type!r}."
            )
        return type.from_metadata(value, metadata)


class VariableState(metaclass=_VariableStateType):
    """The older NNX name of a Variable snapshot: `VariableState(type=Param, value=0)`
    builds `Param(0)`, and `isinstance(v, VariableState)` holds for every Variable.

    bryo's States hold Variables, as Flax 0.12's do (where `VariableState = Variable`).
    """


class VariableMeta:
    """A Variable's type and metadata, hashed once: the key lifted transforms cache on
    (metadata that does not hash counts by its keys)."""

    __slots__ = ("_hash", "metadata", "type")

    def __init__(self, type: builtins.type, metadata: dict[str, object]) -> None:
        self.type = type
        self.metadata = metadata
        try:
            self._hash = hash((type, tuple(metadata.items())))
        except TypeError:
            self._hash = hash((type, tuple(metadata)))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        fields = "".join(f", {k}={v!r}" for k, v in self.metadata.items())
        return f"{self.type.__name__}{fields}"

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, VariableMeta)
            and self.type is other.type
            and metadata_equal(self.metadata, other.metadata)
        )
