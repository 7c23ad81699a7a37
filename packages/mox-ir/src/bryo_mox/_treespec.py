"""`TreeSpec`: a pytree's structure as a MoX file records it, paths and node kinds.

A traced MoX keeps the `PyTreeDef`s of its arguments and result. A file cannot: a treedef
of a model (an NNX `State`, an Equinox module) names classes, and reading a file must not
import or call anything it names. So a file writes each node's kind (`tuple`, `dict`,
`bryo_nnx.State`, `equinox.nn.Linear`, `*` for an array leaf, `~` for a static one)
and the key that leads to it from its parent, the steps of `jax.tree_util.keystr`:

    tuple([0]=bryo_nnx.State(['layers']=...), [1]=*)

A MoX loaded from such a file checks the arguments it is given against the spec (the
text of their structure must be the same) and names the first path that differs; its
result is rebuilt from the spec, a node of another kind than a tuple, list, dict or
`None` taking the treedef of an argument subtree with the same spec (a model's new
`State`, an Equinox `State`). A spec does not hold a node's static data (a Haliax
NamedArray's axes, an Equinox module's static fields): when arguments hold several
subtrees of one spec that differ there, a result node of that spec is refused, never
given another node's static data. Walks and parsing are iterative: specs of any depth
work.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import numpy as np

from bryo_pytree import BoundedCache, PyTreeDef

from ._errors import MoxError

ARRAY = "*"
STATIC = "~"
_BUILTIN_KINDS: dict[type, str] = {tuple: "tuple", list: "list", dict: "dict", type(None): "None"}
#: Characters a kind may not hold (they delimit the text): replaced by `_`.
_KIND_UNSAFE = re.compile(r"[\s(),=\[\]'\"]")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<key>(?:\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]'"]*)\]|\.[^\s.\[(),=]+)+)=
    )?(?P<kind>[^\s(),=\[\]'"]+)(?P<open>\()?\s*(?P<close>\)*)\s*(?P<comma>,)?""",
    re.VERBOSE,
)


#: The treedefs of argument subtrees by their spec text; `None` where several differ.
Known = dict[str, "PyTreeDef | None"]

#: Specs parsed lately, by their text: a model's files (its checkpoints, a file loaded
#: again) repeat one spec, whose parse costs a few percent of loading a 32-block
#: transformer. Bounded in entries and in the length of the texts kept (4M characters in
#: all); a spec is immutable and holds no user object, so loads may share it.
PARSED: BoundedCache[TreeSpec] = BoundedCache(16)
MAX_PARSED_TEXT = 1 << 18


#: A named array's axes (a Haliax or `bryo.hax` NamedArray keeps them as its static data)
#: are written after its kind, `haliax.core.NamedArray{Pos:6;Embed:8}`, so a loaded MoX
#: checks them and rebuilds a result of other axes. Names of other characters are not.
_AXIS_NAME = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_AXIS_SIZE = re.compile(r"[0-9]{1,18}\Z")
# `PyTreeDef.from_node_data_and_children` (jax 0.8 and later; before, no such result is
# rebuilt)
_FROM_NODE_DATA = getattr(
    type(jax.tree_util.tree_structure(0)), "from_node_data_and_children", None
)


class SpecNode(NamedTuple):
    """One node of a spec, in pre-order.

    Attributes:
        key: the step from its parent (`[0]`, `['w']`, `.value`); `""` for the root.
        kind: `*`, `~`, `tuple`, `list`, `dict`, `None` or a qualified type name.
        arity: the number of its children.
        start: where its own text (kind onwards) starts in the spec's text.
        end: where its text ends (after its children).
    """

    key: str
    kind: str
    arity: int
    start: int
    end: int


@dataclass(frozen=True)
class TreeSpec:
    """A pytree structure as paths and node kinds (see the module docstring).

    Attributes:
        text: the spec as files write it.
    """

    text: str
    nodes: tuple[SpecNode, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> TreeSpec:
        """The spec `text` writes. Raises `MoxError` naming the position of a malformed
        text; work and memory are linear in its length."""
        if not isinstance(text, str):
            raise MoxError(f"a tree spec must be a text, got {type(text).__name__}.")
        shared = cls is TreeSpec and len(text) <= MAX_PARSED_TEXT
        found = PARSED.get(text) if shared else None
        if found is None:
            found = cls._parse(text)
            if shared:
                PARSED.put(text, found)
        return found

    @classmethod
    def _parse(cls, text: str) -> TreeSpec:
        """`parse` without the cache."""
        nodes: list[list[Any]] = []  # [key, kind, arity, start, end]
        open_nodes: list[int] = []  # indices of the nodes whose children are being read
        position, length = 0, len(text)
        while True:
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise MoxError(f"the tree spec is malformed at character {position + 1}.")
            key, kind = match.group("key") or "", match.group("kind")
            if open_nodes:
                nodes[open_nodes[-1]][2] += 1
                if not key:
                    raise MoxError(f"the tree spec lacks a key at character {position + 1}.")
            elif nodes:
                raise MoxError(f"the tree spec has two roots (character {position + 1}).")
            index = len(nodes)
            nodes.append([key, kind, 0, match.start("kind"), match.end("kind")])
            if match.group("open"):
                if kind in (ARRAY, STATIC):
                    raise MoxError(f"a leaf of the tree spec has children ({position + 1}).")
                open_nodes.append(index)
            closes = match.group("close")
            for offset, _ in enumerate(closes):
                if not open_nodes:
                    raise MoxError(f"the tree spec closes too often ({match.start('close')}).")
                nodes[open_nodes.pop()][4] = match.start("close") + offset + 1
            position = match.end()
            if position >= length:
                break
            if not match.group("comma") and not open_nodes:
                raise MoxError(f"the tree spec has text after its end ({position + 1}).")
        if open_nodes:
            raise MoxError("the tree spec ends inside a node: a `)` is missing.")
        return cls(text, tuple(SpecNode(*n) for n in nodes))

    @classmethod
    def of(cls, treedef: PyTreeDef, static: Sequence[int] = ()) -> TreeSpec | None:
        """The spec of `treedef` (leaves at the positions `static` marked static), or
        `None` when its keys cannot be found (a node that does not rebuild from
        placeholder leaves)."""
        # placeholders that are arrays: some nodes keep only array leaves as children
        placeholders = [np.zeros((), np.int8) for _ in range(treedef.num_leaves)]
        try:
            example = treedef.unflatten(placeholders)
            paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(example)[0]]
        except Exception:  # a custom node that checks its leaves: no spec
            return None
        if len(paths) != treedef.num_leaves:
            return None
        return cls.parse(spec_text(treedef, paths, frozenset(static))[0])

    @property
    def leaf_kinds(self) -> list[str]:
        """`*` or `~` for each leaf, in flattening order."""
        return [n.kind for n in self.nodes if n.kind in (ARRAY, STATIC)]

    @property
    def static_positions(self) -> list[int]:
        """The positions of the static leaves among all leaves."""
        return [i for i, kind in enumerate(self.leaf_kinds) if kind == STATIC]

    def paths(self) -> list[str]:
        """The full path of each node (pre-order), keys joined: `[0]['layers'][1].w`."""
        out: list[str] = []
        stack: list[tuple[str, int]] = []  # (path, children left)
        for node in self.nodes:
            while stack and stack[-1][1] == 0:
                stack.pop()
            prefix = ""
            if stack:
                prefix, left = stack[-1]
                stack[-1] = (prefix, left - 1)
            path = prefix + node.key
            out.append(path)
            if node.arity:
                stack.append((path, node.arity))
        return out

    def difference(self, other: TreeSpec) -> tuple[str, str, str]:
        """The first node where `other` differs: `(path, other's kind, this one's)`."""
        mine, theirs = self.paths(), other.paths()
        for index in range(max(len(mine), len(theirs))):
            a = (mine[index], self.nodes[index][1:3]) if index < len(mine) else None
            b = (theirs[index], other.nodes[index][1:3]) if index < len(theirs) else None
            if a != b:
                if a is None:
                    assert b is not None
                    return b[0], _describe(b[1]), "nothing"
                if b is None:
                    return a[0], "nothing", _describe(a[1])
                if a[0] != b[0]:  # a different key under the same parent
                    parent = self._parent_path(index, mine)
                    step_b, step_a = b[0][len(parent) :], a[0][len(parent) :]
                    return parent, f"a child `{step_b}`", f"a child `{step_a}` there"
                return a[0], _describe(b[1]), _describe(a[1])
        return "", "the same", "the same"

    def _parent_path(self, index: int, paths: list[str]) -> str:
        """The path of the parent of node `index` (paths: `self.paths()`)."""
        depth = 0
        for earlier in range(index - 1, -1, -1):
            depth -= self.nodes[earlier].arity  # each earlier sibling subtree nets out
            depth += 1
            if depth <= 0 and self.nodes[earlier].arity:
                return paths[earlier]
        return ""

    def build(self, leaves: Sequence[Any], known: Known) -> Any:
        """The tree of this spec holding `leaves` (as many as its leaves): tuples, lists,
        dicts and `None` as they are; a node of another kind from `known`, the treedefs of
        argument subtrees by their spec text.

        Raises:
            MoxError: a node's kind is neither built in nor in `known`, or `known` has
                several treedefs for its text (`None`).
        """
        values = iter(leaves)
        paths = self.paths()
        # (node index, its children's values, their key steps) of the nodes being built
        stack: list[tuple[int, list[Any], list[str]]] = []
        for index, node in enumerate(self.nodes):
            if node.kind in (ARRAY, STATIC):
                value: Any = next(values)
            elif node.arity:
                stack.append((index, [], []))
                continue
            else:
                value = None if node.kind == "None" else self._node(index, [], [], known, paths)
            key = node.key
            while stack:
                parent, children, keys = stack[-1]
                children.append(value)
                keys.append(key)
                if len(children) < self.nodes[parent].arity:
                    break
                stack.pop()
                value = self._node(parent, children, keys, known, paths)
                key = self.nodes[parent].key
            if not stack:
                unresolved = _first_unresolved(value)
                if unresolved is not None:
                    raise MoxError(unresolved.message)
                return value
        raise MoxError("the tree spec has no root.")  # pragma: no cover  -- parse makes one

    def _node(
        self,
        index: int,
        children: list[Any],
        keys: list[str],
        known: Known,
        paths: list[str],
    ) -> Any:
        node = self.nodes[index]
        if node.kind == "tuple":
            return tuple(children)
        if node.kind == "list":
            return children
        if node.kind == "dict":
            return dict(zip(map(_dict_key, keys), children, strict=True))
        text = self.text[node.start : node.end]
        treedef = known.get(text)
        if treedef is None:  # a named array of axes no argument has
            treedef = _with_axes(node.kind, text, known)
        if treedef is not None:  # (its leaves: unresolved nodes inside give theirs)
            return treedef.unflatten(jax.tree_util.tree_leaves(children))
        # Unresolved, unless a node around it is resolved (an Equinox module's layers of
        # one class that differ in static fields, inside the one module of its spec).
        first = _first_unresolved(children)
        if first is not None:
            message = first.message
        elif text in known:
            message = (
                f"the result at `{paths[index] or 'the root'}` is a `{node.kind}`: a loaded "
                "MoX rebuilds such a node from an argument of the same structure, but the "
                "arguments hold several that differ in what a file does not record (their "
                "static data: a NamedArray's axes, a module's static fields), so it cannot "
                "tell which one the result is. Evaluate the traced MoX (not one loaded from "
                "a file), or return arrays (a NamedArray's `.array`)."
            )
        else:
            message = (
                f"the result at `{paths[index] or 'the root'}` is a `{node.kind}`: a loaded "
                "MoX rebuilds such a node only from an argument of the same structure (the "
                "same spec), and no argument has one."
            )
        return _Unresolved(jax.tree_util.tree_leaves(children), message)


@jax.tree_util.register_pytree_node_class
class _Unresolved:
    """A result node `TreeSpec.build` could not rebuild (yet): its leaves, and the error
    to raise unless a node around it is rebuilt from an argument's treedef."""

    def __init__(self, leaves: list[Any], message: str) -> None:
        self.leaves, self.message = leaves, message

    def tree_flatten(self) -> tuple[list[Any], str]:
        return self.leaves, self.message

    @classmethod
    def tree_unflatten(cls, message: str, leaves: list[Any]) -> _Unresolved:
        return cls(list(leaves), message)


def _axes_text(aux: object) -> str:
    """`{Pos:6;Embed:8}` when `aux` is a non-empty tuple of axes (dataclasses with a
    string `name` and an int `size`: a named array's static data), else `""`."""
    if type(aux) is not tuple or not aux:
        return ""
    parts = []
    for axis in aux:
        name, size = getattr(axis, "name", None), getattr(axis, "size", None)
        if not (
            dataclasses.is_dataclass(axis)
            and isinstance(name, str)
            and _AXIS_NAME.match(name)
            and type(size) is int
        ):
            return ""
        parts.append(f"{name}:{size}")
    return "{" + ";".join(parts) + "}"


def _with_axes(kind: str, text: str, known: Known) -> PyTreeDef | None:
    """The treedef of a named array of the axes `kind` writes (`…NamedArray{Pos:6}`),
    made from an argument's named array of the same class and children with the axes
    replaced (`dataclasses.replace` of that argument's first axis: nothing the file names
    is imported or called); None when there is none, or this jax cannot make it."""
    base, brace, axes = kind.partition("{")
    if not brace or not axes.endswith("}") or _FROM_NODE_DATA is None:
        return None
    pairs = [part.rpartition(":") for part in axes[:-1].split(";")]
    if not all(_AXIS_NAME.match(n) and sep and _AXIS_SIZE.match(z) for n, sep, z in pairs):
        return None
    children = text[len(kind) :]
    for other, tree in known.items():
        if tree is None or not other.startswith(base + "{"):
            continue
        if other[other.find("}") + 1 :] != children:
            continue
        cls, aux = tree.node_data()
        try:
            new = tuple(dataclasses.replace(aux[0], name=n, size=int(z)) for n, _, z in pairs)
            return _FROM_NODE_DATA(jax.tree_util.default_registry, (cls, new), tree.children())
        except Exception:  # an axis class that cannot be remade so: no rebuild
            return None
    return None


def _is_unresolved(value: object) -> bool:
    return isinstance(value, _Unresolved)


def _first_unresolved(tree: Any) -> _Unresolved | None:
    """The first `_Unresolved` node in `tree` (built-in containers of them), or None."""
    for leaf in jax.tree_util.tree_leaves(tree, is_leaf=_is_unresolved):
        if isinstance(leaf, _Unresolved):
            return leaf
    return None


def _dict_key(step: str) -> Any:
    """The key of a dict's child from its step (`['w']`, `[3]`): a string or an int."""
    import ast

    try:
        key = ast.literal_eval(step[1:-1]) if step.startswith("[") else None
    except (ValueError, SyntaxError):
        key = None
    if not isinstance(key, (str, int)):
        raise MoxError(f"the dict key step {step!r:.80} of a tree spec is not a string or int.")
    return key


def _describe(kind_arity: tuple[str, int]) -> str:
    kind, arity = kind_arity
    if kind == ARRAY:
        return "an array leaf"
    if kind == STATIC:
        return "a static leaf"
    return f"a `{kind}` of {arity} children"


class _Close(NamedTuple):
    """A node of `spec_text` whose children are written: close it (and, for a node of
    another kind than the built-in ones, record its text from `start`)."""

    tree: PyTreeDef
    start: int
    builtin: bool


def spec_text(
    treedef: PyTreeDef, paths: Sequence[Sequence[Any]], static: frozenset[int] = frozenset()
) -> tuple[str, Known]:
    """The spec text of `treedef` whose leaves have key `paths`, and the treedefs of its
    subtrees of other kinds than tuples, lists, dicts and `None` by their text (the
    `known` of `TreeSpec.build`; `None` for a text of several different treedefs)."""
    out: list[str] = []
    known: Known = {}
    # (treedef, key step, depth) to write, or a `_Close` of a node whose children are
    stack: list[tuple[PyTreeDef, str, int] | _Close] = [(treedef, "", 0)]
    leaf = 0
    while stack:
        item = stack.pop()
        if isinstance(item, _Close):
            out.append(")")
            if not item.builtin:
                _know(known, "".join(out[item.start :]), item.tree)
            continue
        tree, key, depth = item
        if out and out[-1] != "(":
            out.append(", ")
        if key:
            out.append(f"{key}=")
        data = tree.node_data()
        if data is None:  # a leaf
            out.append(STATIC if leaf in static else ARRAY)
            leaf += 1
            continue
        kind, builtin = _kind(data[0]), data[0] in _BUILTIN_KINDS
        if not builtin:
            kind += _axes_text(data[1])
        children = tree.children()
        start = len(out)
        out.append(kind)
        if not children:
            if kind != "None":
                out.append("()")
                if not builtin:
                    _know(known, kind + "()", tree)
            continue
        out.append("(")
        stack.append(_Close(tree, start, builtin))
        # the children's leaves are counted as they are written (pre-order): `leaf` is
        # this node's first
        keys = _child_keys(data, children, paths, depth, leaf)
        stack.extend((c, k, depth + 1) for c, k in reversed(list(zip(children, keys, strict=True))))
    return "".join(out), known


def _know(known: Known, text: str, tree: PyTreeDef) -> None:
    """Record `tree` as the treedef of spec `text`; `None` once two differ."""
    if text not in known:
        known[text] = tree
        return
    seen = known[text]
    try:
        same = seen is not None and (seen is tree or bool(seen == tree))
    except Exception:  # aux data that cannot say whether it is equal: not the same
        same = False
    if not same:
        known[text] = None


def _child_keys(
    data: tuple[type, Any],
    children: Sequence[PyTreeDef],
    paths: Sequence[Sequence[Any]],
    depth: int,
    first: int,
) -> list[str]:
    """The key step of each child: from the path of its first leaf, else (a child without
    leaves) from the node (a dict's keys, a sequence's index)."""
    keys = []
    leaf = first
    for index, child in enumerate(children):
        if child.num_leaves and leaf < len(paths) and depth < len(paths[leaf]):
            keys.append(jax.tree_util.keystr((paths[leaf][depth],)))
        elif data[0] is dict and isinstance(data[1], (list, tuple)):
            keys.append(f"[{data[1][index]!r}]")
        else:
            keys.append(f"[{index}]")
        leaf += child.num_leaves
    return keys


def _kind(node_type: type) -> str:
    builtin = _BUILTIN_KINDS.get(node_type)
    if builtin is not None:
        return builtin
    return _KIND_UNSAFE.sub("_", f"{node_type.__module__}.{node_type.__qualname__}")
