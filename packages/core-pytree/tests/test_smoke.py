import bryo_pytree
def test_import():
    assert bryo_pytree.__version__
