"""`Rngs` and `RngStream`: named streams of PRNG keys, held as model state.

A stream keeps a root `key` and a `count` in two Variables (`RngKey`, `RngCount`). Each
draw returns `fold_in(key, count)` and adds one to the count, so a stream never hands out
the same key twice, and because both live in Variables, the count travels through
`split`/`merge`, `jax.jit` and bryo's lifted transforms like any other state. `Rngs`
gathers streams by name, with an optional `default` stream for names it does not have.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from bryo_filters import Filter, Predicate, to_predicate
from bryo_graph import Object, TraceContextError, current_trace, in_its_trace
from bryo_pytree import Path, is_array

from ._variables import RngCount, RngKey

RngValue: TypeAlias = int | jax.Array
"""What a stream can be seeded with: an int seed or a `jax.random.key` array."""

Splits: TypeAlias = int | tuple[int, ...] | None
"""How to split a stream's key: into `n` keys, into an array of keys of that shape, or
not at all (`None`: fork into one new key)."""

DEFAULT = "default"


class UnknownStreamError(AttributeError, KeyError):
    """An rng stream was asked for by a name the `Rngs` lacks, and it has no default."""

    def __str__(self) -> str:
        return str(self.args[0])


class RngTraceError(TraceContextError):
    """A stream was drawn from inside a JAX trace it does not belong to (an `Rngs` made
    outside a `jax.jit` and captured by the jitted function): its count would end up
    holding a tracer of that trace."""


def as_key(value: object, *, name: str) -> jax.Array:
    """`value` as a typed key array: int seeds become `jax.random.key(seed)`.

    Raw `uint32` key data (`jax.random.PRNGKey(0)`) is wrapped; typed keys are kept.
    """
    if isinstance(value, bool):
        pass
    elif isinstance(value, int | np.integer):
        return jax.random.key(value)
    elif is_array(value):
        dtype = value.dtype
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            return value  # type: ignore[return-value]  # a typed key array (checked above) is a jax.Array
        if dtype == jnp.uint32 and value.shape[-1:] == (2,):
            return jax.random.wrap_key_data(jnp.asarray(value))
        if jnp.issubdtype(dtype, jnp.integer) and value.ndim == 0:
            return jax.random.key(jnp.asarray(value))
    raise TypeError(
        f"the seed of rng stream `{name}` must be an int or a `jax.random.key(...)` array; "
        f"got {type(value).__name__}: {value!r:.80}."
    )


class RandomMethods:
    """The `jax.random` samplers as methods: `rngs.normal((2, 3))` draws a key first.

    Each method takes `jax.random`'s arguments without the key; the key comes from
    `self()` (a stream's next key; on `Rngs`, the default stream's).
    """

    def __call__(self) -> jax.Array:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


_SAMPLERS = (
    "ball",
    "bernoulli",
    "beta",
    "binomial",
    "bits",
    "categorical",
    "cauchy",
    "chisquare",
    "choice",
    "dirichlet",
    "double_sided_maxwell",
    "exponential",
    "f",
    "gamma",
    "generalized_normal",
    "geometric",
    "gumbel",
    "laplace",
    "loggamma",
    "logistic",
    "lognormal",
    "maxwell",
    "multinomial",
    "multivariate_normal",
    "normal",
    "orthogonal",
    "pareto",
    "permutation",
    "poisson",
    "rademacher",
    "randint",
    "rayleigh",
    "t",
    "triangular",
    "truncated_normal",
    "uniform",
    "wald",
    "weibull_min",
)


def _sampler_method(name: str) -> Callable[..., jax.Array]:
    function = getattr(jax.random, name)

    def method(self: RandomMethods, *args: object, **kwargs: object) -> jax.Array:
        return function(self(), *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"`jax.random.{name}` with a key drawn from this stream (on `Rngs`, from the "
        f"default stream): the same arguments, without `key`."
    )
    return method


SAMPLER_NAMES = tuple(name for name in _SAMPLERS if hasattr(jax.random, name))
for _name in SAMPLER_NAMES:
    setattr(RandomMethods, _name, _sampler_method(_name))

# `jax.nn.initializers` constructors whose names no sampler takes (Flax's list).
_INITIALIZERS = (
    "delta_orthogonal",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
)


def _initializer_method(name: str) -> Callable[..., Callable[..., jax.Array]]:
    constructor = getattr(jax.nn.initializers, name)

    def method(self: RandomMethods, *args: object, **kwargs: object) -> Callable[..., jax.Array]:
        init = constructor(*args, **kwargs)

        def keyless(*init_args: object, **init_kwargs: object) -> jax.Array:
            return init(self(), *init_args, **init_kwargs)

        return keyless

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"`jax.nn.initializers.{name}(...)` without its key argument: the initializer it "
        "returns takes `(shape, dtype)` and draws its key from this stream when called."
    )
    return method


INITIALIZER_NAMES = tuple(name for name in _INITIALIZERS if hasattr(jax.nn.initializers, name))
for _name in INITIALIZER_NAMES:
    setattr(RandomMethods, _name, _initializer_method(_name))


class RngStream(RandomMethods, Object):
    """One stream of keys: `stream()` returns `fold_in(key, count)`, then count += 1.

    >>> stream = RngStream(0, tag="dropout")
    >>> k0, k1 = stream(), stream()
    >>> int(stream.count.value)
    2

    Attributes:
        key: the root key, an `RngKey` Variable (never changed by drawing).
        count: the number of keys drawn, an `RngCount` Variable (`uint32`, key-shaped).
        tag: the stream's name, also the `tag` of both Variables.
    """

    def __init__(self, key: RngValue, *, tag: str, count: object = None) -> None:
        key = as_key(key, name=tag)
        if count is None:
            count = jnp.zeros(key.shape, jnp.uint32)
        self.tag = tag
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.asarray(count, jnp.uint32), tag=tag)

    def __call__(self) -> jax.Array:
        """The next key of this stream; adds one to `count`."""
        check_trace(self)
        # get_value/set_value rather than `.value`: a tracer of a hijax Variable (an
        # `Rngs` of them under a plain `jax.jit`) forwards methods, not attribute writes
        key = self.key.get_value()
        if key.ndim != 0:
            raise ValueError(
                f"rng stream {self.tag!r} holds split keys of shape {tuple(key.shape)}, so it "
                "cannot hand out a single key here. Draw from it inside a transform that maps "
                f"over those axes (e.g. `vmap` with `StateAxes({{{self.tag!r}: 0, ...: None}})`), "
                "or draw before splitting."
            )
        count = self.count.get_value()
        self.count.set_value(count + 1)
        return jax.random.fold_in(key, count)

    def fork(self, split: Splits = None, *, tag: str | None = None) -> RngStream:
        """A new, independent stream whose key is drawn from this one.

        Args:
            split: `None` for one key; an int `n` (or a shape) for a stream of `n` split
                keys whose key and count have that leading shape (for `vmap`/`scan`). A
                stream already split to shape `S` forks to `S`, or `(n, *S)` when split.
            tag: the new stream's name; this stream's by default.

        Returns:
            The new stream (count zero). This stream's count advances by one.

        `split` is deprecated, as in Flax NNX 0.12 (it warns): use `split(n)`.
        """
        if split is not None:
            _warn_fork_split()
        return _forked(self, split, tag)

    def split(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream holding `k` keys split from this stream's next key (key and count
        of shape `k`, for `vmap`/`scan` over them). This stream's count advances by one."""
        return RngStream(split_keys(draw_keys(self), _split_shape(k, self.tag)), tag=self.tag)

    def broadcast(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream holding this stream's next key repeated `k` times (shape
        `(*k, *key.shape)`): every slice draws the same keys. The count advances by one."""
        shape = _split_shape(k, self.tag)
        key = draw_keys(self)
        return RngStream(jnp.broadcast_to(key, (*shape, *key.shape)), tag=self.tag)


#: Flax NNX 0.12's words for `fork(split=...)` (`Rngs.fork`, `RngStream.fork`).
FORK_SPLIT_DEPRECATED = (
    "The 'split' argument of 'fork' is deprecated; use the 'split' method instead."
)


def _warn_fork_split() -> None:
    """Warn, as Flax NNX 0.12 does, that `fork(split=...)` (called by the user: the
    warning points at the caller of `fork`) is deprecated."""
    warnings.warn(FORK_SPLIT_DEPRECATED, DeprecationWarning, stacklevel=3)


def _forked(stream: RngStream, split: Splits, tag: str | None) -> RngStream:
    """`stream.fork(split, tag=tag)`, without the deprecation warning."""
    key = draw_keys(stream)
    if split is not None:
        key = split_keys(key, split)
    return RngStream(key, tag=stream.tag if tag is None else tag)


def check_trace(stream: RngStream) -> None:
    """Raise `RngTraceError` if drawing from `stream` now would leak a tracer into it:
    the stream holds a concrete count and belongs to another trace than the running one.
    (A count that is already a tracer of the running trace was put there by whoever
    traces the stream, such as a lifted transform or `make_mox`, which also takes the new
    count back out. A tracer of another trace is one a stream made inside a `jax.jit`
    kept after it returned: refused, as Flax refuses it.)"""
    count = stream.count.raw_value
    if (isinstance(count, Tracer) and _of_running_trace(count)) or in_its_trace(stream):
        return
    raise RngTraceError(
        f"Cannot mutate RngCount from a different trace level: rng stream {stream.tag!r} "
        "belongs to another JAX trace: it was made outside the "
        "`jax.jit` (or `vmap`, `grad`, ...) being traced, and the function uses it from its "
        "closure. Drawing a key here would store a traced count in it and leave it broken "
        "after the call. Pass the `Rngs` (or the module holding it) as an argument of the "
        "transformed function: `jax.jit(f)(model, rngs)` (changes to its count then stay "
        "inside; return it to keep them), or use bryo's `nnx.jit`, which writes them back."
    )


def _of_running_trace(tracer: Tracer) -> bool:
    """Whether `tracer` belongs to the JAX trace running now. (JAX names a tracer's trace
    only privately, `Tracer._trace`; where that is missing, every tracer counts.)"""
    trace = getattr(tracer, "_trace", None)
    return trace is None or weakref.ref(trace) == current_trace()


def draw_keys(stream: RngStream) -> jax.Array:
    """A key from every key of `stream` (of any shape), each from its own count."""
    key, count = stream.key.get_value(), stream.count.get_value()
    if key.ndim == 0:
        return stream()
    check_trace(stream)
    flat = jax.vmap(jax.random.fold_in)(key.reshape(-1), count.reshape(-1).astype(jnp.uint32))
    stream.count.set_value(count + 1)
    return flat.reshape(key.shape)


def split_keys(keys: jax.Array, splits: int | tuple[int, ...]) -> jax.Array:
    """Split each of `keys` into `splits`; the new axes go in front: `(*splits, *keys.shape)`."""
    shape = splits if isinstance(splits, tuple) else (splits,)
    if keys.ndim == 0:
        return jax.random.split(keys, shape)
    flat = jax.vmap(lambda k: jax.random.split(k, shape))(keys.reshape(-1))
    stacked = flat.reshape(*keys.shape, *shape)
    new_axes = list(range(keys.ndim, keys.ndim + len(shape)))
    return jnp.moveaxis(stacked, new_axes, list(range(len(shape))))


# Names that probe for arrays or Variables; an Rngs must not answer them with a stream.
_NOT_STREAM_NAMES = frozenset(
    {"shape", "dtype", "ndim", "size", "aval", "value", "raw_value", "type"}
)


class Rngs(RandomMethods, Object):
    """Named rng streams, with `default` as the fallback for names not given.

    >>> rngs = Rngs(0, params=1)        # default stream from seed 0, params from seed 1
    >>> params_key = rngs.params()      # or rngs['params']()
    >>> dropout_key = rngs.dropout()    # no dropout stream: drawn from the default one
    >>> z = rngs.normal((2, 3))         # jax.random.normal with a default-stream key

    Args:
        default: seed or key of the `default` stream (optional, positional only).
        **streams: one stream per keyword: an int seed, a `jax.random.key` array, or an
            `RngStream` (its key and count are copied, so its sequence continues).
    """

    def __init__(
        self, default: RngValue | RngStream | None = None, /, **streams: RngValue | RngStream
    ) -> None:
        if default is not None:
            if DEFAULT in streams:
                raise TypeError(
                    "`Rngs` got the default stream twice: as the first argument and as "
                    "`default=`; pass it once."
                )
            streams = {DEFAULT: default, **streams}
        for name in streams:
            _check_stream_name(name)
        built = {name: _to_stream(value, name) for name, value in streams.items()}
        for name, stream in built.items():
            setattr(self, name, stream)

    # Streams by name --------------------------------------------------------------------
    def __getattr__(self, name: str) -> RngStream:
        if name.startswith("_") or name in _NOT_STREAM_NAMES:
            raise AttributeError(name)
        return self.stream(name)

    def __getitem__(self, name: str) -> RngStream:
        return self.stream(name)

    def stream(self, name: str) -> RngStream:
        """The stream `name`, or the default stream when there is none by that name.

        Raises:
            UnknownStreamError: neither exists; the message lists the streams there are.
        """
        streams = vars(self)
        found = streams.get(name)
        if isinstance(found, RngStream):
            return found
        default = streams.get(DEFAULT)
        if isinstance(default, RngStream):
            return default
        names = ", ".join(repr(n) for n in self) or "none"
        raise UnknownStreamError(
            f"No RngStream named {name!r} in this Rngs, and no {DEFAULT!r} stream to fall back on; "
            f"its streams are {names}. Give it one (`Rngs(..., {name}=0)`) or a default seed "
            "as the first argument (`Rngs(0, ...)`)."
        )

    def __call__(self) -> jax.Array:
        """The next key of the default stream."""
        return self.stream(DEFAULT)()

    def __contains__(self, name: object) -> bool:
        return isinstance(vars(self).get(name), RngStream)  # type: ignore[arg-type]  # a non-str name is simply not found

    def __iter__(self) -> Iterator[str]:
        return iter(
            sorted(name for name, value in vars(self).items() if isinstance(value, RngStream))
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> Iterator[tuple[str, RngStream]]:
        """`(name, stream)` pairs."""
        return ((name, vars(self)[name]) for name in list(self))

    # Forking ----------------------------------------------------------------------------
    def fork(self, *, split: Splits | Mapping[Filter, Splits] = None) -> Rngs:
        """A new Rngs whose streams are forked from these: independent keys, count zero.

        Args:
            split: `None` forks every stream into one key; an int (or shape) splits every
                stream's key into that many; a mapping `{filter: n}` splits the streams the
                first matching filter selects (by stream name, as in `{'dropout': 5}`) and
                forks the others unsplit. A stream whose key is split has key and count of
                shape `(n,)`: map over it with `vmap` or `scan`.

        Returns:
            The new Rngs. Each of these streams' counts advances by one, so forking twice
            never gives the same keys.

        `split` is deprecated, as in Flax NNX 0.12 (it warns): use `split(n)`.
        """
        if split is not None:
            _warn_fork_split()
        rules = split_rules(split)
        forked = {}
        for name, stream in self.items():
            matched = first_match(rules, (name,), stream)
            forked[name] = _forked(stream, None if matched is NO_MATCH else matched, None)  # type: ignore[arg-type]  # split_rules checked each rule's splits (_check_splits)
        new = object.__new__(Rngs)
        for name, stream in forked.items():
            setattr(new, name, stream)
        return new

    def split(self, k: Splits | Mapping[Filter, Splits]) -> Rngs:
        """A new Rngs whose selected streams hold split keys (`RngStream.split`).

        Args:
            k: an int (or shape) splits every stream; a mapping `{filter: n}` splits the
                streams the first matching filter selects into `n` (None: left unsplit),
                e.g. `rngs.split({'params': 5, ...: None})`.

        Returns:
            The new Rngs. Unselected streams are copied (same key, same count); each split
            stream's count here advances by one.
        """
        return self._derive(k, RngStream.split)

    def broadcast(self, k: Splits | Mapping[Filter, Splits]) -> Rngs:
        """A new Rngs whose selected streams hold their next key repeated `k` times
        (`RngStream.broadcast`); `k` as for `split`."""
        return self._derive(k, RngStream.broadcast)

    def _derive(
        self,
        k: Splits | Mapping[Filter, Splits],
        make: Callable[[RngStream, int | tuple[int, ...]], RngStream],
    ) -> Rngs:
        rules = split_rules(k)
        derived = {}
        for name, stream in self.items():
            matched = first_match(rules, (name,), stream)
            if matched is NO_MATCH or matched is None:
                derived[name] = _to_stream(stream, name)
            else:
                derived[name] = make(stream, matched)  # type: ignore[arg-type]  # split_rules checked each rule's splits (_check_splits)
        new = object.__new__(Rngs)
        for name, stream in derived.items():
            setattr(new, name, stream)
        return new


def _check_stream_name(name: str) -> None:
    if name.startswith("_") or hasattr(Rngs, name) or name in _NOT_STREAM_NAMES:
        raise ValueError(
            f"rng stream name {name!r} is reserved: it starts with '_' or is an attribute of "
            "`Rngs` (a method or jax.random shorthand); pick another name."
        )


def _to_stream(value: RngValue | RngStream, name: str) -> RngStream:
    if isinstance(value, RngStream):
        # Keep the count: restarting it would hand out the stream's past keys again.
        return RngStream(value.key.value, tag=name, count=value.count.value)
    return RngStream(value, tag=name)


# Split rules, shared by `fork` and the in-place split ------------------------------------

NO_MATCH = object()


def split_rules(
    split: Splits | Mapping[Filter, Splits], only: Filter = ...
) -> list[tuple[Predicate, Splits]]:
    """`split` as `[(predicate, splits), ...]`, checked. An int or shape applies to `only`."""
    if split is None:
        return []
    items = split.items() if isinstance(split, Mapping) else [(only, split)]
    rules = []
    for filter, splits in items:
        _check_splits(splits, filter)
        rules.append((to_predicate(filter), splits))
    return rules


def _split_shape(k: object, tag: str) -> tuple[int, ...]:
    shape = k if isinstance(k, tuple) else (k,)
    if shape and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        return shape  # type: ignore[return-value]  # all entries checked to be positive ints just above
    raise ValueError(
        f"splitting or broadcasting rng stream {tag!r} needs a positive int or a tuple of "
        f"them (the new leading shape of its key); got {k!r}."
    )


def _check_splits(splits: object, filter: object) -> None:
    shape = splits if isinstance(splits, tuple) else (splits,)
    if splits is None or all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape
    ):
        return
    raise ValueError(
        f"`split` must be a positive int, a tuple of them, or None (no split); got {splits!r} "
        f"for filter {filter!r}."
    )


def stream_matches(predicate: Predicate, path: Path, stream: RngStream) -> bool:
    """Whether `predicate` selects `stream` (at `path`): it must accept its key and count."""
    return predicate((*path, "key"), stream.key) and predicate((*path, "count"), stream.count)


def first_match(rules: list[tuple[Predicate, Splits]], path: Path, stream: RngStream) -> object:
    """The splits of the first rule selecting `stream`, or `NO_MATCH`."""
    for predicate, splits in rules:
        if stream_matches(predicate, path, stream):
            return splits
    return NO_MATCH
