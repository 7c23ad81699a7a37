"""A file whose equation has a param its primitive's lowering does not take is refused on
load: jax's abstract evaluation of `lt` (and `cos`, ...) ignores a name it does not know,
so a misspelt param used to load and fail at the first `eval_mox` with jax's raw
`TypeError: _compare_lower_hlo() got an unexpected keyword argument 'bogus'`."""

import re

import jax
import jax.numpy as jnp
import pytest

from bryo_mox import MoxSerializationError, clear_caches, dumps, eval_mox, loads, make_mox

pytest.importorskip("bryo_xml")
pytest.importorskip("bryo_yson")

X = jnp.linspace(-1.0, 1.0, 3, dtype=jnp.float32)


def _compare(a: jax.Array) -> jax.Array:
    return jnp.where(a < 0.5, a, -a)


def _xml_with_bogus_lt() -> str:
    text = dumps(make_mox(_compare)(X), format="xml")
    changed, count = re.subn(r"<lt>", '<lt bogus="1">', text, count=1)
    assert count, "no <lt> in the file"
    return changed


def test_a_param_lt_does_not_take_is_refused_on_load_naming_node_and_param():
    # (jax 0.7's abstract evaluation of `lt` refuses the name already, when rebuilding)
    with pytest.raises(MoxSerializationError, match=r"equation `lt`.*\bbogus\b") as info:
        loads(_xml_with_bogus_lt(), format="xml")
    assert info.value.line is not None  # located at the <lt> element
    assert "write it again from the traced MoX" in str(info.value)


def test_a_refused_file_is_refused_again_and_a_good_one_still_loads():
    """What the first load lowered is remembered per (primitive, param names): a refused
    name is never remembered as taken, and the good names are."""
    clear_caches()
    for _ in range(2):
        with pytest.raises(MoxSerializationError, match=r"equation `lt`.*\bbogus\b"):
            loads(_xml_with_bogus_lt(), format="xml")
    good = loads(dumps(make_mox(_compare)(X), format="xml"), format="xml")
    assert jnp.array_equal(eval_mox(good, X), _compare(X))


def test_a_flipped_byte_in_a_yson_param_name_is_refused_with_its_path():
    text = dumps(make_mox(jnp.cos)(X), format="yson")
    changed = text.replace('"accuracy"=', '"accuracx"=', 1)
    assert changed != text, "no `accuracy` param in the file"
    with pytest.raises(MoxSerializationError, match=r"equation `cos`.*\baccuracx\b") as info:
        loads(changed, format="yson")
    assert info.value.path is not None
