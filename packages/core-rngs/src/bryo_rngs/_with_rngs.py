"""`with_rngs`: a copy of a graph whose rng streams are split, broadcast or forked.

Unlike `split_rngs`/`fork_rngs`, which change the streams of a graph in place until a
call returns, `with_rngs` leaves the graph's structure alone and returns a copy (new
nodes, the original's Variables) in which each selected stream is replaced by a new
one: `split` gives it `n` independent keys, `broadcast` its next key repeated `n`
times, `fork` one fresh key. Each replaced stream draws once from the original, so the
original's count moves on and its past keys never come back. The copy is what a
`vmap`/`scan` over the streams, or a `jax.vmap` in tree mode, is given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from bryo_filters import Filter, to_predicate
from bryo_graph import iter_graph, recursive_map
from bryo_pytree import Path

from ._rngs import NO_MATCH, RngStream, Splits, split_rules, stream_matches

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])

_MISSING: Any = object()


class _Rule(NamedTuple):
    """One of `with_rngs`' three rules: what it does, the user's filters, their splits."""

    action: str
    filters: tuple[object, ...]
    rules: list


def _shape_rules(name: str, value: Splits | Mapping[Filter, Splits]) -> _Rule:
    if value is None:
        return _Rule(name, (), [])
    filters = tuple(value) if isinstance(value, Mapping) else (...,)
    for splits in value.values() if isinstance(value, Mapping) else [value]:
        if splits is None:
            raise ValueError(
                f"`with_rngs({name}=...)` takes an int or a tuple of ints per filter; got "
                f"None. Leave the stream out of `{name}` instead."
            )
    return _Rule(name, filters, split_rules(value))


def _fork_rule(fork: Filter | Sequence[Filter] | None) -> _Rule:
    if fork is None:
        return _Rule("fork", (), [])
    filters = tuple(fork) if isinstance(fork, list | tuple) else (fork,)
    return _Rule("fork", filters, [(to_predicate(f), True) for f in filters])


def _matching(rule: _Rule, path: Path, stream: RngStream) -> tuple[object, object]:
    """`(filter, splits)` of the first filter of `rule` selecting `stream`, or NO_MATCH."""
    for filter, (predicate, splits) in zip(rule.filters, rule.rules, strict=True):
        if stream_matches(predicate, path, stream):
            return filter, splits
    return NO_MATCH, None


def _is_catch_all(filter: object) -> bool:
    return filter is Ellipsis or filter is True


def with_rngs(
    node: Any = _MISSING,
    /,
    *,
    split: Splits | Mapping[Filter, Splits] = None,
    fork: Filter | Sequence[Filter] | None = None,
    broadcast: Splits | Mapping[Filter, Splits] = None,
    only: Filter = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """A copy of `node` whose rng streams are split, broadcast or forked (or, without
    `node`, a decorator doing that to each call's arguments).

    A stream takes the first rule whose filters select it, in the order `split`,
    `broadcast`, `fork` (as Flax); two rules selecting it through filters other than
    `...`/True are an error. Streams no rule selects keep `node`'s Variables.

    Args:
        node: a graph holding rng streams (an `Rngs`, a module, a tuple of them).
        split: an int or shape (every stream), or `{filter: n}`: those streams hold `n`
            independent keys (key and count of shape `n`).
        fork: a filter or a sequence of them: those streams get one fresh key each.
        broadcast: as `split`, but every slice holds the same key.
        only: the streams to consider at all (every stream by default).
        graph: graph mode (shared references stay shared in the copy) or tree mode, as
            for `clone`.
        graph_updates: accepted for Flax's signature; the result is always a copy.

    Returns:
        The copy (new nodes, `node`'s Variables for everything not replaced), or the
        decorator.

    Raises:
        ValueError: a stream selected by two rules through filters naming it (not
            `...`), or a `None` split size.

    Example:
        >>> from bryo_rngs import Rngs
        >>> rngs = Rngs(params=0, dropout=1)
        >>> split = with_rngs(rngs, split={'params': 4}, fork='dropout')
        >>> split.params.key.value.shape, split.dropout.key.value.shape
        ((4,), ())
    """
    del graph_updates
    if node is _MISSING:
        options = {"split": split, "fork": fork, "broadcast": broadcast, "only": only}
        return _decorator(functools.partial(with_rngs, graph=graph, **options))
    rules = [_shape_rules("split", split), _shape_rules("broadcast", broadcast), _fork_rule(fork)]
    keep = to_predicate(only)

    def decide(path: Path, stream: RngStream) -> tuple[_Rule, object] | None:
        if not stream_matches(keep, path, stream):
            return None
        found = [(rule, *_matching(rule, path, stream)) for rule in rules]
        found = [(rule, filter, splits) for rule, filter, splits in found if filter is not NO_MATCH]
        named = [(rule, filter) for rule, filter, _ in found if not _is_catch_all(filter)]
        if len(named) > 1:
            lines = "; ".join(f"`{rule.action}` by filter {filter!r}" for rule, filter in named)
            raise ValueError(
                f"`with_rngs`: the rng stream at {path!r} is selected by multiple rules "
                f"({lines}); give it one rule only."
            )
        return (found[0][0], found[0][2]) if found else None

    for path, value in iter_graph(node, graph=graph):  # every error before any draw
        if isinstance(value, RngStream):
            decide(path, value)

    def replace(path: Path, value: object) -> object:
        decision = decide(path, value) if isinstance(value, RngStream) else None
        if decision is None:
            return value
        rule, splits = decision
        if rule.action == "split":
            return value.split(splits)  # type: ignore[union-attr, arg-type]  # decide() returns a decision only for RngStreams; splits checked by the rule
        if rule.action == "broadcast":
            return value.broadcast(splits)  # type: ignore[union-attr, arg-type]  # decide() returns a decision only for RngStreams; splits checked by the rule
        return value.fork()  # type: ignore[union-attr]  # decide() returns a decision only for RngStreams

    return recursive_map(replace, node, graph=graph)


def _decorator(transform: Callable[[object], Any]) -> Callable[[F], F]:
    def decorator(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = transform((args, kwargs))
            return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # the wrapper has f's signature (functools.wraps)

    return decorator
