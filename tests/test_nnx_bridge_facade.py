"""`bryo.nnx.bridge`: reached lazily from `bryo.nnx` (which never needs Flax), and without
Flax an ImportError that says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import bryo.nnx as nnx

pytest.importorskip("flax.linen")


def test_bridge_is_the_facade_over_bryo_nnx_bridge():
    import bryo_nnx.bridge

    assert nnx.bridge.ToNNX is bryo_nnx.bridge.ToNNX
    assert nnx.bridge.to_linen is bryo_nnx.bridge.to_linen
    assert nnx.bridge.initializers is nnx.initializers
    with pytest.raises(AttributeError, match=r"'bryo.nnx' has no attribute 'no_such_name'"):
        nnx.no_such_name  # noqa: B018  # the attribute read under test


def test_without_flax_the_bridge_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "flax", None)  # `import flax` now raises ImportError
    for name in [m for m in sys.modules if m.startswith(("bryo_nnx.bridge", "bryo.nnx.bridge"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(nnx, "bridge", raising=False)
    with pytest.raises(ImportError, match=r"needs Flax: `pip install flax`"):
        nnx.bridge  # noqa: B018  # the attribute read under test
    with pytest.raises(ImportError, match=r"needs Flax: `pip install flax`"):
        from bryo.nnx import bridge  # noqa: F401  # the import under test


@pytest.mark.slow
def test_bryo_nnx_imports_and_works_without_flax():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["flax"] = None
        from bryo import nnx
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        assert nnx.state(model)["kernel"].shape == (2, 3)
        assert not any(name.startswith("flax") for name, m in sys.modules.items() if m)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
