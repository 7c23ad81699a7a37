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

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from jax import lax

from ._errors import MoxSerializationError

#: jax's dot algorithm types (a `precision` may hold one instead of `Precision`s).
_DOT_ALGORITHMS: tuple[type, ...] = tuple(
    cls
    for cls in (getattr(lax, "DotAlgorithm", None), getattr(lax, "DotAlgorithmPreset", None))
    if isinstance(cls, type)
)


def _is_precision(value: object) -> bool:
    """What `lax.dot_general`/`conv_general_dilated` put in `precision`: None, a
    `Precision` or a pair of them, or a dot algorithm."""
    if value is None or isinstance(value, (lax.Precision, *_DOT_ALGORITHMS)):
        return True
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(p, lax.Precision) for p in value)
    )


def _instance_of(cls: type) -> Callable[[object], bool]:
    return lambda value: isinstance(value, cls)


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _any_primitive(tag: str) -> bool:
    return True


def _gather_or_scatter(tag: str) -> bool:
    return tag == "gather" or tag.startswith("scatter")


class ParamRule(NamedTuple):
    """A param checked on load: on which primitives, what it must be (`test`), and how the
    error says so (`expected`)."""

    applies: Callable[[str], bool]
    test: Callable[[object], bool]
    expected: str


PARAM_RULES: Mapping[str, ParamRule] = {
    "precision": ParamRule(
        _any_primitive,
        _is_precision,
        "None, a `Precision` (`Precision.HIGHEST`), a pair of `Precision`s or a dot algorithm",
    ),
    "rounding_method": ParamRule(
        _any_primitive, _instance_of(lax.RoundingMethod), "a `RoundingMethod`"
    ),
    "fft_type": ParamRule(_any_primitive, _instance_of(lax.FftType), "an `FftType`"),
    "algorithm": ParamRule(
        lambda tag: tag == "rng_bit_generator",
        _instance_of(lax.RandomAlgorithm),
        "a `RandomAlgorithm`",
    ),
    "mode": ParamRule(
        _gather_or_scatter, _instance_of(lax.GatherScatterMode), "a `GatherScatterMode`"
    ),
    **{
        name: ParamRule(_any_primitive, _is_bool, "`True` or `False`")
        for name in ("indices_are_sorted", "unique_indices", "is_stable", "reverse")
    },
}


def check_params(tag: str, params: Mapping[str, Any]) -> None:
    """Refuse a `tag` equation whose params jax would fail on only when lowering it.

    Raises:
        MoxSerializationError: naming the equation, the param, its value and what jax
            expects there.
    """
    for name, value in params.items():
        rule = PARAM_RULES.get(name)
        if rule is not None and rule.applies(tag) and not rule.test(value):
            raise MoxSerializationError(
                f"equation `{tag}` has param `{name}={value!r:.80}`; jax expects "
                f"{rule.expected} there. The file is damaged or was not written by bryo: "
                "write it again from the traced MoX."
            )
