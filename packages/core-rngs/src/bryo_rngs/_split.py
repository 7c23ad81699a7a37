"""Split the rng streams of a graph in place, and put them back: the lifted transforms' primitive.

`split_rngs_in_place(model, {'dropout': 5})` turns the key of every matching stream into
5 keys (key and count of shape `(5,)`) so that a `vmap` or `scan` over axis 0 gives each
step its own stream; `restore_rngs(token)` puts the streams back afterwards. Three rules
keep this safe:

* The split keys come from a draw, so the stream's count advances by one first: keys
  handed out inside never come back after the restore, and splitting twice never
  repeats itself.
* Only the matching streams are touched. Streams left out of the mapping keep their key
  and their count, and draws from them inside (and their count) are kept on restore.
* Restoring writes back only streams that still hold the split keys. Anything that put a
  stream back in between (a `reseed`, an inner restore) is not clobbered. Layers built
  inside (e.g. a stack of Dropouts made by a vmapped constructor) hold streams *forked*
  from the split ones, so the restore cannot turn their stacked keys back into one key and
  break a later `scan` over the stack.

`split_rngs` and `fork_rngs` do the same around a call, as decorators of the lifted
transforms (`@split_rngs(splits=5)` over a `vmap`) or as context managers on a node.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from bryo_filters import Filter
from bryo_graph import clone, iter_graph, set_graph_mode, set_graph_updates
from bryo_pytree import Path

from ._rngs import NO_MATCH, RngStream, Splits, draw_keys, first_match, split_keys, split_rules

F = TypeVar("F", bound=Callable[..., Any])


def iter_streams(node: object, /) -> Iterator[tuple[Path, RngStream]]:
    """Every `RngStream` in `node`'s graph with its path, each once."""
    for path, value in iter_graph(node):
        if isinstance(value, RngStream):
            yield path, value


@dataclasses.dataclass
class _Backup:
    path: Path
    stream: RngStream
    key: jax.Array
    count: jax.Array
    split_shape: tuple[int, ...]


class RngSplit:
    """What `split_rngs_in_place` did, to undo with `restore_rngs` (or a `with` block).

    Attributes:
        paths: the paths of the streams that were split, in graph order.
    """

    def __init__(self, backups: list[_Backup]) -> None:
        self._backups = backups
        self.restored = False

    @property
    def paths(self) -> list[Path]:
        return [backup.path for backup in self._backups]

    def __enter__(self) -> RngSplit:
        return self

    def __exit__(self, *exc_info: object) -> None:
        restore_rngs(self)

    def __repr__(self) -> str:
        state = "restored" if self.restored else "active"
        return f"RngSplit({state}, paths={self.paths})"


def split_rngs_in_place(
    node: object, /, splits: Splits | Mapping[Filter, Splits], *, only: Filter = ...
) -> RngSplit:
    """Split the keys of the streams in `node` that match, in place.

    Each matching stream draws one key (its count advances by one), splits it into
    `splits` keys and holds those, with a zero count of the same shape, until
    `restore_rngs`. Use the result as a context manager to restore on exit.

    Args:
        node: any graph (a Module, an `Rngs`, a list or dict of them).
        splits: an int `n` (or a shape) for every stream `only` selects, or a mapping
            `{filter: n}`: each stream takes the `n` of the first filter selecting it (by
            stream name, `{'dropout': 5}`, or any filter on its key and count); a value of
            `None` forks the stream into one fresh key without splitting. Streams no
            filter selects are left exactly as they are.
        only: with an int `splits`, which streams to split (all by default).

    Returns:
        The token to pass to `restore_rngs`.

    Example:
        >>> from bryo_rngs import Rngs, restore_rngs
        >>> rngs = Rngs(params=0, dropout=1)
        >>> token = split_rngs_in_place(rngs, {'dropout': 5})
        >>> rngs.dropout.key.value.shape, rngs.params.key.value.shape  # vmap over axis 0 here
        ((5,), ())
        >>> restore_rngs(token)
        >>> rngs.dropout.key.value.shape
        ()
    """
    rules = split_rules(splits, only)
    plan = []
    for path, stream in iter_streams(node):
        matched = first_match(rules, path, stream)
        if matched is not NO_MATCH:
            plan.append((path, stream, matched))
    backups = []
    for path, stream, matched in plan:
        key = stream.key.value
        drawn = draw_keys(stream)
        new_key = drawn if matched is None else split_keys(drawn, matched)
        backups.append(_Backup(path, stream, key, stream.count.value, tuple(new_key.shape)))
        stream.key.value = new_key
        stream.count.value = jnp.zeros(new_key.shape, jnp.uint32)
    return RngSplit(backups)


def restore_rngs(token: RngSplit, /) -> None:
    """Put back the streams `split_rngs_in_place` split: their key, and their count
    (as it was after the split's draw). A second call does nothing.

    A stream that no longer holds split keys of the shape the split gave it was put back
    by something else in between (`reseed`, another restore) and is left alone.
    """
    if token.restored:
        return
    for backup in reversed(token._backups):
        stream = backup.stream
        if tuple(stream.key.value.shape) != backup.split_shape:
            continue
        stream.key.value = backup.key
        stream.count.value = backup.count
    token.restored = True


# Around a call -------------------------------------------------------------------------

_MISSING = object()


def split_rngs(
    node: object = _MISSING,
    /,
    *,
    splits: Splits | Mapping[Filter, Any],
    only: Filter = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Split the rng streams of `node` (or, as a decorator, of each call's arguments).

    The streams `only` selects (or those a `{filter: n}` mapping names) hold `n` keys
    (key and count of shape `(n,)`) until the call returns or the `with` block ends, so
    that a `vmap` or `scan` over axis 0 gives each element its own keys. Streams left out
    are not touched: their keys and counts carry on.

    Args:
        node: a graph holding `Rngs` (a module, an `Rngs`); leave it out to get a decorator.
        splits: an int or shape, or a mapping `{filter: n}` (`{'dropout': 5}`).
        only: with an int `splits`, the streams to split (all by default).
        squeeze: with `splits=1`, give each stream one fresh key of its own shape instead
            of a leading axis of size 1.
        graph: with `graph_updates` both True (the default unless `set_graph_mode`/
            `set_graph_updates` say otherwise) split `node`'s streams in place; otherwise
            `node` is left alone and a copy with split streams is returned (in tree mode
            with `graph=False`), and the decorator calls the function with such copies.
        graph_updates: see `graph`.

    Returns:
        In place: with `node`, the `RngSplit` token (a context manager restoring the
        streams); without, a decorator. Otherwise the copy, or a decorator.

    Example:
        >>> @split_rngs(splits=5)                                   # doctest: +SKIP
        ... @vmap(in_axes=(0,), out_axes=StateAxes({...: 0}))
        ... def create(rngs):
        ...     return Model(rngs)
    """
    if squeeze:
        if splits != 1:
            raise ValueError(f"`squeeze=True` needs `splits=1`; got splits={splits!r}.")
        splits = None  # a fresh key without a new axis
    return _apply(
        node, lambda target: split_rngs_in_place(target, splits, only=only), graph, graph_updates
    )


def fork_rngs(
    node: object = _MISSING,
    /,
    *,
    split: object = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Fork every rng stream of `node` (or of each call's arguments), splitting some.

    Each stream gets a fresh key drawn from it (its count moves on, so nothing repeats);
    the streams `split` names get `n` keys. The streams are put back when the call
    returns or the `with` block ends.

    Args:
        node: a graph holding `Rngs`; leave it out to get a decorator.
        split: None (fork all, split none), an int or shape (split all), or a mapping
            `{filter: n}` (split those, fork the others).
        graph: in place (with `graph_updates` both True, the default) or on a copy, as
            for `split_rngs`.
        graph_updates: see `graph`.

    Returns:
        In place: with `node`, the `RngSplit` token (a context manager); without, a
        decorator. Otherwise the forked copy, or a decorator.

    Example:
        >>> @fork_rngs(split={'dropout': 5})                       # doctest: +SKIP
        ... @vmap(in_axes=(StateAxes({'dropout': 0, ...: None}), None))
        ... def sample(model, x):
        ...     return model(x)
    """
    rules = _fork_rules(split)
    return _apply(node, lambda target: split_rngs_in_place(target, rules), graph, graph_updates)


def _apply(
    node: object,
    split: Callable[[object], RngSplit],
    graph: bool | None,
    graph_updates: bool | None,
) -> Any:
    """`split` on `node` in place (a token), or on a copy (the copy); a decorator that
    does the same to each call's arguments when `node` is left out."""
    graph = set_graph_mode.current_value() if graph is None else graph
    updates = set_graph_updates.current_value() if graph_updates is None else graph_updates
    in_place = graph and updates

    def on_copy(target: object) -> object:
        copy = clone(target, graph=graph)
        split(copy)
        return copy

    if node is not _MISSING:
        return split(node) if in_place else on_copy(node)
    if in_place:
        return _around_calls(split)

    def decorator(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = on_copy((args, kwargs))  # type: ignore[misc]  # on_copy returns a copy of its (args, kwargs) pair
            return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)

    return decorator


def _fork_rules(split: object) -> dict:
    if split is None:
        return {...: None}
    if isinstance(split, Mapping):
        rules = dict(split)
        rules.setdefault(..., None)
        return rules
    return {...: split}


def _around_calls(split: Callable[[object], RngSplit]) -> Callable[[F], F]:
    def decorator(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with split((args, kwargs)):
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)

    return decorator
