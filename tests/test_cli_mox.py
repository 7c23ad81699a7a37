"""`bryo mox show|query|convert`, and their errors for bad files."""

import jax.numpy as jnp
import pytest

from bryo import mox, nnx
from bryo._cli import main


class ResBlock(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x):
        return x + nnx.relu(self.dense(x))


@pytest.fixture(scope="module")
def xml_file(tmp_path_factory):
    model = ResBlock(nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    traced = mox.make_mox(lambda p, x: nnx.merge(graphdef, p)(x))(params, jnp.ones((2, 4)))
    path = tmp_path_factory.mktemp("mox") / "block.mox.xml"
    mox.dump(traced, path)
    return path


def test_show_prints_the_module_tree(xml_file, capsys):
    assert main(["mox", "show", str(xml_file)]) == 0
    out = capsys.readouterr().out
    assert "2 module call(s)" in out
    assert "module_call ResBlock ''" in out
    assert "  module_call Linear 'dense' " in out and "in_features=4" in out
    assert "(f32[4], f32[4,4], f32[2,4]) -> (f32[2,4])" in out


def test_show_full_prints_equations(xml_file, capsys):
    assert main(["mox", "show", "--full", str(xml_file)]) == 0
    assert "dot_general" in capsys.readouterr().out


def test_query(xml_file, capsys):
    assert main(["mox", "query", str(xml_file), '//module_call[@type="Linear"]']) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("module_call Linear 'dense'")
    assert "1 node(s) match" in captured.err


def test_convert_round_trips(xml_file, tmp_path, capsys):
    output = tmp_path / "block.mox.yson"
    assert main(["mox", "convert", str(xml_file), "--to", "yson", "-o", str(output)]) == 0
    assert output.exists()
    assert main(["mox", "query", str(output), "//module_call"]) == 0
    assert capsys.readouterr().out.count("module_call") == 2


def test_malformed_file_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text("<mox>\n  <module_call>\n</mox>\n")
    assert main(["mox", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bryo mox: {bad}:3") and "line 3" in err


def test_missing_file_and_bad_query(xml_file, tmp_path, capsys):
    assert main(["mox", "show", str(tmp_path / "nope.xml")]) == 2
    assert "nope.xml: no such file" in capsys.readouterr().err
    assert main(["mox", "query", str(xml_file), "//module_call[@type="]) == 2
    assert "XPath '//module_call[@type='" in capsys.readouterr().err


def test_convert_refuses_to_overwrite_its_input(xml_file, capsys):
    assert main(["mox", "convert", str(xml_file), "--to", "xml", "-o", str(xml_file)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
