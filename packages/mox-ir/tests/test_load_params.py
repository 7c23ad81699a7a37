"""A file whose equation params jax reads only when lowering (`precision`, `mode`, ...) is
refused on load when they do not hold what jax puts there: such a file used to load, and
its first `eval_mox` aborted the process (`precision=5`: a fatal LLVM error) or raised an
assertion from inside jax."""

import re

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from bryo_mox import MoxSerializationError, dumps, eval_mox, loads, make_mox

pytest.importorskip("bryo_xml")

# Each a function, its arguments and one of its equations' params (as the XML writes it).
CASES = {
    "dot_general": (lambda a, b: a @ b, (jnp.ones((2, 3)), jnp.ones((3, 4))), "precision"),
    "conv": (
        lambda a, w: lax.conv(a, w, (1,), "SAME"),
        (jnp.ones((1, 1, 5)), jnp.ones((1, 1, 3))),
        "precision",
    ),
    "round": (
        lambda a: lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN),
        (jnp.ones(3),),
        "rounding_method",
    ),
    "fft": (lambda a: jnp.fft.fft(a), (jnp.ones(4),), "fft_type"),
    "rng_bit_generator": (
        lambda k: lax.rng_bit_generator(k, (3,))[1],
        (jnp.zeros(4, jnp.uint32),),
        "algorithm",
    ),
    "gather": (lambda a, i: a[i], (jnp.ones(5), jnp.array([1, 2])), "mode"),
    "scatter": (lambda a, i: a.at[i].add(1.0), (jnp.ones(5), jnp.array([1, 2])), "mode"),
    "gather_sorted": (
        lambda a, i: a[i],
        (jnp.ones(5), jnp.array([1, 2])),
        "indices_are_sorted",
    ),
    "scatter_unique": (
        lambda a, i: a.at[i].add(1.0),
        (jnp.ones(5), jnp.array([1, 2])),
        "unique_indices",
    ),
    "sort": (lambda a: jnp.sort(a), (jnp.ones(3),), "is_stable"),
    "cumsum": (lambda a: jnp.cumsum(a), (jnp.ones(3),), "reverse"),
    "tanh": (lambda a: jnp.tanh(a), (jnp.ones(3),), "accuracy"),
    "tanh_accurate": (
        lambda a: lax.tanh(a, accuracy=lax.AccuracyMode.HIGHEST),
        (jnp.ones(3),),
        "accuracy",
    ),
    "convert_element_type": (lambda a: a.astype(jnp.int32), (jnp.ones(3),), "weak_type"),
    "sort_dimension": (lambda a: jnp.sort(a), (jnp.ones(3),), "dimension"),
    "sort_num_keys": (lambda a: jnp.sort(a), (jnp.ones(3),), "num_keys"),
    "select_and_scatter_add": (
        lambda a: jax.grad(
            lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2,), (1,), "VALID").sum()
        )(a),
        (jnp.arange(4.0),),
        "window_strides",
    ),
}


def _with_param(text: str, param: str, value: str) -> str:
    """`text` with the first `param` of an element whose tag is not `reduce_window_max`
    (the forward pass of the `select_and_scatter_add` case) set to `value`."""
    element = r"(<(?!reduce_window_max)[\w-]+\b[^>]*? "
    changed, count = re.subn(element + f'{param}=")[^"]*(")', rf"\g<1>{value}\g<2>", text, count=1)
    assert count, f"no `{param}` in the file"
    return changed


@pytest.mark.parametrize("value", ["5", "'highest'", "(Precision.HIGHEST, None)"])
@pytest.mark.parametrize("case", ["dot_general", "conv"])
def test_a_precision_jax_cannot_lower_is_refused_on_load(case, value):
    fn, args, param = CASES[case]
    text = _with_param(dumps(make_mox(fn)(*args), format="xml"), param, value)
    with pytest.raises(MoxSerializationError, match=r"param `precision=.*`Precision`") as info:
        loads(text, format="xml")
    assert info.value.line is not None  # located in the file


@pytest.mark.parametrize("case", sorted(set(CASES) - {"dot_general", "conv"}))
def test_an_enum_or_flag_param_of_another_type_is_refused_on_load(case):
    fn, args, param = CASES[case]
    text = _with_param(dumps(make_mox(fn)(*args), format="xml"), param, "7")
    with pytest.raises(MoxSerializationError, match=f"param `{param}=7`; jax expects"):
        loads(text, format="xml")


@pytest.mark.parametrize(
    "value", ["Precision.HIGHEST", "(Precision.HIGHEST, Precision.DEFAULT)", "None"]
)
def test_every_precision_jax_gives_still_loads_and_evaluates(value):
    fn, args, param = CASES["dot_general"]
    text = _with_param(dumps(make_mox(fn)(*args), format="xml"), param, value)
    result = eval_mox(loads(text, format="xml"), *args)
    assert jnp.allclose(jax.block_until_ready(result), fn(*args))


def test_an_accuracy_jax_gives_still_loads_and_evaluates():
    fn, args, _ = CASES["tanh_accurate"]
    result = eval_mox(loads(dumps(make_mox(fn)(*args), format="xml"), format="xml"), *args)
    assert jnp.allclose(jax.block_until_ready(result), fn(*args))


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ('cosed="False"', r"unknown attrs \['cosed'\]"),
        ('closed="7"', "a `closed` attr that is not a bool"),
    ],
)
def test_a_region_with_a_misspelt_or_odd_closed_attr_is_refused(written, message):
    """A `remat`'s jaxpr is open: a file whose `closed="False"` lost a letter used to load
    it as a closed one and fail at the first evaluation (`ClosedJaxpr.replace()`)."""
    fn = jax.checkpoint(lambda a: jnp.sin(a) * 2.0)
    text = dumps(make_mox(fn)(jnp.ones(3)), format="xml")
    changed, count = re.subn('closed="False"', written, text, count=1)
    assert count, "no open region in the file"
    with pytest.raises(MoxSerializationError, match=message):
        loads(changed, format="xml")
