"""The MoX tree: a root `Mox`, `ModuleCall` nodes and `Equation` leaves over jaxpr equations.

A `Block` is a closed region of computation, like a jaxpr: input variables, constants,
a sequence of nodes and output atoms. A `ModuleCall` owns the block of its module's body,
whose first `n_state` inputs are the module's array state (its parameters) and the rest
its call arguments; its own `invars` are the caller's atoms bound to those inputs.
Leaves are `Equation`s wrapping a `jax.extend.core.JaxprEqn` as traced; sub-jaxprs of
higher-order equations (`jit`, `custom_jvp_call`, `scan`, ...) are also converted to blocks
(`Equation.regions`) so that module calls inside them can be queried. Nodes are immutable.

This module is the bottom of bryo_mox: tracing, evaluation, printing, the element view and
documents are built on it and it imports none of them. The text form `str(node)` is
installed by the printer (`set_text_form`), and values derived from a MoX (its element
view) live in `Mox.memo`, freed with the MoX.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Self, TypeGuard, TypeVar, cast

import jax
import jax.core
from jax.extend import core as jex

from bryo_pytree import PyTreeDef

from ._errors import MoxError
from ._symbols import Symbol, symbols
from ._treespec import TreeSpec
from ._types import type_str

Var = jex.Var
Literal = jex.Literal
Atom = jex.Var | jex.Literal


def array_aval(atom: Atom) -> jax.core.ShapedArray:
    """`atom`'s aval as the array type it is: a MoX's variables and literals hold arrays
    (tracing gives them `ShapedArray`s), which jax types as any `AbstractValue`."""
    return cast(jax.core.ShapedArray, atom.aval)


#: The name jax gives its `jit` primitive now (`jit` since jax 0.7, `pjit` before).
JIT_NAME: str = jex.primitives.jit_p.name
#: Spellings of the jit primitive that queries accept: the seed's `pjit` and today's name.
JIT_ALIASES: frozenset[str] = frozenset({"jit", "pjit"})
#: Attribute names a `module_call` uses itself; module attrs may not take them.
RESERVED_ATTRS: frozenset[str] = frozenset(
    {"type", "qualtype", "name", "state_inputs", "state_outputs"}
)
CUSTOM_DERIVATIVE_NAMES: frozenset[str] = frozenset({"custom_jvp_call", "custom_vjp_call"})


@dataclass(frozen=True)
class ModuleInfo:
    """What a backend reports about one module call.

    Attributes:
        type: the module's class as a dotted path, `"bryo_nnx.Linear"`.
        name: the module's path in the model, `"layers/0/linear"` (`""` for the root).
        attrs: static attributes (`in_features=3`, `features=10`, ...): ints, floats,
            bools, strings, `None` or tuples of these.
    """

    type: str
    name: str = ""
    attrs: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not RESERVED_ATTRS.isdisjoint(self.attrs):
            clash = RESERVED_ATTRS & set(self.attrs)
            raise MoxError(
                f"`attrs` of module {self.name!r} ({self.type}) use reserved keys "
                f"{sorted(clash)}; rename them in the backend (e.g. `module_{min(clash)}`)."
            )
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    def __reduce__(self) -> tuple[Any, ...]:
        # a mappingproxy cannot be pickled: rebuild from a plain dict of the attrs
        return (ModuleInfo, (self.type, self.name, dict(self.attrs)))

    @property
    def short_type(self) -> str:
        """The class name without its module: `"Linear"` for `"bryo_nnx.Linear"`."""
        return self.type.rsplit(".", 1)[-1]


_text_form: Callable[[Node], str] | None = None
_pickler: Callable[[Mox], tuple[Any, ...]] | None = None


def set_pickler(reduce: Callable[[Mox], tuple[Any, ...]]) -> None:
    """Make `pickle` write a `Mox` as `reduce(mox)` (the serializers install theirs:
    they sit above this module)."""
    global _pickler
    _pickler = reduce


def set_text_form(format_node: Callable[[Node], str]) -> None:
    """Make `str(node)` return `format_node(node)` (the printer installs `pformat`)."""
    global _text_form
    _text_form = format_node


class Node:
    """A node of the MoX tree: `Mox`, `ModuleCall` or `Equation`."""

    # slotted (no `__dict__`): a loaded or traced MoX makes one node per equation
    __slots__ = ("__weakref__",)

    invars: tuple[Atom, ...]
    outvars: tuple[Atom, ...]

    @property
    def in_avals(self) -> tuple[jax.core.ShapedArray, ...]:
        return tuple(array_aval(v) for v in self.invars)

    @property
    def out_avals(self) -> tuple[jax.core.ShapedArray, ...]:
        return tuple(array_aval(v) for v in self.outvars)

    # YAX's spellings (`from bryo import mox as yax`): see docs/mox.md, "Coming from YAX".

    @property
    def inputs(self) -> list[Symbol]:
        """YAX's name for `invars`, as `Var`/`Literal` symbols (a fresh list)."""
        return symbols(self.invars)

    @property
    def outputs(self) -> list[Symbol]:
        """YAX's name for `outvars`, as `Var`/`Literal` symbols (a fresh list)."""
        return symbols(self.outvars)

    @property
    def is_ephemeral(self) -> bool:
        """YAX's flag: whether the node stands for no module (the root does not)."""
        return False

    def __str__(self) -> str:
        return repr(self) if _text_form is None else _text_form(self)

    # Nodes are immutable (frozen, tuples all the way down, equations and constants
    # included), so a copy is the node itself: `copy.deepcopy(mox)` works although JAX's
    # jaxprs cannot be deep-copied.
    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        return self


#: YAX's name for the base class of the tree's nodes.
Expr = Node


@dataclass(frozen=True, eq=False, slots=True)
class Block:
    """A closed region: `constvars` bound to `consts`, `invars`, `nodes`, `outvars`."""

    constvars: tuple[Var, ...]
    consts: tuple[object, ...]
    invars: tuple[Var, ...]
    nodes: tuple[ModuleCall | Equation, ...]
    outvars: tuple[Atom, ...]


class Region(NamedTuple):
    """One sub-jaxpr of an equation, converted to a block.

    Attributes:
        param: the equation's param holding it (`jaxpr`, `call_jaxpr`, `branches`, ...).
        index: its position when the param is a tuple of jaxprs (`branches`), else `None`.
        block: the converted sub-jaxpr.
        closed: whether the param holds a `ClosedJaxpr` (else an open `Jaxpr`).
    """

    param: str
    index: int | None
    block: Block
    closed: bool = True


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Equation(Node):
    """A leaf: one jaxpr equation, kept as traced (custom derivative rules included).

    `regions` holds the equation's sub-jaxprs converted to blocks (`Region` records); they
    serve queries and rewrites, while evaluation binds `eqn` itself.
    """

    eqn: jex.JaxprEqn
    regions: tuple[Region, ...] = ()

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_equation

        return render_equation(self, path, subtree_renderer)

    @property
    def primitive(self) -> jex.Primitive:
        return self.eqn.primitive

    @property
    def params(self) -> Mapping[str, object]:
        return self.eqn.params

    @property
    def invars(self) -> tuple[Atom, ...]:
        return tuple(self.eqn.invars)

    @property
    def outvars(self) -> tuple[Atom, ...]:
        return tuple(self.eqn.outvars)

    @property
    def name(self) -> str | None:
        """The `name` param (`jit`), or the wrapped function's name (custom derivatives)."""
        return equation_name(self.eqn)

    @property
    def prim(self) -> jex.Primitive:
        """YAX's name for `primitive`."""
        return self.eqn.primitive

    def to_dict(self, recursively: bool = True) -> dict[str, Any]:
        """YAX's dict of the equation: its params and `primitive` (the primitive's name)."""
        return {**self.eqn.params, "primitive": self.eqn.primitive.name}

    def __repr__(self) -> str:
        return f"Equation({self.primitive.name}{f' {self.name!r}' if self.name else ''})"


_new_node = object.__new__
_set_eqn = Equation.__dict__["eqn"].__set__  # the slots' descriptors (frozen: no setattr)
_set_regions = Equation.__dict__["regions"].__set__


def new_equation(eqn: jex.JaxprEqn, regions: tuple[Region, ...] = ()) -> Equation:
    """`Equation(eqn, regions)`, made without the frozen dataclass's `__init__` (its
    `object.__setattr__` per field): `make_mox` makes one per traced equation."""
    node = _new_node(Equation)
    _set_eqn(node, eqn)
    _set_regions(node, regions)
    return node


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class ModuleCall(Node):
    """One call of a module: `body` computes the module, `invars`/`outvars` wire it in.

    `invars[:n_state]` are the module's state leaves (its parameters), the rest the call's
    array arguments. `outvars[:n_state_out]` are state leaves the call changed (an rng
    count, batch statistics), the rest the call's outputs.
    """

    info: ModuleInfo
    invars: tuple[Atom, ...]
    outvars: tuple[Atom, ...]
    body: Block
    n_state: int = 0
    n_state_out: int = 0

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_module_call

        return render_module_call(self, path, subtree_renderer)

    @property
    def type(self) -> str:
        return self.info.type

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def attrs(self) -> Mapping[str, object]:
        return self.info.attrs

    @property
    def nodes(self) -> tuple[ModuleCall | Equation, ...]:
        return self.body.nodes

    @property
    def children(self) -> list[ModuleCall | Equation]:
        """YAX's name for the nodes of the body (a fresh list)."""
        return list(self.body.nodes)

    @property
    def params(self) -> MutableMapping[str, object]:
        """YAX's module params: the module's attributes and its `name` (the last part of
        its path; `None` for the root module).

        Editable in place, as in YAX: `call.params["name"] = "LoRA_0"` renames the call
        (its path keeps its parents), other keys set or delete attributes. An edit changes
        what the call is called and shows, never what it computes, and queries see it.
        """
        return ModuleParams(self)

    @property
    def module_ty(self) -> type:
        """YAX's module class: the class named by `type`, imported.

        Raises:
            MoxError: the class cannot be imported here (a MoX loaded from a file whose
                model's code is not installed); the message names it.
        """
        return import_type(self.info.type)

    @property
    def var_tree(self) -> PyTreeDef:
        """YAX's tree of the module's state: bryo records the state's leaves, not their
        tree, so this is a flat tuple of `n_state` leaves (`var_tree.num_leaves` is YAX's
        count of leading state inputs)."""
        return jax.tree_util.tree_structure((0,) * self.n_state)

    def to_dict(self, recursively: bool = True) -> dict[str, Any]:
        """YAX's dict of the call: its attributes, `name`, `primitive="module_call"`,
        `ephemeral=False`, `type` (the class name) and, when `recursively`, `children`."""
        found: dict[str, Any] = {**self.info.attrs, "name": local_name(self.info.name)}
        found.update(primitive="module_call", ephemeral=False, type=self.info.short_type)
        if recursively:
            found["children"] = [child.to_dict() for child in self.body.nodes]
        return found

    def __repr__(self) -> str:
        return f"ModuleCall({self.info.short_type} {self.info.name!r})"


class _MoxType(type):
    """`isinstance(call, Mox)` holds for a `ModuleCall` too: in YAX the root and every
    module call are `Mox` instances (`is_root` tells the root apart)."""

    def __instancecheck__(cls, instance: object) -> bool:
        return type.__instancecheck__(cls, instance) or (
            cls is Mox and type.__instancecheck__(ModuleCall, instance)
        )


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Mox(Node, metaclass=_MoxType):
    """A module expression: the root of the tree, callable through `eval_mox`.

    As in YAX, `isinstance(node, Mox)` is true for the root and for every `ModuleCall`
    under it; `is_root(node)` (or `isinstance(node, ModuleCall)`) tells them apart.

    Attributes:
        block: the computation; its invars are the array leaves of the traced arguments
            (positional, then keyword; see `static_leaves`), followed by one leaf per
            `extra_params` entry.
        in_tree: the treedef of the traced positional arguments (`None` after loading a
            file whose argument structure could not be written: pass flat leaves then).
        out_tree: the treedef of the result (`None`: a flat list of leaves is returned).
        extra_params: parameters added by `sub` (a LoRA adapter's matrices, say), as
            `(key, jax.ShapeDtypeStruct)` pairs; `eval_mox` takes them as one trailing
            dict `{key: array}`.
        kwargs_tree: the treedef of the traced keyword arguments (a dict: those holding
            arrays, such as Linen's `rngs={"dropout": key}`), or `None` when there are
            none. Their leaves follow the positional ones in `block.invars`.
        static_kwargs: the keyword arguments without arrays (`train=True`), baked into
            the computation, as sorted `(name, value)` pairs.
        static_leaves: the leaves of the traced arguments that are not arrays (a
            module's activation function, a flag), baked into the computation, as
            `(position, value)` pairs; positions count the leaves of the positional
            arguments, then those of the traced keyword arguments.
        in_spec: for a MoX loaded from a file whose argument structure has nodes other
            than tuples, lists, dicts and `None` (a model, its `State`): that structure
            as paths and node kinds (`TreeSpec`) of the pair `(args, traced kwargs)`,
            against which `eval_mox` checks its arguments (`in_tree` is then `None`).
        out_spec: likewise for the result (`out_tree` is then `None`).
    """

    block: Block
    in_tree: PyTreeDef | None = None
    out_tree: PyTreeDef | None = None
    extra_params: tuple[tuple[str, jax.ShapeDtypeStruct], ...] = ()
    kwargs_tree: PyTreeDef | None = None
    static_kwargs: tuple[tuple[str, object], ...] = ()
    static_leaves: tuple[tuple[int, object], ...] = ()
    in_spec: TreeSpec | None = None
    out_spec: TreeSpec | None = None
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __treescope_repr__(self, path: str | None, subtree_renderer: object) -> object:
        """Rich display in notebooks (treescope, optional): see `_treescope`."""
        from ._treescope import render_mox

        return render_mox(self, path, subtree_renderer)

    @property
    def invars(self) -> tuple[Atom, ...]:
        return self.block.invars

    @property
    def outvars(self) -> tuple[Atom, ...]:
        return self.block.outvars

    @property
    def nodes(self) -> tuple[ModuleCall | Equation, ...]:
        return self.block.nodes

    @property
    def traced_kwargs(self) -> tuple[str, ...]:
        """Names of the keyword arguments traced as inputs (sorted)."""
        if self.kwargs_tree is None:
            return ()
        return tuple(self.kwargs_tree.unflatten([None] * self.kwargs_tree.num_leaves))

    @property
    def children(self) -> list[ModuleCall | Equation]:
        """YAX's name for the top-level nodes (a fresh list).

        A module call taken from here (or from `query`) remembers where its state leaves
        sit in this MoX's arguments (`state_paths`), so that `sub` can place it, as YAX
        does, with its weights in the rewritten model's params tree.
        """
        nodes = self.block.nodes
        for index, node in enumerate(nodes):
            if isinstance(node, ModuleCall):
                record_state_paths(self, (index,), node)
        return list(nodes)

    @property
    def is_ephemeral(self) -> bool:
        """YAX's flag: the root stands for no module."""
        return True

    @property
    def module_ty(self) -> None:
        """YAX's module class: the root has none."""
        return None

    @property
    def params(self) -> Mapping[str, object]:
        """YAX's params: the root has none (an empty, read-only mapping)."""
        return _NO_PARAMS

    @property
    def var_tree(self) -> PyTreeDef:
        """YAX's state tree: the root holds no state of its own (an empty tree)."""
        return jax.tree_util.tree_structure(())

    def to_dict(self, recursively: bool = True) -> dict[str, Any]:
        """YAX's dict of the root: `primitive="module_call"`, `ephemeral=True` and, when
        `recursively`, the dicts of its `children`."""
        found: dict[str, Any] = {"primitive": "module_call", "ephemeral": True}
        if recursively:
            found["children"] = [child.to_dict() for child in self.block.nodes]
        return found

    @property
    def extra_param_types(self) -> dict[str, jax.ShapeDtypeStruct]:
        """`{key: ShapeDtypeStruct}` of the parameters `sub` added, for initialising them."""
        return dict(self.extra_params)

    def __repr__(self) -> str:
        types = " ".join(type_str(v.aval) for v in self.invars)
        return f"Mox(lambda {types}: {len(self.nodes)} nodes)"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle support: jax's jaxprs cannot be pickled, so the block travels as the
        text `dumps` writes (`_serialize.pickled`, installed by `set_pickler`)."""
        if _pickler is None:  # pragma: no cover  -- importing bryo_mox installs it
            raise MoxError("pickling a Mox needs bryo_mox's serializers (import bryo_mox).")
        return _pickler(self)

    def memo(self, key: str, build: Callable[[], _T]) -> _T:
        """The value derived from this MoX under `key`, built by `build()` on first use.

        For caches of the layers above (the element view of `query`): they are owned by
        the MoX, so they go when it goes. Thread-safe; `build` runs outside the lock, so
        two threads may both build, and the first value stored wins.
        """
        value = self._memo.get(key, _MISSING)
        if value is _MISSING:
            built = build()
            with _memo_lock:
                value = self._memo.setdefault(key, built)
        return value

    def forget(self, key: str, value: object) -> None:
        """Drop the memo under `key` if it is still `value` (a stale cache)."""
        with _memo_lock:
            if self._memo.get(key, _MISSING) is value:
                del self._memo[key]


_T = TypeVar("_T")
_MISSING = object()
_memo_lock = threading.Lock()
_NO_PARAMS: Mapping[str, object] = MappingProxyType({})
_edits = 0


def _refuse_setattr(self: Node, name: str, value: object = None) -> None:
    where = "the root" if is_root(self) else repr(self)
    raise dataclasses.FrozenInstanceError(
        f"cannot set or delete `{name}` of {where}: MoX nodes are immutable (one node may serve "
        "several MoXes). To change what a node computes, `sub` it; to rename a module call "
        "or change its attributes, edit `call.params` (`call.params['name'] = 'LoRA_0'`)."
    )


for _cls in (Equation, ModuleCall, Mox):
    _cls.__setattr__ = _refuse_setattr  # type: ignore[method-assign]
    _cls.__delattr__ = _refuse_setattr  # type: ignore[method-assign,assignment]


#: Where the state leaves of a module call taken from a root's `children` sat in that
#: root's positional arguments (key paths), kept as long as the call lives.
_STATE_PATHS: weakref.WeakKeyDictionary[ModuleCall, tuple[tuple[Any, ...], ...]] = (
    weakref.WeakKeyDictionary()
)
#: The MoX (weakly) and location `query` found a module call at.
_SOURCES: weakref.WeakKeyDictionary[ModuleCall, tuple[weakref.ref[Mox], tuple[Any, ...]]] = (
    weakref.WeakKeyDictionary()
)


def record_state_paths(mox: Mox, location: Sequence[Any], call: ModuleCall) -> None:
    """Remember where `call`'s state leaves sit in `mox`'s arguments (`call` is at
    `location` in `mox`: indices into blocks; one in a region is not recorded)."""
    with _memo_lock:
        if not call.n_state or call in _STATE_PATHS:
            return
    chain: list[ModuleCall] = []
    block = mox.block
    for step in location[:-1]:
        node = block.nodes[step] if isinstance(step, int) else None
        if not isinstance(node, ModuleCall):
            return
        chain.append(node)
        block = node.body
    found = state_paths(mox, chain, call)
    if found is not None:
        with _memo_lock:
            _STATE_PATHS[call] = found


def note_source(mox: Mox, location: Sequence[Any], call: ModuleCall) -> None:
    """Remember, weakly, that `call` was found at `location` in `mox` (by `query`): its
    state paths are worked out when `sub` needs them, if `mox` is still alive."""
    with _memo_lock:
        _SOURCES[call] = (weakref.ref(mox), tuple(location))


def recorded_state_paths(call: ModuleCall) -> tuple[tuple[Any, ...], ...] | None:
    """Where `call`'s state leaves sat in the arguments of the MoX it was taken from
    (`Mox.children`, or `query` while that MoX lives), if known."""
    with _memo_lock:
        found = _STATE_PATHS.get(call)
        source = _SOURCES.pop(call, None) if found is None else None
    if source is not None:
        mox = source[0]()
        if mox is not None:
            record_state_paths(mox, source[1], call)
            with _memo_lock:
                found = _STATE_PATHS.get(call)
    return found


def state_paths(
    mox: Mox, chain: Sequence[ModuleCall], call: ModuleCall
) -> tuple[tuple[Any, ...], ...] | None:
    """The key paths (`(SequenceKey(0), DictKey("params"), ...)`) in `mox`'s positional
    arguments of the state leaves of `call`, which sits in the body of the last module
    call of `chain` (in the root's block when `chain` is empty). `None` when a leaf is not
    an argument of the root (computed, or a keyword argument), or the root has no tree."""
    if mox.in_tree is None:
        return None
    atoms: list[Atom] = list(call.invars[: call.n_state])
    positions = mox.memo("invar_positions", dict)  # id(block) -> {id(var): index}
    for parent in reversed(chain):
        position = positions.get(id(parent.body))
        if position is None:
            position = {id(v): j for j, v in enumerate(parent.body.invars)}
            positions[id(parent.body)] = position
        found = [position.get(id(a)) for a in atoms]
        if any(j is None for j in found):
            return None
        atoms = [parent.invars[j] for j in found if j is not None]
    root = mox.memo("root_arg_paths", lambda: _root_arg_paths(mox))
    if root is None:
        return None
    position, paths = root
    result = []
    for atom in atoms:
        path = paths.get(position.get(id(atom), -1))
        if path is None:
            return None
        result.append(path)
    return tuple(result)


def _root_arg_paths(mox: Mox) -> tuple[dict[int, int], dict[int, tuple[Any, ...]]] | None:
    """`({id(root input): index}, {root input index: key path})` for the root inputs that
    are leaves of the positional arguments."""
    paths = arg_paths(mox)
    if paths is None or mox.in_tree is None:
        return None
    statics = {p for p, _ in mox.static_leaves}
    leaf_of = [p for p in range(len(paths) + len(mox.block.invars)) if p not in statics]
    position = {id(v): j for j, v in enumerate(mox.block.invars)}
    return position, {
        j: paths[leaf_of[j]]
        for j in range(min(len(mox.block.invars), len(leaf_of)))
        if leaf_of[j] < len(paths)
    }


def arg_example(mox: Mox) -> Any:
    """`mox`'s positional arguments with each leaf replaced by its position (`None` when
    its tree is unknown or holds nodes that do not take integers for leaves)."""
    if mox.in_tree is None:
        return None
    n_args = mox.in_tree.num_leaves
    try:
        example = mox.in_tree.unflatten(list(range(n_args)))
        leaves = jax.tree_util.tree_leaves(example)
    except Exception:  # a pytree node class that checks its leaves
        return None
    return example if leaves == list(range(n_args)) else None


def arg_paths(mox: Mox) -> list[tuple[Any, ...]] | None:
    """The key path of each leaf of `mox`'s positional arguments (see `arg_example`)."""
    example = arg_example(mox)
    if example is None:
        return None
    return [tuple(path) for path, _ in jax.tree_util.tree_flatten_with_path(example)[0]]


def is_root(node: object) -> TypeGuard[Mox]:
    """Whether `node` is the root of a MoX (a `Mox`, not a `ModuleCall`)."""
    return type.__instancecheck__(Mox, node)


def edit_count() -> int:
    """How many in-place edits of module calls (`call.params[...] = ...`) were made; views
    built from a MoX before the last edit are stale."""
    return _edits


def local_name(path: str) -> str | None:
    """The last part of a module's path (`"Dense_0"` for `"block/Dense_0"`), `None` for
    the root module (path `""`)."""
    return path.rsplit("/", 1)[-1] or None


class ModuleParams(MutableMapping[str, object]):
    """A module call's YAX params (`ModuleCall.params`): its attributes and `name`; an edit
    replaces the call's `info` with a checked new one."""

    __slots__ = ("call",)

    def __init__(self, call: ModuleCall) -> None:
        self.call = call

    def _current(self) -> dict[str, object]:
        info = self.call.info
        return {**info.attrs, "name": local_name(info.name)}

    def __getitem__(self, key: str) -> object:
        return self._current()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self.call.info.attrs) + 1

    def __repr__(self) -> str:
        return repr(self._current())

    def __setitem__(self, key: str, value: object) -> None:
        info = self.call.info
        if key == "name":
            if not isinstance(value, str) or not value or "/" in value:
                raise MoxError(
                    f"a module's `name` must be a non-empty string without '/', got "
                    f"{value!r} (module {info.name!r}, {info.type})."
                )
            parent = info.name.rpartition("/")[0]
            new = ModuleInfo(info.type, f"{parent}/{value}" if parent else value, info.attrs)
        else:
            if not _is_attr_value(value):
                raise MoxError(
                    f"attribute {key!r} of module {info.name!r} ({info.type}) must be an int, "
                    f"float, bool, str, None or a tuple of these, got {type(value).__name__}."
                )
            new = ModuleInfo(info.type, info.name, {**info.attrs, key: value})
        self._replace(new)

    def __delitem__(self, key: str) -> None:
        info = self.call.info
        if key == "name":
            raise MoxError(f"a module's `name` cannot be deleted (module {info.name!r}).")
        if key not in info.attrs:
            raise KeyError(key)
        kept = {k: v for k, v in info.attrs.items() if k != key}
        self._replace(ModuleInfo(info.type, info.name, kept))

    def _replace(self, info: ModuleInfo) -> None:
        global _edits
        with _memo_lock:
            object.__setattr__(self.call, "info", info)
            _edits += 1


def _is_attr_value(value: object) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(_is_attr_value(v) for v in value)


def import_type(dotted: str) -> type:
    """The class a dotted path names (`"flax.linen.linear.Dense"`), imported."""
    found = _imported_type(dotted)
    if found is None:
        raise MoxError(
            f"module type {dotted!r} cannot be imported here: install or import the code "
            "that defines it (a class defined inside a function has no importable path)."
        )
    return found


def _imported_type(dotted: str) -> type | None:
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
        found: object = module
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found if isinstance(found, type) else None
    return None


def equation_name(eqn: jex.JaxprEqn) -> str | None:
    """A readable name for an equation: its `name` param or its sub-function's name."""
    name = eqn.params.get("name")
    if isinstance(name, str):
        return name
    call_jaxpr = eqn.params.get("call_jaxpr")
    debug_info = getattr(getattr(call_jaxpr, "jaxpr", None), "debug_info", None)
    return getattr(debug_info, "func_name", None)


def jaxpr_params(
    params: Mapping[str, object],
) -> list[tuple[str, int | None, jex.ClosedJaxpr | jex.Jaxpr]]:
    """The (open or closed) jaxprs among an equation's params, as `(name, index, jaxpr)`,
    sorted by name."""
    found: list[tuple[str, int | None, jex.ClosedJaxpr | jex.Jaxpr]] = []
    for key, value in params.items():
        if type(value) in _JAXPR_TYPES:
            found.append((key, None, cast(_AnyJaxpr, value)))  # its type is one of them
        elif (
            type(value) is tuple
            and value
            and value[0].__class__ in _JAXPR_TYPES  # (most tuples are shapes: one check)
            and all(type(v) in _JAXPR_TYPES for v in value)
        ):
            found.extend((key, i, cast(_AnyJaxpr, v)) for i, v in enumerate(value))
    if len(found) > 1:
        found.sort(key=lambda item: item[0])
    return found


_AnyJaxpr = jex.ClosedJaxpr | jex.Jaxpr
_JAXPR_TYPES = frozenset({jex.ClosedJaxpr, jex.Jaxpr})


def child_blocks(node: Node) -> tuple[Block, ...]:
    """The blocks directly under `node`: a module call's body, an equation's regions."""
    if isinstance(node, ModuleCall):
        return (node.body,)
    if isinstance(node, Equation):
        return tuple(region.block for region in node.regions)
    if isinstance(node, Mox):
        return (node.block,)
    return ()


def iter_nodes(block: Block) -> Iterator[Node]:
    """Every node under `block` in document order (regions of equations included).

    Iterative: as deep as the model nests, without Python recursion.
    """
    stack: list[Iterator[Node]] = [iter(block.nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        yield node
        stack.extend(iter(b.nodes) for b in reversed(child_blocks(node)))
