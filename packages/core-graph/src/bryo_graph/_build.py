"""Build a graph from a GraphDef and its State leaves by walking the GraphDef's entries.

This is how `merge` builds a graph the first times it sees a GraphDef: one iterative walk
over the entries (no recursion, so graphs of any depth build), with no set-up cost and no
allocation beyond the graph itself. A GraphDef merged again and again is compiled into
straight-line Python (`_compile`), which is faster per call but costs far more once.

Both builders follow the same rules: mutable nodes are created before their children
(so a child may refer back to them: cycles), immutable ones after (from their rebuilt
children); a `RefEntry` is the object built for its index; Variables are made from their
State leaves by `variable_of` (a Variable leaf is put into the graph as it is).

An update context's outer merge (`_update_context`) builds with `known` objects (what a
`RefEntry` may name beyond the GraphDef) and `reuse`d ones: a mutable node or Variable
whose index is in `reuse` is the existing object, updated in place, not a new one.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from bryo_plugins import TypeTable
from bryo_pytree import Key, Path, path_str, unwrap_hashable

from ._compat import is_ref
from ._entries import Entry, LeafEntry, NodeEntry, RefEntry, StaticEntry, VariableEntry
from ._errors import GraphError
from ._nodes import NodeType, node_callback_failed
from ._variables import NO_METADATA, Variable, store

_new = object.__new__


def variable_of(leaf: object, variable_type: type[Variable]) -> Variable:
    """The Variable a State leaf puts into the graph: the leaf itself when it is a Variable
    (Flax NNX 0.12's merge), else a new `variable_type` Variable around the raw value."""
    if isinstance(leaf, Variable):
        return leaf
    variable = _new(variable_type)
    store(variable, leaf, NO_METADATA)
    return variable


def write_variable(variable: Variable, leaf: object) -> None:
    """Write a State leaf (a Variable or a raw value) into a live `variable`, in place."""
    if leaf is variable:
        return
    if isinstance(leaf, Variable):
        variable.copy_from(leaf)  # a ref-backed Variable takes the value into its ref
    elif is_ref(current := variable.raw_value):
        current[...] = leaf[...] if is_ref(leaf) else leaf  # type: ignore[index]  # a ref
    else:
        variable.set_raw_value(leaf)


def leaf_value(leaf: object) -> object:
    """The raw value a State leaf holds for an array leaf of the graph."""
    return leaf.raw_value if isinstance(leaf, Variable) else leaf


def unknown_node_type(cls: type, path: Path) -> GraphError:
    """The error for a GraphDef node whose type no backend registers (any more)."""
    return GraphError(
        f"no backend registers the node type {cls.__qualname__} found at {path_str(path)}; "
        "import the plugin that defines it before merging."
    )


def cycle_through_immutable(path: Path) -> GraphError:
    """The error for a reference to an immutable node that is still being built."""
    return GraphError(
        f"the node at {path_str(path)} refers back to a node still being built; cycles may "
        "only go through mutable nodes."
    )


class _Frame:
    """A node whose children are being built."""

    __slots__ = ("entry", "items", "key", "node", "node_type", "reused")

    def __init__(
        self, entry: NodeEntry, node_type: NodeType, node: object, key: Key, reused: bool = False
    ) -> None:
        self.entry = entry
        self.node_type = node_type
        self.node = node  # None until built, for immutable nodes
        self.key = key
        self.reused = reused  # `node` is a live node to update in place
        self.items: list[tuple[Key, object]] = []


class BuiltGraph:
    """The result of `build_graph`: the new root, how deep the GraphDef's nodes nest, and
    the objects built (or put in) by GraphDef index (`known`, when the caller gave it)."""

    __slots__ = ("built", "depth", "root")

    def __init__(self, root: object, depth: int, built: dict[int, object]) -> None:
        self.root = root
        self.depth = depth
        self.built = built


def build_graph(
    root: Entry,
    leaves: Sequence[object],
    registry: TypeTable,
    *,
    recreate_variables: bool = True,
    known: dict[int, object] | None = None,
    reuse: Mapping[int, object] | None = None,
) -> BuiltGraph:
    """A new graph from the GraphDef entry `root` and State leaves in GraphDef order.

    A raw value where the GraphDef has a Variable becomes a Variable of its type, unless
    `recreate_variables=False` (then the raw value itself goes in its place). `known`, when
    given, holds the objects built so far by index and receives this build's (a
    `RefEntry` may name one built by an earlier call); a mutable node or Variable whose
    index is in `reuse` is that live object, updated in place (the caller checked types).
    """
    built: dict[int, object] = {} if known is None else known
    if type(root) is RefEntry:  # a graph met whole by an earlier call of the same context
        return BuiltGraph(built[root.index], 0, built)
    if type(root) is not NodeEntry:  # a graph of one bare Variable or array
        if type(root) is VariableEntry and not recreate_variables:
            return BuiltGraph(leaves[0], 0, built)
        value = _bare_leaf(root, leaves)
        if type(root) is VariableEntry:
            value = _reused_variable(value, root.index, reuse)  # type: ignore[arg-type]  # a Variable
            built[root.index] = value
        return BuiltGraph(value, 0, built)
    position = 0
    stack = [_open(root, registry, built, (), reuse=reuse)]
    depth = 1
    while True:
        frame = stack[-1]
        children = frame.entry.children
        items = frame.items
        count = len(children)
        index = len(items)
        while index < count:
            key, child = children[index]
            if type(child) is VariableEntry:
                value = leaves[position]
                position += 1
                if recreate_variables and not isinstance(value, Variable):
                    value = variable_of(value, child.type)
                if reuse is not None:
                    value = _reused_variable(value, child.index, reuse)
                built[child.index] = value
            elif type(child) is StaticEntry:
                value = unwrap_hashable(child.value)
            elif type(child) is LeafEntry:
                value = leaf_value(leaves[position])
                position += 1
                if child.index is not None:  # a raw ref: later references share it
                    built[child.index] = value
            elif type(child) is RefEntry:
                value = built.get(child.index, _MISSING)
                if value is _MISSING:
                    raise cycle_through_immutable(_path(stack, key))
            else:  # a NodeEntry: descend
                break
            items.append((key, value))
            index += 1
        else:
            stack.pop()
            node = _close(frame, built, stack)
            if not stack:
                return BuiltGraph(node, depth, built)
            stack[-1].items.append((frame.key, node))
            continue
        stack.append(_open(child, registry, built, key, stack, reuse))
        depth = max(depth, len(stack))


_MISSING = object()


def _reused_variable(value: object, index: int, reuse: Mapping[int, object] | None) -> object:
    """The live Variable `reuse` holds at `index`, updated to `value`; else `value`."""
    live = reuse.get(index) if reuse is not None else None
    if not isinstance(live, Variable):
        return value
    write_variable(live, value)
    return live


def _bare_leaf(root: Entry, leaves: Sequence[object]) -> object:
    if type(root) is VariableEntry:
        return variable_of(leaves[0], root.type)
    if type(root) is LeafEntry:
        return leaf_value(leaves[0])
    return unwrap_hashable(root.value)  # type: ignore[union-attr]  # a StaticEntry root


def _path(stack: list[_Frame], key: Key | None = None) -> Path:
    keys = [frame.key for frame in stack[1:]]
    return (*keys, key) if key is not None else tuple(keys)


def _open(
    entry: NodeEntry,
    registry: TypeTable,
    built: dict[int, object],
    key: Key,
    stack: list[_Frame] | None = None,
    reuse: Mapping[int, object] | None = None,
) -> _Frame:
    """Start building the node of `entry`: mutable nodes are created now (or reused)."""
    node_type = registry.lookup(entry.type)
    if node_type is None:
        raise unknown_node_type(entry.type, _path(stack or [], key) if stack else ())
    if reuse is not None and node_type.create is not None and entry.index in reuse:
        node = built[entry.index] = reuse[entry.index]
        return _Frame(entry, node_type, node, key, reused=True)
    node = None
    if node_type.create is not None:
        try:
            node = node_type.create(entry.type, entry.aux)
        except Exception as error:
            node_callback_failed(node_type, "create", _rebuilding(stack, key), error=error)
        if node is None:
            node_callback_failed(node_type, "create", _rebuilding(stack, key), returned="None")
        built[entry.index] = node
    return _Frame(entry, node_type, node, key)


def _rebuilding(stack: list[_Frame] | None, key: Key) -> str:
    path = _path(stack, key) if stack else ()
    return f"while rebuilding the node at {path_str(path)}"


def _close(frame: _Frame, built: dict[int, object], stack: list[_Frame]) -> object:
    """Finish the node of `frame` from its built children (`stack`: its ancestors')."""
    node_type, items = frame.node_type, frame.items
    node = frame.node
    try:
        if frame.reused:
            _update_in_place(node, node_type, frame.entry.aux, items)
        elif node is None:
            entry = frame.entry
            node = node_type.unflatten(entry.type, entry.aux, items)  # type: ignore[misc]  # immutable: has unflatten
            if node is None:
                where = _rebuilding(stack, frame.key)
                node_callback_failed(node_type, "unflatten", where, returned="None")
            built[entry.index] = node
        elif node_type.init_items is not None:
            node_type.init_items(node, items)
        else:
            init_key = node_type.init_key or node_type.set_key
            for key, child in items:
                init_key(node, key, child)  # type: ignore[misc]  # mutable: has one of them
    except Exception as error:
        if isinstance(error, GraphError):  # bryo's own (or a function's, named)
            raise
        node_callback_failed(
            node_type, _closing(frame, node_type), _rebuilding(stack, frame.key), error=error
        )
    return node


def _closing(frame: _Frame, node_type: NodeType) -> str:
    """The function of `node_type` that finishing `frame`'s node called (for an error)."""
    if frame.reused:
        return "set_key" if node_type.set_key is not None else "init_key"
    if frame.node is None:
        return "unflatten"
    return "init_items" if node_type.init_items is not None else "init_key"


def _update_in_place(
    node: object, node_type: NodeType, aux: Hashable, items: list[tuple[Key, object]]
) -> None:
    """Make a live mutable node's aux `aux` and its children `items`: stale keys go, the
    rest are set."""
    keep = {key for key, _ in items}
    stale = [key for key, _ in node_type.flatten(node)[0] if key not in keep]
    if stale and node_type.pop_key is None:
        raise GraphError(
            f"cannot update the {type(node).__name__} in place: its children "
            f"{', '.join(map(repr, stale))} went away and its node type cannot remove children."
        )
    for key in stale:
        node_type.pop_key(node, key)  # type: ignore[misc]  # checked above
    if node_type.set_aux is not None:
        node_type.set_aux(node, aux)
    set_key = node_type.set_key or node_type.init_key
    for key, child in items:
        set_key(node, key, child)  # type: ignore[misc]  # mutable: has one of them
