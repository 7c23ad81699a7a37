"""The params of a loaded equation that jax reads only when it lowers it, checked on load.

`jax.make_jaxpr` binds each leaf equation of a file and computes its output types, but a
primitive's abstract evaluation does not look at every param: some are first read when
the equation is lowered to XLA, at the first `eval_mox`. There a wrong value is an
assertion deep inside jax (`mode=7` on a `gather`) or, for an MLIR enum attribute
(`precision=5` on a `dot_general`), a fatal LLVM error that ends the process. A file may
hold any literal in a param, so the loader checks these params against the types jax
itself puts there, and refuses a file that differs before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from jax import lax
from jax.extend import core as jex

from ._errors import MoxSerializationError

#: jax's dot algorithm types (a `precision` may hold one instead of `Precision`s).
_DOT_ALGORITHMS: tuple[type, ...] = tuple(
    cls
    for cls in (getattr(lax, "DotAlgorithm", None), getattr(lax, "DotAlgorithmPreset", None))
    if isinstance(cls, type)
)


def _is_precision(value: object, operands: Sequence[Any]) -> bool:
    """What `lax.dot_general`/`conv_general_dilated` put in `precision`: None, a
    `Precision` or a pair of them, or a dot algorithm."""
    if value is None or isinstance(value, (lax.Precision, *_DOT_ALGORITHMS)):
        return True
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(p, lax.Precision) for p in value)
    )


def _instance_of(cls: type) -> Test:
    return lambda value, operands: isinstance(value, cls)


def _is_bool(value: object, operands: Sequence[Any]) -> bool:
    return isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(value: object, operands: Sequence[Any]) -> bool:
    return isinstance(value, tuple) and all(map(_is_int, value))


def _int_pairs(value: object, operands: Sequence[Any]) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 and all(map(_is_int, pair)) for pair in value
    )


def _is_primitive(value: object, operands: Sequence[Any]) -> bool:
    return isinstance(value, jex.Primitive)


def _sort_dimension(value: object, operands: Sequence[Any]) -> bool:
    rank = len(getattr(operands[0], "shape", ())) if operands else 0
    return _is_int(value) and -rank <= cast(int, value) < rank


def _sort_keys(value: object, operands: Sequence[Any]) -> bool:
    return _is_int(value) and 1 <= cast(int, value) <= len(operands)


def _any_primitive(tag: str) -> bool:
    return True


def _only(*tags: str) -> Callable[[str], bool]:
    return lambda tag: tag in tags


def _gather_or_scatter(tag: str) -> bool:
    return tag == "gather" or tag.startswith("scatter")


#: `test(value, operands)`: whether a param's value is one jax can lower, given the
#: equation's operands (their avals).
Test = Callable[[object, Sequence[Any]], bool]


class ParamRule(NamedTuple):
    """A param checked on load: on which primitives, what it must be (`test`), and how the
    error says so (`expected`)."""

    applies: Callable[[str], bool]
    test: Test
    expected: str


_BOOL = ParamRule(_any_primitive, _is_bool, "`True` or `False`")
#: What a transcendental op's `accuracy` may hold (`lax.tanh(x, accuracy=...)`).
_ACCURACIES: tuple[type, ...] = tuple(
    cls
    for cls in (getattr(lax, "AccuracyMode", None), getattr(lax, "Tolerance", None))
    if isinstance(cls, type)
)


def _is_accuracy(value: object, operands: Sequence[Any]) -> bool:
    return value is None or isinstance(value, _ACCURACIES)


_SELECT_AND_SCATTER = _only("select_and_scatter_add", "select_and_scatter")


def _is_policy(value: object, operands: Sequence[Any]) -> bool:
    """A `remat`'s checkpoint policy: None or a `jax.checkpoint_policies` policy (a file
    names one with `checkpoint_policy(...)`; other text reads as a bare string)."""
    return value is None or callable(value)


PARAM_RULES: Mapping[str, tuple[ParamRule, ...]] = {
    "precision": (
        ParamRule(
            _any_primitive,
            _is_precision,
            "None, a `Precision` (`Precision.HIGHEST`), a pair of `Precision`s or a dot algorithm",
        ),
    ),
    "rounding_method": (
        ParamRule(_any_primitive, _instance_of(lax.RoundingMethod), "a `RoundingMethod`"),
    ),
    "fft_type": (ParamRule(_any_primitive, _instance_of(lax.FftType), "an `FftType`"),),
    "accuracy": (
        ParamRule(_any_primitive, _is_accuracy, "None, an `AccuracyMode` or a `Tolerance`"),
    ),
    "algorithm": (
        ParamRule(
            _only("rng_bit_generator"), _instance_of(lax.RandomAlgorithm), "a `RandomAlgorithm`"
        ),
    ),
    "mode": (
        ParamRule(_gather_or_scatter, _instance_of(lax.GatherScatterMode), "a `GatherScatterMode`"),
    ),
    "dimension": (ParamRule(_only("sort"), _sort_dimension, "an axis of the operands (an int)"),),
    "num_keys": (ParamRule(_only("sort"), _sort_keys, "an int from 1 to the number of operands"),),
    "select_prim": (ParamRule(_SELECT_AND_SCATTER, _is_primitive, "a primitive"),),
    "policy": (
        ParamRule(
            _only("remat2", "checkpoint"),
            _is_policy,
            "None or a checkpoint policy (`checkpoint_policy('nothing_saveable')`)",
        ),
    ),
    "window_dimensions": (ParamRule(_SELECT_AND_SCATTER, _ints, "a tuple of ints"),),
    "window_strides": (ParamRule(_SELECT_AND_SCATTER, _ints, "a tuple of ints"),),
    "padding": (ParamRule(_SELECT_AND_SCATTER, _int_pairs, "a tuple of (low, high) int pairs"),),
    **{
        name: (_BOOL,)
        for name in ("indices_are_sorted", "unique_indices", "is_stable", "reverse", "weak_type")
    },
}


def check_params(tag: str, params: Mapping[str, Any], operands: Sequence[Any]) -> None:
    """Refuse a `tag` equation on `operands` (avals) whose params jax would fail on only
    when lowering it.

    Raises:
        MoxSerializationError: naming the equation, the param, its value and what jax
            expects there.
    """
    for name, value in params.items():
        for rule in PARAM_RULES.get(name, ()):
            if rule.applies(tag) and not rule.test(value, operands):
                raise MoxSerializationError(
                    f"equation `{tag}` has param `{name}={value!r:.80}`; jax expects "
                    f"{rule.expected} there. The file is damaged or was not written by "
                    "bryo: write it again from the traced MoX."
                )
