"""Change tracking: which cached flattenings a write to one node expires.

A cached flattening holds a `Watch`, valid until one of the nodes it read changes. After
walking a graph, `watch_all` registers the watch on every tracked node and Variable of
the walk; a write to one of them (`structure_changed(node)`) expires the watches
registered on that node, and only those: a write to a module that no cached flattening
contains costs a counter increment and a dict lookup.

Writes are also counted, so a flattening knows whether a write happened anywhere while
it walked the graph (another thread changing the model): then its watch is born expired.
`structure_changed()` with no node expires every watch, for backends that cannot say
which node changed.

The supported ways to change a tracked node are the ones that report it: attribute
assignment and deletion on an `Object`, the methods of `List` and `Dict`, a Variable's
metadata setters. Writing through `vars(node)` / `node.__dict__` or `object.__setattr__`
bypasses them: call `structure_changed(node)` afterwards (or `clear_caches()`).
"""

from __future__ import annotations

import itertools
import threading
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

WATCHES = "_object__watches"
"""The attribute (a `__dict__` entry, or a slot) where a tracked node keeps its watches."""
TREEDEF = "_object__treedef"
"""An Object's cached pytree node data (see `_object`), made from its attributes: every
reported change drops it."""
FLATTENED = "_object__flattened"
"""An Object's cached pytree flattening, `(children, treedef node)` (see `_object`): every
reported change drops it with the treedef."""

_lock = threading.Lock()  # guards every node's list of watches
_writes = itertools.count()  # `next` is atomic: one tick per reported write
_epoch = [0]  # bumped by `structure_changed()` without a node: every watch expires
_PRUNE_AT = 8  # a node's list of watches is pruned of expired ones past this length


class Watch:
    """The validity of one cached flattening: valid until a node it read changes."""

    __slots__ = ("epoch", "valid")

    def __init__(self) -> None:
        self.valid = True
        self.epoch = _epoch[0]

    def is_valid(self) -> bool:
        """Whether no node of the flattening changed since it was made."""
        return self.valid and self.epoch == _epoch[0]

    def expire(self) -> None:
        """Mark the flattening stale (its cache entry was dropped, or a node changed)."""
        self.valid = False


class GuardedWatch(Watch):
    """The `Watch` of a flattening holding nodes whose type has an `unchanged` check (a
    node that can change without telling bryo, as an `eqx.nn.State` that Equinox empties):
    valid until a node it read changes, or one of those checks says no.

    Each guard is `(unchanged, node)`; the root of a cached flattening is held through a
    weak reference (a cache never keeps its root alive). `failed(unchanged, node, error)`
    raises the error for a check that raised (it names the backend)."""

    __slots__ = ("failed", "guards")

    def __init__(
        self,
        guards: list[tuple[Callable[[Any], bool], object]],
        failed: Callable[[Callable[[Any], bool], object, Exception], None],
    ) -> None:
        super().__init__()
        self.guards = guards
        self.failed = failed

    def is_valid(self) -> bool:
        """Whether no node of the flattening changed since it was made (checks included)."""
        if not (self.valid and self.epoch == _epoch[0]):
            return False
        for unchanged, node in self.guards:
            if type(node) is weakref.ref:
                node = node()
                if node is None:  # the root is gone: so is its cache entry
                    self.valid = False
                    return False
            try:
                if not unchanged(node):
                    self.valid = False
                    return False
            except Exception as error:
                self.failed(unchanged, node, error)
                raise
        return True


def write_count() -> int:
    """A new tick of the write counter: compare two to see whether writes happened between."""
    return next(_writes)


def structure_changed(node: object = None) -> None:
    """Tell bryo that `node` changed structure: the cached flattenings containing it expire.

    Called by tracked nodes on every structural change (an attribute set or deleted, a
    `List`/`Dict` item set, added or removed, a Variable's metadata changed). Without a
    node, every cached flattening expires.
    """
    if node is None:
        next(_writes)
        _epoch[0] += 1
        return
    namespace = getattr(node, "__dict__", None)
    if namespace is not None:
        changed_in(namespace)
        return
    next(_writes)
    if _get_watches(node):
        expire_watches(node)


def changed_in(namespace: dict) -> None:
    """`structure_changed` for a node whose `__dict__` is `namespace` (the fast path of
    `Object`, `List` and `Dict`)."""
    next(_writes)
    namespace.pop(TREEDEF, None)
    namespace.pop(FLATTENED, None)
    if namespace.get(WATCHES):
        with _lock:
            watches = namespace.pop(WATCHES, None)
            for watch in watches or ():
                watch.valid = False


def expire_watches(node: object) -> None:
    """Expire every watch registered on `node` and forget them."""
    with _lock:
        watches = _get_watches(node)
        if not watches:
            return
        for watch in watches:
            watch.valid = False
        _set_watches(node, None)


def watch_all(watch: Watch, nodes: Iterable[object]) -> bool:
    """Register `watch` on every node of `nodes`; False (nothing registered) if one of them
    cannot keep watches (a tracked node of a backend without `__dict__` or the slot)."""
    with _lock:
        for node in nodes:
            cls = type(node)
            if cls.__dictoffset__ and type(namespace := getattr(node, "__dict__", None)) is dict:
                watches = namespace.get(WATCHES)  # (the common case, inline: an Object)
                if watches is None:
                    namespace[WATCHES] = [watch]
                    continue
            else:
                slot = _slot_of(cls)
                if slot is None:
                    return False
                try:
                    watches = slot.__get__(node, cls)
                except AttributeError:  # the slot was never set
                    watches = None
                if watches is None:
                    slot.__set__(node, [watch])
                    continue
            if len(watches) >= _PRUNE_AT:
                watches[:] = [w for w in watches if w.valid]
            watches.append(watch)
    return True


# How a node keeps its watches: in its `__dict__` (an `Object`, `List`, `Dict`), else in
# the `WATCHES` slot its class declares (a Variable). Told apart by the class, which is
# cheaper than trying `node.__dict__`: a Variable's `__getattr__` runs on a miss.
_MemberDescriptor = types.MemberDescriptorType


def _slot_of(cls: type) -> types.MemberDescriptorType | None:
    slot = getattr(cls, WATCHES, None)
    return slot if type(slot) is _MemberDescriptor else None


def _get_watches(node: object) -> list[Watch] | None:
    cls = type(node)
    if cls.__dictoffset__:
        try:
            return node.__dict__.get(WATCHES)
        except AttributeError:  # (a class hiding its `__dict__`)
            pass
    slot = _slot_of(cls)
    if slot is None:
        return None
    try:
        return slot.__get__(node, cls)
    except AttributeError:  # the slot was never set
        return None


def _set_watches(node: object, watches: list[Watch] | None) -> None:
    cls = type(node)
    if cls.__dictoffset__:
        try:
            namespace = node.__dict__
        except AttributeError:
            pass
        else:
            if watches is None:
                namespace.pop(WATCHES, None)
            else:
                namespace[WATCHES] = watches
            return
    slot = _slot_of(cls)
    if slot is None:
        object.__setattr__(node, WATCHES, watches)  # (raises: nowhere to keep them)
    else:
        slot.__set__(node, watches)
