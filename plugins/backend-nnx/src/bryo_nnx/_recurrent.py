"""Recurrent layers: the cells `SimpleCell`, `GRUCell`, `LSTMCell`, `OptimizedLSTMCell`, and
`RNN` / `Bidirectional`, which run a cell over a sequence.

A cell maps `(carry, x_t)` to `(new_carry, y_t)`; `cell.initialize_carry(input_shape,
rngs)` makes the first carry (zeros by default, drawn from the `carry` stream). `RNN`
scans a cell along the time axis with `jax.lax.scan` over a pure function of the cell's
state, so the loop compiles once whatever the length: the cell's state is threaded
through the steps (a BatchNorm inside updates its statistics, rng counts advance), and
written back afterwards. Streams selected by `broadcast_rngs` are instead split once per
call and held fixed over the steps, so e.g. a dropout mask is the same at every step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bryo_filters import All, Filter, OfType
from bryo_graph import iter_graph, merge, split, update
from bryo_rngs import Rngs, RngSplit, RngState, RngStream, restore_rngs, split_rngs_in_place
from bryo_transforms import Carry, StateAxes

from . import dtypes, initializers
from ._activations import sigmoid, tanh
from ._common import NO_METADATA, Metadata, OutSharding, RngsArg, fork_stream
from ._linear import Linear, default_bias_init, default_kernel_init
from ._module import Module

CarryState = Any
"""A cell's carry: an array, or a tuple of arrays (LSTM: `(c, h)`)."""

_log = logging.getLogger(__name__)

default_recurrent_kernel_init = initializers.orthogonal()


def modified_orthogonal(
    key: jax.Array,
    shape: Sequence[int],
    dtype: DTypeLike | None = jnp.float32,
    out_sharding: OutSharding | None = None,
) -> jax.Array:
    """An orthogonal matrix computed in float32 and cast to `dtype` (so half precision works);
    an `initializers.Initializer`, so it also takes `out_sharding`."""
    orthogonal = initializers.orthogonal()
    if out_sharding is None:  # the keyword is passed only when given
        return orthogonal(key, shape).astype(dtype)
    return orthogonal(key, shape, out_sharding=out_sharding).astype(dtype)


def _carry_stream(rngs: RngsArg | None, stored: RngStream | None) -> RngStream:
    """The stream carries are drawn from: `rngs`' `carry` stream, `rngs`, or the stored one."""
    rngs = stored if rngs is None else rngs
    if isinstance(rngs, Rngs):
        return rngs.stream("carry")
    if rngs is None:
        raise ValueError(
            "initialize_carry needs random keys: pass `rngs=` (an `nnx.Rngs` or a stream), or "
            "build the cell with `keep_rngs=True`."
        )
    return rngs


class _Inits(NamedTuple):
    """A cell's initializers and Param metadata, as its arguments of the same names."""

    kernel_init: initializers.Initializer
    recurrent_kernel_init: initializers.Initializer
    bias_init: initializers.Initializer
    kernel_metadata: Metadata
    recurrent_kernel_metadata: Metadata
    bias_metadata: Metadata


@dataclasses.dataclass(frozen=True)
class _GateLinears:
    """Makes a cell's `Linear`s: input-side ones (`in_features -> gates * hidden`, with the
    input kernel's init and metadata) and hidden-side ones (`hidden -> gates * hidden`,
    with the recurrent kernel's), each with or without the bias. Call order is rng order."""

    in_features: int
    hidden_features: int
    inits: _Inits
    dtype: jnp.dtype | None
    param_dtype: jnp.dtype
    promote_dtype: dtypes.PromoteDtypeFn
    rngs: RngsArg

    def input(self, gates: int, *, use_bias: bool) -> Linear:
        """The Linear from a step's input to `gates` gates."""
        return self._linear(self.in_features, gates, use_bias, recurrent=False)

    def hidden(self, gates: int, *, use_bias: bool) -> Linear:
        """The Linear from the hidden state to `gates` gates."""
        return self._linear(self.hidden_features, gates, use_bias, recurrent=True)

    def _linear(self, features: int, gates: int, use_bias: bool, *, recurrent: bool) -> Linear:
        inits = self.inits
        return Linear(
            features,
            gates * self.hidden_features,
            use_bias=use_bias,
            kernel_init=inits.recurrent_kernel_init if recurrent else inits.kernel_init,
            kernel_metadata=inits.recurrent_kernel_metadata if recurrent else inits.kernel_metadata,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            promote_dtype=self.promote_dtype,
            bias_init=inits.bias_init,  # used only with use_bias
            bias_metadata=inits.bias_metadata,
            rngs=self.rngs,
        )


class RNNCellBase(Module):
    """The base of recurrent cells, which define `__call__(carry, x) -> (carry, y)`; it gives
    them `initialize_carry` and `num_feature_axes` (the trailing feature axes of `x`, 1).

    Subclasses set `hidden_features`, `param_dtype`, `carry_init` and `rngs` and list how
    many arrays their carry holds in `carry_arrays`.
    """

    carry_arrays: int = 1
    hidden_features: int
    param_dtype: jnp.dtype
    carry_init: initializers.Initializer | None
    rngs: RngStream | None

    def _setup(
        self,
        in_features: int,
        hidden_features: int,
        dtype: jnp.dtype | None,
        param_dtype: jnp.dtype,
        carry_init: initializers.Initializer | None,
        promote_dtype: dtypes.PromoteDtypeFn,
        keep_rngs: bool,
        rngs: RngsArg,
        inits: _Inits,
    ) -> _GateLinears:
        """Store the options every cell has; returns the maker of the cell's Linears."""
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.carry_init = carry_init
        self.promote_dtype = promote_dtype
        self.rngs = fork_stream(rngs, "carry", type(self).__name__) if keep_rngs else None
        return _GateLinears(
            in_features, hidden_features, inits, dtype, param_dtype, promote_dtype, rngs
        )

    def initialize_carry(
        self,
        input_shape: Sequence[int],
        rngs: RngsArg | None = None,
        carry_init: initializers.Initializer | None = None,
    ) -> CarryState:
        """The first carry for inputs of shape `(*batch, features)`: `(*batch, hidden)` arrays.

        Args:
            input_shape: the shape of one step's input.
            rngs: the keys' source (its `carry` stream); default the stream kept with
                `keep_rngs=True`.
            carry_init: the initializer (default: the cell's `carry_init`, else zeros).
        """
        stream = _carry_stream(rngs, self.rngs)
        init = carry_init or self.carry_init or initializers.zeros_init()
        shape = (*tuple(input_shape)[:-1], self.hidden_features)
        arrays = tuple(init(stream(), shape, self.param_dtype) for _ in range(self.carry_arrays))
        return arrays if self.carry_arrays > 1 else arrays[0]

    @property
    def num_feature_axes(self) -> int:
        """The number of trailing feature axes of a step's input."""
        return 1


class LSTMCell(RNNCellBase):
    """Long short-term memory: gates `i, f, o = sigmoid(...)`, `g = tanh(...)`,
    `c' = f * c + i * g`, `h' = o * tanh(c')`; the carry is `(c, h)`, the output `h'`.

    Each gate has an input `Linear` without bias (`ii`, `if_`, `ig`, `io`) and a hidden
    `Linear` with one (`hi`, `hf`, `hg`, `ho`).

    Args:
        in_features, hidden_features: input and hidden sizes.
        gate_fn, activation_fn: the gates' and the output's activations.
        kernel_init, recurrent_kernel_init, bias_init: initializers of the input kernels,
            the hidden kernels (orthogonal) and the biases.
        dtype, param_dtype, promote_dtype: as `Linear`.
        carry_init: the default carry initializer (prefer `initialize_carry(carry_init=)`).
        keep_rngs: keep a stream forked from `rngs['carry']` for `initialize_carry`.
        rngs: initialises the weights (`params` stream).
        kernel_metadata, recurrent_kernel_metadata, bias_metadata: the Params' metadata.
    """

    carry_arrays = 2

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[[jax.Array], jax.Array] = sigmoid,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: initializers.Initializer = default_kernel_init,
        recurrent_kernel_init: initializers.Initializer = modified_orthogonal,
        bias_init: initializers.Initializer = default_bias_init,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        carry_init: initializers.Initializer | None = None,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        recurrent_kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        make = self._setup(
            in_features,
            hidden_features,
            dtype,
            param_dtype,
            carry_init,
            promote_dtype,
            keep_rngs,
            rngs,
            _Inits(
                kernel_init,
                recurrent_kernel_init,
                bias_init,
                kernel_metadata,
                recurrent_kernel_metadata,
                bias_metadata,
            ),
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.ii, self.if_, self.ig, self.io = (make.input(1, use_bias=False) for _ in range(4))
        self.hi, self.hf, self.hg, self.ho = (make.hidden(1, use_bias=True) for _ in range(4))

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        c, h = carry
        i = self.gate_fn(self.ii(inputs) + self.hi(h))
        f = self.gate_fn(self.if_(inputs) + self.hf(h))
        g = self.activation_fn(self.ig(inputs) + self.hg(h))
        o = self.gate_fn(self.io(inputs) + self.ho(h))
        return _lstm_update(c, i, f, g, o, self.activation_fn)


def _lstm_update(
    c: jax.Array,
    i: jax.Array,
    f: jax.Array,
    g: jax.Array,
    o: jax.Array,
    activation_fn: Callable[[jax.Array], jax.Array],
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    new_c = f * c + i * g
    new_h = o * activation_fn(new_c)
    return (new_c, new_h), new_h


class OptimizedLSTMCell(RNNCellBase):
    """An `LSTMCell` computing all four gates with one input and one hidden matmul
    (`dense_i`, `dense_h` of `4 * hidden_features` outputs, gates in the order i, f, g, o);
    usually faster for hidden sizes up to about 2048.

    Arguments as `LSTMCell` (the hidden kernel defaults to `orthogonal()`).
    """

    carry_arrays = 2

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[[jax.Array], jax.Array] = sigmoid,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: initializers.Initializer = default_kernel_init,
        recurrent_kernel_init: initializers.Initializer = default_recurrent_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        carry_init: initializers.Initializer | None = None,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        recurrent_kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        make = self._setup(
            in_features,
            hidden_features,
            dtype,
            param_dtype,
            carry_init,
            promote_dtype,
            keep_rngs,
            rngs,
            _Inits(
                kernel_init,
                recurrent_kernel_init,
                bias_init,
                kernel_metadata,
                recurrent_kernel_metadata,
                bias_metadata,
            ),
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dense_i = make.input(4, use_bias=False)
        self.dense_h = make.hidden(4, use_bias=True)

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        c, h = carry
        i, f, g, o = jnp.split(self.dense_i(inputs) + self.dense_h(h), 4, axis=-1)
        gate, act = self.gate_fn, self.activation_fn
        return _lstm_update(c, gate(i), gate(f), act(g), gate(o), act)


class SimpleCell(RNNCellBase):
    """The Elman cell: `h' = activation(W_i x + b + W_h h (+ h with residual))`; the
    output is `h'`.

    Args:
        in_features, hidden_features: input and hidden sizes.
        residual: add the previous carry before the activation.
        activation_fn: the activation (tanh).
        dtype: the computation dtype (float32 by default, as in Flax).

    `param_dtype`, `carry_init`, `kernel_init`, `recurrent_kernel_init`, `bias_init`,
    `promote_dtype`, `keep_rngs`, `rngs`, `kernel_metadata`, `recurrent_kernel_metadata`,
    `bias_metadata`: as `LSTMCell` (`dense_i` has the bias, `dense_h` none).
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: jnp.dtype | None = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        carry_init: initializers.Initializer | None = None,
        residual: bool = False,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: initializers.Initializer = default_kernel_init,
        recurrent_kernel_init: initializers.Initializer = default_recurrent_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        recurrent_kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        make = self._setup(
            in_features,
            hidden_features,
            dtype,
            param_dtype,
            carry_init,
            promote_dtype,
            keep_rngs,
            rngs,
            _Inits(
                kernel_init,
                recurrent_kernel_init,
                bias_init,
                kernel_metadata,
                recurrent_kernel_metadata,
                bias_metadata,
            ),
        )
        self.residual = residual
        self.activation_fn = activation_fn
        self.dense_h = make.hidden(1, use_bias=False)
        self.dense_i = make.input(1, use_bias=True)

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        new_carry = self.dense_i(inputs) + self.dense_h(carry)
        if self.residual:
            new_carry += carry
        new_carry = self.activation_fn(new_carry)
        return new_carry, new_carry


class GRUCell(RNNCellBase):
    """Gated recurrent unit: `r, z = sigmoid(...)`, `n = tanh(W_in x + b_in + r * W_hn h)`,
    `h' = (1 - z) * n + z * h`; the output is `h'`.

    One input `Linear` (`dense_i`, with bias) and one hidden `Linear` (`dense_h`, no
    bias) compute the three gates (r, z, n) at once. Arguments as `LSTMCell`.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[[jax.Array], jax.Array] = sigmoid,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: initializers.Initializer = default_kernel_init,
        recurrent_kernel_init: initializers.Initializer = default_recurrent_kernel_init,
        bias_init: initializers.Initializer = default_bias_init,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        carry_init: initializers.Initializer | None = None,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: RngsArg,
        kernel_metadata: Metadata = NO_METADATA,
        recurrent_kernel_metadata: Metadata = NO_METADATA,
        bias_metadata: Metadata = NO_METADATA,
    ) -> None:
        make = self._setup(
            in_features,
            hidden_features,
            dtype,
            param_dtype,
            carry_init,
            promote_dtype,
            keep_rngs,
            rngs,
            _Inits(
                kernel_init,
                recurrent_kernel_init,
                bias_init,
                kernel_metadata,
                recurrent_kernel_metadata,
                bias_metadata,
            ),
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dense_i = make.input(3, use_bias=True)
        self.dense_h = make.hidden(3, use_bias=False)

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = carry
        xi_r, xi_z, xi_n = jnp.split(self.dense_i(inputs), 3, axis=-1)
        hh_r, hh_z, hh_n = jnp.split(self.dense_h(h), 3, axis=-1)
        r = self.gate_fn(xi_r + hh_r)
        z = self.gate_fn(xi_z + hh_z)
        n = self.activation_fn(xi_n + r * hh_n)
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h


def flip_sequences(
    inputs: jax.Array, seq_lengths: jax.Array | None, num_batch_dims: int, time_major: bool
) -> jax.Array:
    """Reverse each sequence along the time axis, keeping padding at the end.

    With `seq_lengths` (one length per batch entry), only the first `length` steps of
    each sequence are reversed: `[1, 2, 3, 0, 0]` of length 3 becomes `[3, 2, 1, 0, 0]`.
    """
    time_axis = 0 if time_major else num_batch_dims
    steps = inputs.shape[time_axis]
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    lengths = jnp.expand_dims(seq_lengths, time_axis)
    order = jnp.arange(steps - 1, -1, -1)
    shape = [steps, *[1] * num_batch_dims] if time_major else [*[1] * num_batch_dims, steps]
    indices = (order.reshape(shape) + lengths) % steps
    indices = indices.reshape(*indices.shape, *[1] * (inputs.ndim - indices.ndim))
    return jnp.take_along_axis(inputs, indices, axis=time_axis)


def _last_carry(carries: CarryState, seq_lengths: jax.Array) -> CarryState:
    """Each batch entry's carry after its last valid step (carries stacked on axis 0)."""
    return jax.tree.map(lambda x: x[seq_lengths - 1, jnp.arange(x.shape[1])], carries)


@contextlib.contextmanager
def _broadcast_rngs(cell: Module, only: Filter) -> Iterator[None]:
    """Give the streams `only` selects one fresh key each for this call (their count
    advances by one), as Flax's `split_rngs(splits=1, squeeze=True)`; put them back after."""
    token = split_rngs_in_place(cell, 1, only=only)
    streams = _split_streams(cell, token)
    for stream in streams:  # squeeze the split axis: one key, held fixed over the steps
        stream.key.set_value(stream.key[...][0])  # `[...] =` would keep the shape
        stream.count.set_value(stream.count[...][0])
    try:
        yield
    finally:
        for stream in streams:  # back to the split shape, which restore_rngs expects
            stream.key.set_value(stream.key[...][None])
            stream.count.set_value(stream.count[...][None])
        restore_rngs(token)


def _split_streams(cell: Module, token: RngSplit) -> list[RngStream]:
    paths = set(token.paths)
    return [s for p, s in iter_graph(cell) if p in paths and isinstance(s, RngStream)]


def _scan_cell(
    cell: RNNCellBase,
    carry: CarryState,
    inputs: jax.Array,
    *,
    time_axis: int,
    state_axes: StateAxes,
    keep_carries: bool,
    unroll: int,
) -> tuple[CarryState, Any]:
    """Run `cell` over `inputs` along `time_axis` with `jax.lax.scan`.

    The cell's state parts whose `state_axes` axis is `Carry` thread through the steps
    and are written back into `cell` afterwards; those with axis None are held fixed.
    Returns the last carry and the outputs stacked on `time_axis` (with `keep_carries`,
    the pair `(carries stacked on axis 0, outputs)` instead of the outputs).
    """
    filters, axes = state_axes.filters, state_axes.axes
    for filter, axis in zip(filters, axes, strict=True):
        if axis is not None and axis is not Carry:
            raise ValueError(
                f"RNN: `state_axes` maps {filter!r} to {axis!r}; a cell's state is either "
                "carried (`Carry`) or held fixed (None). Scan over stacked state with "
                "`nnx.scan` instead."
            )
    graphdef, *states = split(cell, *filters)
    carried_parts = [i for i, axis in enumerate(axes) if axis is Carry]
    xs = jnp.moveaxis(inputs, time_axis, 0)

    def step(scan_carry: tuple[list, CarryState], x: jax.Array) -> tuple[tuple, Any]:
        carried, h = scan_carry
        parts = list(states)
        for i, part in zip(carried_parts, carried, strict=True):
            parts[i] = part
        step_cell = merge(graphdef, *parts, copy=True)  # the held parts are the cell's own
        h, y = step_cell(h, x)
        _, *new_states = split(step_cell, *filters)
        new_carried = [new_states[i] for i in carried_parts]
        return (new_carried, h), ((h, y) if keep_carries else y)

    initial = [states[i] for i in carried_parts]
    (final, carry), ys = jax.lax.scan(step, (initial, carry), xs, unroll=unroll)
    for part in final:
        update(cell, part)
    if keep_carries:
        carries, outputs = ys
        return carry, (carries, jnp.moveaxis(outputs, 0, time_axis))
    return carry, jax.tree.map(lambda y: jnp.moveaxis(y, 0, time_axis), ys)


class RNN(Module):
    """Run a cell over a sequence: `(*batch, time, features) -> (*batch, time, hidden)`.

    >>> rnn = RNN(LSTMCell(3, 8, rngs=rngs))        # doctest: +SKIP
    >>> rnn(jnp.ones((2, 5, 3))).shape               # doctest: +SKIP
    (2, 5, 8)

    Args:
        cell: the cell (an `RNNCellBase`).
        time_major: the time axis is the first (else the one before the features).
        return_carry: return `(last carry, outputs)` instead of the outputs.
        reverse: run from the last step to the first (padding stays at the end).
        keep_order: with `reverse`, give the outputs in the inputs' order.
        unroll: steps per loop iteration (`jax.lax.scan`'s `unroll`).
        state_axes: how the cell's state moves through the steps, `{filter: Carry or
            None}` (default: all carried).
        broadcast_rngs: rng streams (a filter) split once per call and held fixed over
            the steps.
        rngs: where first carries get keys: True (a fresh `carry` stream, seed 0), an
            `Rngs` (a stream forked from its `carry` stream), a stream, or False (the
            cell's own stream, or `rngs=` at call).

    Call arguments `return_carry`, `time_major`, `reverse`, `keep_order` override the
    layer's; `initial_carry` replaces `cell.initialize_carry`; `seq_lengths` gives each
    batch entry's length (the returned carry is the one after its last valid step).
    """

    def __init__(
        self,
        cell: RNNCellBase,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        state_axes: Mapping[Filter, object] | StateAxes | None = None,
        broadcast_rngs: Filter = None,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.cell = cell
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.rngs: RngStream | None = _own_carry_stream(rngs, "RNN")
        if state_axes is None:
            state_axes = StateAxes({...: Carry})
        elif not isinstance(state_axes, StateAxes):
            state_axes = StateAxes(state_axes)
        self.state_axes = state_axes
        self.broadcast_rngs = broadcast_rngs

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: CarryState | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        rngs: RngsArg | None = None,
    ) -> Any:
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order
        feature_axes = self.cell.num_feature_axes
        time_axis = 0 if time_major else inputs.ndim - (feature_axes + 1)
        if time_axis < 0:
            raise ValueError(
                f"RNN expects inputs of shape (*batch, time, {feature_axes} feature axes); got "
                f"{tuple(inputs.shape)}."
            )
        n_batch = inputs.ndim - feature_axes - 1
        if reverse:
            inputs = flip_sequences(inputs, seq_lengths, n_batch, time_major)
        rngs = self.rngs if rngs is None else rngs
        if isinstance(rngs, Rngs):
            rngs = rngs.stream("carry").fork()
        if initial_carry is None:
            step_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1 :]
            initial_carry = self.cell.initialize_carry(step_shape, rngs)
        keep_carries = seq_lengths is not None and return_carry
        broadcast = All(OfType(RngState), self.broadcast_rngs)
        state_axes = StateAxes([(broadcast, None), *self.state_axes.items()])
        with _broadcast_rngs(self.cell, broadcast):
            carry, outputs = _scan_cell(
                self.cell,
                initial_carry,
                inputs,
                time_axis=time_axis,
                state_axes=state_axes,
                keep_carries=keep_carries,
                unroll=self.unroll,
            )
        if keep_carries and seq_lengths is not None:  # implied; spelled out for the checker
            carries, outputs = outputs
            carry = _last_carry(carries, seq_lengths)
        if reverse and keep_order:
            outputs = flip_sequences(outputs, seq_lengths, n_batch, time_major)
        return (carry, outputs) if return_carry else outputs


def _own_carry_stream(rngs: Rngs | RngStream | bool, layer: str) -> RngStream | None:
    """The `carry` stream an `RNN` or `Bidirectional` keeps, from its `rngs=` argument."""
    if rngs is True:
        return RngStream(0, tag="carry")
    if rngs is False:
        return None
    if isinstance(rngs, Rngs | RngStream):
        return fork_stream(rngs, "carry", layer)
    raise TypeError(
        f"`rngs` of {layer} must be True (a fresh `carry` stream), False, an `nnx.Rngs` or "
        f"an `RngStream`; got {type(rngs).__name__}."
    )


def _concatenate(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.concatenate([a, b], axis=-1)


class Bidirectional(Module):
    """Run one RNN forwards and another backwards over the sequence and merge their outputs
    (concatenated on the feature axis by default).

    Args:
        forward_rnn, backward_rnn: two `RNN`s (the same one shares its parameters).
        merge_fn: combines the two outputs.
        time_major, return_carry: as `RNN` (the carry is `(forward, backward)`).
        rngs: as `RNN`'s.
    """

    def __init__(
        self,
        forward_rnn: RNN,
        backward_rnn: RNN,
        *,
        merge_fn: Callable[[jax.Array, jax.Array], jax.Array] = _concatenate,
        time_major: bool = False,
        return_carry: bool = False,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.forward_rnn = forward_rnn
        self.backward_rnn = backward_rnn
        self.merge_fn = merge_fn
        self.time_major = time_major
        self.return_carry = return_carry
        self.rngs = (
            rngs if isinstance(rngs, RngStream) else _own_carry_stream(rngs, "Bidirectional")
        )

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: tuple[CarryState, CarryState] | None = None,
        rngs: RngsArg | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any:
        """Run both directions (`reverse` and `keep_order` are accepted and ignored)."""
        time_major = self.time_major if time_major is None else time_major
        return_carry = self.return_carry if return_carry is None else return_carry
        rngs = self.rngs if rngs is None else rngs
        if isinstance(rngs, Rngs):
            rngs = rngs.stream("carry")
        forward_carry, backward_carry = initial_carry or (None, None)
        if self.forward_rnn is self.backward_rnn:
            _log.warning(
                "Bidirectional: forward_rnn and backward_rnn are one RNN; they share parameters."
            )

        def run(rnn: RNN, carry: CarryState, **direction: bool) -> Any:
            return rnn(
                inputs,
                initial_carry=carry,
                rngs=rngs,
                seq_lengths=seq_lengths,
                return_carry=True,
                time_major=time_major,
                **direction,
            )

        carry_f, outputs_f = run(self.forward_rnn, forward_carry, reverse=False)
        carry_b, outputs_b = run(self.backward_rnn, backward_carry, reverse=True, keep_order=True)
        outputs = jax.tree.map(self.merge_fn, outputs_f, outputs_b)
        return ((carry_f, carry_b), outputs) if return_carry else outputs
