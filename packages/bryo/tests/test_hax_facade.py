"""`from bryo import hax` in place of `import haliax as hax`: a Haliax name the facade
lacks (its layers, `einsum`) is an `AttributeError` that points to Haliax's own name."""

import pytest

from bryo import hax


@pytest.mark.parametrize(
    ("owner", "name", "haliax_path"),
    [
        (hax.nn, "Linear", "haliax.nn.Linear"),
        (hax.nn, "LayerNorm", "haliax.nn.LayerNorm"),
        (hax, "einsum", "haliax.einsum"),
    ],
)
def test_a_haliax_name_the_facade_lacks_points_to_haliax(owner, name, haliax_path):
    with pytest.raises(AttributeError, match="reimplements Haliax's named arrays") as info:
        getattr(owner, name)
    assert f"`{haliax_path}` is what you want, use Haliax itself" in str(info.value)
    assert not hasattr(owner, name)


def test_private_and_present_names_are_unchanged():
    with pytest.raises(AttributeError) as info:
        hax.__wrapped__  # noqa: B018  # probed by inspect and doctest
    assert str(info.value) == "module 'bryo.hax' has no attribute '__wrapped__'"
    assert hax.nn.Stacked is hax.nn.scan.Stacked and callable(hax.zeros)
