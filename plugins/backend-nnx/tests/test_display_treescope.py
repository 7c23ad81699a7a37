"""`display` uses treescope inside IPython when treescope is installed; text elsewhere."""

import sys
import types

import pytest

from bryo_graph import split
from bryo_nnx import Linear, display
from bryo_rngs import Rngs

treescope = pytest.importorskip("treescope")


def fake_ipython(shell: object) -> types.ModuleType:
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell  # type: ignore[attr-defined]  # a fake IPython hook on a stand-in module
    return module


def test_outside_ipython_display_prints_text(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    display(Linear(2, 3, rngs=Rngs(0)))
    assert capsys.readouterr().out.startswith("Linear(")


def test_inside_ipython_display_hands_nodes_to_treescope(monkeypatch, capsys):
    shown = []
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython(object()))
    monkeypatch.setattr(treescope, "display", lambda node, **kw: shown.append(node))
    layer = Linear(2, 3, rngs=Rngs(0))
    _, state = split(layer)
    display(layer, state)
    assert shown == [layer, state]
    assert capsys.readouterr().out == ""


def test_ipython_without_a_shell_prints_text(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython(None))
    display(Linear(2, 3, rngs=Rngs(0)))
    assert capsys.readouterr().out.startswith("Linear(")


def test_a_layer_renders_in_treescope_with_its_variables():
    text = treescope.render_to_text(Linear(2, 3, rngs=Rngs(0)))
    assert text.startswith("Linear(")
    assert "kernel=Param(" in text and "in_features=2" in text and "out_features=3" in text
    assert "f32[2,3]" in text or "float32" in text
