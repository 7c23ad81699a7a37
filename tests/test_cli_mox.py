"""`bryo mox show|query|convert`, and their errors for bad files."""

import os

import jax.numpy as jnp
import pytest

import bryo_mox
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
    assert "`xpath` '//module_call[@type=' is not valid XPath" in capsys.readouterr().err


def test_convert_refuses_to_overwrite_its_input(xml_file, capsys):
    assert main(["mox", "convert", str(xml_file), "--to", "xml", "-o", str(xml_file)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("xpath", "printed"),
    [
        ("count(//module_call)", "2"),
        ("count(//*) > 3", "true"),
        ('string(//module_call[@type="Linear"]/@name)', "dense"),
        ("sum(//module_call/@in_features) div 8", "0.5"),
    ],
)
def test_query_prints_values_of_non_node_expressions(xml_file, capsys, xpath, printed):
    assert main(["mox", "query", str(xml_file), xpath]) == 0
    assert capsys.readouterr().out == printed + "\n"


def test_unknown_xpath_function_is_one_line(xml_file, capsys):
    assert main(["mox", "query", str(xml_file), "frobnicate(//module_call)"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("bryo mox: `xpath` 'frobnicate(//module_call)' cannot be evaluated")


def test_convert_into_a_folder(xml_file, tmp_path, capsys):
    assert main(["mox", "convert", str(xml_file), "--to", "yson", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "block.mox.yson").is_file()
    assert capsys.readouterr().out == f"wrote {tmp_path / 'block.mox.yson'}\n"
    missing = tmp_path / "no" / "such" / "out.yson"
    assert main(["mox", "convert", str(xml_file), "--to", "yson", "-o", str(missing)]) == 2
    assert "does not exist (end the path with / to create a folder)" in one_line(
        capsys.readouterr().err
    )
    assert not missing.parent.exists()


def test_convert_into_a_folder_named_with_a_trailing_slash_creates_it(xml_file, tmp_path, capsys):
    folder = tmp_path / "out" / "mox"
    assert main(["mox", "convert", str(xml_file), "--to", "yson", "-o", f"{folder}/"]) == 0
    assert (folder / "block.mox.yson").is_file()
    assert capsys.readouterr().out == f"wrote {folder / 'block.mox.yson'}\n"


def test_convert_onto_an_existing_file_needs_force(xml_file, tmp_path, capsys):
    output = tmp_path / "block.mox.yson"
    output.write_text("keep me")
    assert main(["mox", "convert", str(xml_file), "--to", "yson", "-o", str(output)]) == 2
    assert f"{output} exists; pass --force to replace it" in one_line(capsys.readouterr().err)
    assert output.read_text() == "keep me"
    assert (
        main(["mox", "convert", str(xml_file), "--to", "yson", "-o", str(output), "--force"]) == 0
    )
    assert mox.load(output).nodes


def test_convert_writes_every_registered_format(xml_file, tmp_path, capsys, bryo_plugin_manager):
    """`--to` used to accept `xml` and `yson` only: a plugin's format could be read, not
    written."""
    from bryo_mox import Serializer
    from bryo_plugins import answers, hookimpl

    [yson] = [
        serializer
        for answer in answers("bryo_mox_serializers", list, family="serializers")
        for serializer in answer.value
        if serializer.format == "yson"
    ]

    class Toy:
        @hookimpl
        def bryo_mox_serializers(self):
            return [Serializer("toy", (".mox.toy",), yson.dumps, yson.loads)]

    bryo_plugin_manager.register(Toy(), name="toy")
    assert main(["mox", "convert", str(xml_file), "--to", "toy", "-o", str(tmp_path)]) == 0
    written = tmp_path / "block.mox.toy"
    assert [n.name for n in mox.query("//module_call", mox.load(written))] == ["", "dense"]
    assert main(["mox", "convert", str(written), "--to", "xml", "-o", f"{tmp_path}/back/"]) == 0
    assert (tmp_path / "back" / "block.mox.xml").is_file()
    capsys.readouterr()
    assert main(["mox", "convert", str(xml_file), "--to", "nope", "-o", str(tmp_path)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "cannot write it as nope: `format` 'nope' has no serializer; installed: " in err
    assert "toy" in err and not (tmp_path / "block.mox.nope").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE m []><mox/>'.encode("utf-16"), "UTF-8"),
        (b"<mox>" + b"<jit>" * 230 + b"</jit>" * 230 + b"</mox>", "deeper"),
        (b'<mox><input type="f32[2]">a</input><input type="f32[2]">a</input></mox>', "twice"),
        (b'<mox><add y="' + b"9" * 100 + b'"/></mox>', "add"),
    ],
)
def test_bad_files_are_one_line_with_exit_2(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.mox.xml"
    bad.write_bytes(content)
    assert main(["mox", "show", str(bad)]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith(f"bryo mox: {bad}:") and message in err


def test_yson_errors_name_the_path(tmp_path, capsys):
    bad = tmp_path / "bad.mox.yson"
    bad.write_text('<"primitive"="mox";"results"=[{"type"="f32[]";"name"="x"}]>#')
    assert main(["mox", "show", str(bad)]) == 2
    err = one_line(capsys.readouterr().err)
    assert (
        f"{bad}:1:1: variable `x` is used in <mox> before it is defined. (at path /@results/0)"
        in err
    )


def test_unreadable_file_and_usage_errors_are_one_line(xml_file, tmp_path, capsys):
    assert main(["mox", "show", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a folder; give the path of a MoX file" in one_line(
        capsys.readouterr().err
    )
    if os.path.exists("/dev/null"):
        assert main(["mox", "show", "/dev/null"]) == 2
        assert "/dev/null: is not a regular file" in one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        main(["mox", "query", str(xml_file)])
    assert info.value.code == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("bryo mox: the following arguments are required: xpath")


def test_an_xpath_with_bytes_that_are_not_utf8_is_one_line(xml_file, capsys):
    """`bryo mox query f $'//\\xff'`: Python hands the byte over as a lone surrogate."""
    assert main(["mox", "query", str(xml_file), "//\udcff"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("bryo mox: `xpath` '//\\udcff' holds '\\udcff'")


def test_over_limit_files_are_one_line(tmp_path, capsys):
    huge = tmp_path / "huge.mox.yson"
    with open(huge, "wb") as file:
        file.truncate(bryo_mox.Limits().max_bytes + 1)  # sparse: refused by its size, unread
    for command in (["show"], ["query"], ["convert", "--to", "xml"]):
        args = ["mox", command[0], str(huge), *command[1:]]
        assert main([*args, "//a"] if command == ["query"] else args) == 2
        assert "over the limit of" in one_line(capsys.readouterr().err)
