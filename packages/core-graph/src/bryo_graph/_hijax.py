"""Hijax Variables (Flax NNX 0.12's `hijax=True`): Variables that plain `jax.jit`,
`jax.grad` and `jax.lax.scan` can update in place, built on JAX's `jax.experimental.hijax`.

A hijax Variable is a `Variable` (of a subclass per Variable class, so `isinstance(v,
Param)` holds) whose contents, the leaves and treedef of the plain Variable it stands for,
JAX sees as one mutable value of a high-level type: passed to `jax.jit` it is traced as a
whole, reads and writes inside become `read`/`write` primitives on it, and what the traced
function wrote is written back into the caller's Variable when the call returns (also for a
Variable the function reaches through its closure). Outside any trace, the same primitives
act on the Variable directly. The contents may change structure inside a trace (a dict
value gaining a key): the type follows the writes, as JAX's quasi-dynamic data.

Every operation reads the contents as a plain Variable of the same class and metadata,
applies the plain Variable's own method (so subclasses' `get_value`/`set_value` apply),
and writes it back if it changed. Inside a trace the Variable is a tracer: its operators,
indexing, metadata attributes and methods are forwarded the same way through its abstract
type.

`jax.experimental.hijax` is JAX's experimental API, with what this needs from JAX 0.10:
on older JAX, asking for a hijax Variable raises a ValueError naming the version.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax

from bryo_pytree import ARITHMETIC_OPERATORS, COMPARISON_OPERATORS

HIJAX_MIN_JAX = "0.10"
"""The oldest JAX whose `jax.experimental.hijax` has what hijax Variables are built on."""

try:
    import jax.experimental as _experimental
    from jax.experimental import hijax as _hjx
    from jax.extend.core import Effect as _Effect

    _NEEDED = ("HiPrimitive", "MutableHiType", "aval_method", "aval_property", "Zero")
    _NEEDED += ("register_hitype", "control_flow_allowed_effects")
    HIJAX_AVAILABLE = all(hasattr(_hjx, name) for name in _NEEDED) and hasattr(
        _experimental, "cur_qdd"
    )
except ImportError:  # JAX before 0.8 has no jax.experimental.hijax
    HIJAX_AVAILABLE = False


def check_hijax_available(where: str) -> None:
    """A ValueError naming `where` and the JAX version needed, unless this JAX has hijax."""
    if not HIJAX_AVAILABLE:
        raise ValueError(
            f"{where} asks for a hijax Variable (`hijax=True`), which is built on "
            f"`jax.experimental.hijax` of JAX {HIJAX_MIN_JAX} or newer; this is JAX "
            f"{jax.__version__}. Upgrade JAX (`pip install -U jax`), or use `ref=True` (a "
            "Variable backed by a `jax.new_ref` mutable array, which `jax.jit` also updates "
            "in place) or bryo's lifted transforms (`nnx.jit`, ...)."
        )


if HIJAX_AVAILABLE:
    from jax.experimental import cur_qdd as _cur_qdd

    @dataclasses.dataclass(frozen=True)
    class Contents:
        """The quasi-dynamic type of a hijax Variable: its leaves' types and its treedef
        (the plain Variable's class, metadata and value structure)."""

        leaf_avals: tuple[Any, ...]
        treedef: Any

        def to_tangent_qdd(self) -> Contents:
            return Contents(tuple(a.to_tangent_aval() for a in self.leaf_avals), self.treedef)

        def normalize(self) -> Contents:
            return Contents(tuple(a.normalize() for a in self.leaf_avals), self.treedef)

    class HijaxVariableEffect(_Effect):
        """The effect of reading and writing a hijax Variable (keeps the writes in order
        and alive)."""

    _EFFECT = HijaxVariableEffect()
    _hjx.control_flow_allowed_effects.add_type(HijaxVariableEffect)

    def stored(variable: Any) -> tuple[tuple, Any]:
        """`(leaves, treedef)` a concrete hijax Variable holds."""
        return variable._hijax_stored()

    def store(variable: Any, leaves: Any, treedef: Any) -> None:
        variable._hijax_store(tuple(leaves), treedef)

    def _contents_of(leaves: tuple, treedef: Any) -> Contents:
        return Contents(tuple(jax.typeof(leaf) for leaf in leaves), treedef)

    class _Read(_hjx.HiPrimitive):
        multiple_results = True

        def abstract_eval(self, aval: Any, *, avals: tuple) -> tuple[list, set]:
            return list(avals), {_EFFECT}

        def to_lojax(self, variable: Any, *, avals: tuple) -> list:
            return list(stored(variable)[0])

        impl = to_lojax

        def jvp(self, primals: Any, tangents: Any, *, avals: tuple) -> tuple:
            (variable,), (variable_dot,) = primals, tangents
            tangent_avals = tuple(a.to_tangent_aval() for a in avals)
            return read_p.bind(variable, avals=avals), read_p.bind(
                variable_dot, avals=tangent_avals
            )

        def transpose(self, *args: Any, **params: Any) -> Any:
            raise TypeError(_NO_TRANSPOSE)

    class _Write(_hjx.HiPrimitive):
        multiple_results = True

        def is_high(self, *avals: Any, treedef: Any) -> bool:
            return True

        def abstract_eval(self, aval_qdd: Any, *leaf_avals: Any, treedef: Any) -> tuple:
            aval_qdd.mutable_qdd.update(Contents(tuple(leaf_avals), treedef))
            return [], {_EFFECT}

        def to_lojax(self, variable: Any, *leaves: Any, treedef: Any) -> list:
            store(variable, leaves, treedef)
            return []

        impl = to_lojax

        def jvp(self, primals: Any, tangents: Any, *, treedef: Any) -> tuple:
            variable, *values = primals
            variable_dot, *value_dots = tangents
            if type(variable_dot) is _hjx.Zero:
                raise TypeError(
                    "a value with a gradient was written into a hijax Variable that is not "
                    "differentiated: write `jax.lax.stop_gradient(value)` into it instead."
                )
            write_p.bind(variable, *values, treedef=treedef)
            write_p.bind(variable_dot, *value_dots, treedef=treedef)
            return [], []

        def transpose(self, *args: Any, **params: Any) -> Any:
            raise TypeError(_NO_TRANSPOSE)

    _NO_TRANSPOSE = (
        "hijax Variables cannot be differentiated through (as in Flax): take gradients "
        "with respect to a plain copy (`nnx.with_vars(params, hijax=False)`)."
    )
    read_p = _Read("read_hijax_variable")
    write_p = _Write("write_hijax_variable")

    def read(target: Any) -> Any:
        """The plain Variable `target` (a hijax Variable or its tracer) holds now."""
        contents: Contents = _cur_qdd(target)
        leaves = read_p.bind(target, avals=contents.leaf_avals)
        return jax.tree.unflatten(contents.treedef, leaves)

    def write(target: Any, plain: Any) -> None:
        """Make `target` hold the plain Variable `plain`."""
        leaves, treedef = jax.tree.flatten(plain)
        write_p.bind(target, *leaves, treedef=treedef)

    def _snapshot(plain: Any) -> tuple[list, Any]:
        return jax.tree.flatten(plain)

    def _changed(before: tuple[list, Any], plain: Any) -> bool:
        leaves, treedef = jax.tree.flatten(plain)
        old_leaves, old_treedef = before
        return treedef != old_treedef or any(
            a is not b for a, b in zip(leaves, old_leaves, strict=True)
        )

    def call(target: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """`getattr(plain, name)(*args, **kwargs)` on the plain Variable `target` holds,
        written back when the call changed it."""
        plain = read(target)
        before = _snapshot(plain)
        out = getattr(plain, name)(*args, **kwargs)
        if _changed(before, plain):
            write(target, plain)
        return out

    def _attribute(target: Any, name: str) -> Any:
        plain = read(target)
        if callable(getattr(type(plain), name, None)):
            return functools.partial(call, target, name)
        return getattr(plain, name)

    def _method(name: str) -> Any:
        def method(target: Any, *args: Any, **kwargs: Any) -> Any:
            return call(target, name, *args, **kwargs)

        method.__name__ = name
        return _hjx.aval_method(method)

    def _operator(name: str) -> Callable[..., Any]:
        def operator(self: Any, target: Any, *args: Any) -> Any:
            return call(target, f"__{name}__", *args)

        operator.__name__ = f"_{name}"
        return operator

    class HijaxVariableType(_hjx.MutableHiType):
        """The abstract type of a hijax Variable of class `var_type`, with its contents
        as quasi-dynamic data; a tracer of it forwards to the plain Variable it holds."""

        has_qdd = True

        def __init__(self, var_type: type, hijax_type: type) -> None:
            self.var_type = var_type  # the Variable class (`Param`)
            self.hijax_type = hijax_type  # the class of its hijax Variables

        def __hash__(self) -> int:
            return hash((HijaxVariableType, self.var_type))

        def __eq__(self, other: object) -> bool:
            return isinstance(other, HijaxVariableType) and other.var_type is self.var_type

        def __repr__(self) -> str:
            return f"{self.var_type.__name__}(hijax)"

        def str_short(self, short_dtypes: bool = False, **_: Any) -> str:
            return repr(self)

        # JAX's lowering of the mutable type to its leaves and back
        def lo_ty_qdd(self, contents: Contents) -> list:
            return [lo for aval in contents.leaf_avals for lo in aval.lo_ty()]

        def _raised(self, contents: Contents, lo_values: tuple) -> list:
            values, start = [], 0
            for aval in contents.leaf_avals:
                count = len(aval.lo_ty())
                values.append(aval.raise_val(*lo_values[start : start + count]))
                start += count
            return values

        def new_from_loval(self, contents: Contents, *lo_values: Any) -> Any:
            made = object.__new__(self.hijax_type)
            store(made, self._raised(contents, lo_values), contents.treedef)
            return made

        def read_loval(self, contents: Contents, variable: Any) -> list:
            leaves, _ = stored(variable)
            return [
                lo
                for aval, leaf in zip(contents.leaf_avals, leaves, strict=True)
                for lo in aval.lower_val(leaf)
            ]

        def update_from_loval(self, contents: Contents, variable: Any, *lo_values: Any) -> None:
            write_p.bind(variable, *self._raised(contents, lo_values), treedef=contents.treedef)

        def to_tangent_aval(self) -> HijaxVariableType:
            return HijaxVariableType(self.var_type, self.hijax_type)

        # what a tracer forwards
        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            return _hjx.aval_property(lambda target: _attribute(target, name))

        hijax = _hjx.aval_property(lambda target: True)
        __jax_array__ = _hjx.aval_method(lambda target: read(target).get_value())
        _getitem = _operator("getitem")
        _setitem = _operator("setitem")
        _len = _operator("len")
        _iter = _operator("iter")
        _bool = _operator("bool")
        _int = _operator("int")
        _float = _operator("float")
        _index = _operator("index")
        _neg = _operator("neg")
        _pos = _operator("pos")
        _abs = _operator("abs")
        _invert = _operator("invert")
        _round = _operator("round")

    for _name in (*ARITHMETIC_OPERATORS, *COMPARISON_OPERATORS):
        setattr(HijaxVariableType, f"_{_name}", _operator(_name))
        if _name in ARITHMETIC_OPERATORS:
            setattr(HijaxVariableType, f"_r{_name}", _operator(f"r{_name}"))
    for _name in ("get_value", "set_value", "get_raw_value", "set_raw_value", "get_metadata"):
        setattr(HijaxVariableType, _name, _method(_name))
    for _name in ("set_metadata", "has_metadata", "copy", "replace", "copy_from"):
        setattr(HijaxVariableType, _name, _method(_name))
    for _name, _read_flag in (
        ("type", lambda target: jax.typeof(target).var_type),
        ("var_type", lambda target: jax.typeof(target).var_type),
        ("ref", lambda target: read(target).ref),
        ("_metadata", lambda target: read(target)._metadata),  # (the graph functions read it)
    ):
        setattr(HijaxVariableType, _name, _hjx.aval_property(_read_flag))

    def _abstract(variable: Any) -> HijaxVariableType:
        cls = type(variable)
        return HijaxVariableType(cls._hijax_base, cls)

    def register(cls: type) -> None:
        """Make JAX see instances of `cls` (the hijax base class) as hijax values."""
        _hjx.register_hitype(cls, _abstract)

    def traced_class(value: Any) -> type | None:
        """The hijax Variable class (`HijaxVariable[Param]`, ...) the JAX tracer `value`
        stands for, or None if it traces something else."""
        aval = getattr(value, "aval", None)
        return aval.hijax_type if isinstance(aval, HijaxVariableType) else None

    def contents_now(variable: Any) -> Contents:
        """`cur_qdd` of a concrete hijax Variable: what it holds now."""
        leaves, treedef = stored(variable)
        return _contents_of(leaves, treedef)

else:

    def register(cls: type) -> None:
        """Nothing to register on a JAX without hijax (no hijax Variable can be made)."""

    def traced_class(value: Any) -> type | None:
        """None: on a JAX without hijax no tracer stands for a hijax Variable."""
        return None
