"""Flax NNX 0.12 keeps a Variable's axes under `out_sharding`; the older `sharding` and
`sharding_names` keywords still work, stored under the new key (with Flax's warning)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from bryo_graph import Param, State, Variable, get_partition_spec, with_partitioning

_AXES = ("embed", "mlp")


@pytest.mark.parametrize("old", ["sharding", "sharding_names"])
def test_the_older_keyword_is_stored_as_out_sharding(old: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated, use 'out_sharding'"):
        param = Param(jnp.ones((2, 4)), **{old: _AXES})
    new = Param(jnp.ones((2, 4)), out_sharding=_AXES)
    assert param.metadata == new.metadata == {"out_sharding": _AXES}
    assert param.out_sharding == _AXES
    assert not param.has_metadata(old)


@pytest.mark.parametrize("old", ["sharding", "out_sharding"])
def test_both_spellings_give_the_same_partition_spec(old: str) -> None:
    with pytest.warns(DeprecationWarning) if old == "sharding" else _no_warning():
        param = Param(jnp.ones((2, 4)), **{old: _AXES})
    spec = get_partition_spec(State({"w": param}))
    assert tuple(spec["w"].value) == _AXES
    initializer = with_partitioning(lambda: jnp.ones((2, 4)), _AXES)
    assert Param(initializer()).out_sharding == _AXES


def test_setting_the_older_names_sets_out_sharding() -> None:
    param = Param(jnp.ones((2, 4)), out_sharding=("a", "b"))
    with pytest.warns(DeprecationWarning):
        param.set_metadata(sharding=_AXES)
    assert param.metadata == {"out_sharding": _AXES}
    with pytest.warns(DeprecationWarning):
        param.set_metadata("sharding_names", ("x", None))
    assert param.out_sharding == ("x", None)
    with pytest.warns(DeprecationWarning):
        param.sharding = _AXES  # attribute writes are metadata writes in bryo
    assert param.metadata == {"out_sharding": _AXES}
    with pytest.warns(DeprecationWarning, match="'sharding_names' is deprecated"):
        assert param.sharding_names == _AXES
    with pytest.warns(DeprecationWarning):
        copied = param.copy(sharding=("c", "d"))
    assert copied.out_sharding == ("c", "d") and param.out_sharding == _AXES


def test_two_spellings_with_different_axes_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"`Param\(\.\.\.\)` got `sharding=.*give only `out_sharding`"
    ):
        Param(jnp.ones((2, 4)), sharding=_AXES, out_sharding=("a", "b"))
    with pytest.warns(DeprecationWarning):  # the same axes twice: one key
        same = Variable(jnp.ones((2, 4)), sharding=_AXES, out_sharding=_AXES)
    assert same.metadata == {"out_sharding": _AXES}


class _no_warning:
    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", DeprecationWarning)

    def __exit__(self, *exc: object) -> None:
        self._catch.__exit__(*exc)
