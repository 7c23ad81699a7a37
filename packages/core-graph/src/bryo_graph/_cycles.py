"""Tree mode's cycle check: an iterative walk before JAX's recursive flatten.

`jax.tree_util` flattens recursively in C++: a graph with a cycle (`a.append(b)` where
`b` holds `a`) exhausts the recursion limit, and on JAX 0.10 the `RecursionError` leaves
the interpreter unable to flatten anything afterwards. So tree mode walks the pytree
first, without recursion, along the same children JAX would flatten, and raises Flax NNX
0.12's "Cycle detected ... found at paths" error naming both paths.

The walk is cached: a tracked node (`Object`, `List`, `Dict`) at the top of a walk keeps
the proof that it is acyclic until one of the tracked nodes below it changes (the same
change tracking that expires cached flattenings), so checking an unchanged model again
costs a dict lookup. A subtree reaching an untracked mutable container (a plain list or
dict, a custom pytree) is not cached, as its changes go unseen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from bryo_pytree import Key, Path

from ._fields import ATOMIC
from ._nodes import is_leaf_treedef, pytree_flatten
from ._object import _ACYCLIC, Dict, List, Object, data_items
from ._tracking import Watch, watch_all, write_count
from ._variables import Variable

_LEAVES = (Variable, Object, jax.Array, np.ndarray, np.generic)  # Object: of a non-pytree class

Children = Iterator[tuple[Key, Any]]


class _Proof:
    """That a tracked node's subtree had no cycle: valid while its watches are."""

    __slots__ = ("watches",)

    def __init__(self, watches: tuple[Watch, ...]) -> None:
        self.watches = watches

    def is_valid(self) -> bool:
        return all(watch.is_valid() for watch in self.watches)


class _Root:
    """The walk of one top tracked node: what a proof for it must watch."""

    __slots__ = ("cacheable", "node", "proofs", "tracked", "writes")

    def __init__(self, node: object) -> None:
        self.node = node
        self.tracked: list[object] = [node]
        self.proofs: list[_Proof] = []  # proofs of subtrees it skipped
        self.cacheable = True
        self.writes = write_count()

    def remember(self) -> None:
        """Cache the proof on the node, if no write raced the walk."""
        if not self.cacheable:
            return
        watch = Watch()
        if not watch_all(watch, self.tracked) or write_count() != self.writes + 1:
            return
        watches = (watch, *(w for proof in self.proofs for w in proof.watches))
        vars(self.node)[_ACYCLIC] = _Proof(watches)


class CycleFound(Exception):
    """A cycle: the type of the node met twice and the two paths it was met at."""

    def __init__(self, node: object, first: Path, second: Path) -> None:
        super().__init__(type(node).__name__, first, second)
        self.node = node
        self.first = first
        self.second = second


def _proof(node: object) -> _Proof | None:
    proof = vars(node).get(_ACYCLIC)
    return proof if proof is not None and proof.is_valid() else None


def _is_tracked(value: object) -> bool:
    """Whether `value` is a tracked node JAX flattens: a List, a Dict or an Object of a
    pytree class (an Object of a non-pytree class is a leaf to JAX)."""
    if isinstance(value, Object):
        return type(value)._object__pytree
    return isinstance(value, (List, Dict))


def _untracked_children(value: object) -> Children | None:
    """The children of an untracked value JAX would flatten further, or None for a leaf."""
    if type(value) in ATOMIC or isinstance(value, _LEAVES):
        return None
    if type(value) in (tuple, list):
        return enumerate(value)  # type: ignore[arg-type]  # a tuple or list (checked)
    if type(value) is dict:
        return iter(value.items())
    children, treedef = pytree_flatten(value)
    if is_leaf_treedef(treedef):
        return None
    return iter(children)


def check_acyclic(node: object) -> None:
    """Raise `CycleFound` if JAX flattening `node` would meet a node inside itself."""
    in_progress: dict[int, Path] = {}
    done: set[int] = set()
    stack: list[tuple[object, Path, Children]] = []
    root: _Root | None = None

    def seen(value: object, path: Path) -> bool:
        """Whether `value`'s walk is done; raises `CycleFound` if it is under way."""
        key = id(value)
        if key in in_progress:
            raise CycleFound(value, in_progress[key], path)
        return key in done

    def enter(value: object, path: Path) -> None:
        nonlocal root
        if _is_tracked(value):
            if seen(value, path):
                return
            proof = _proof(value)  # before data_items: an unchanged model costs a lookup
            if proof is not None:
                done.add(id(value))
                if root is not None:
                    root.proofs.append(proof)
                return
            children: Children = iter(data_items(value))  # type: ignore[arg-type]  # a tracked node (checked above)
            if root is None:
                root = _Root(value)
            else:
                root.tracked.append(value)
        else:
            untracked = _untracked_children(value)
            if untracked is None or seen(value, path):
                return
            children = untracked
            if root is not None and type(value) is not tuple:
                root.cacheable = False  # a plain list or dict, or a custom pytree
        in_progress[id(value)] = path
        stack.append((value, path, children))

    enter(node, ())
    while stack:
        value, path, children = stack[-1]
        for key, child in children:
            enter(child, (*path, key))
            break
        else:
            stack.pop()
            del in_progress[id(value)]
            done.add(id(value))
            if root is not None and root.node is value:
                root.remember()
                root = None
