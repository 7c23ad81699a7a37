"""`bryo plugin new`: what it writes for each kind, and its errors. The generated
distributions are installed and their tests run in tests/test_plugin_scaffold.py (slow)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from bryo._cli import main
from bryo._scaffold import names

GROUPS = {
    "serializer": (("bryo.serializers.json",), "acme-json", "acme_json._plugin"),
    # a backend's module calls reach make_mox through a second key of the same plugin
    "backend": (("bryo.graph.acme_json", "bryo.mox.acme_json"), "acme-json", "acme_json._plugin"),
    "cli": (("bryo.cli",), "acme-json", "acme_json._plugin"),
}


@pytest.mark.parametrize("kind", sorted(GROUPS))
def test_each_kind_is_a_complete_distribution(tmp_path, capsys, kind):
    folder = tmp_path / "out"
    assert main(["plugin", "new", "acme-json", "--kind", kind, "-o", str(folder)]) == 0
    assert f"wrote a {kind} plugin, acme-json, in {folder}:" in capsys.readouterr().out
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    groups, name, value = GROUPS[kind]
    if kind == "serializer":
        groups = ("bryo.serializers.acmejson",)
    assert project["project"]["entry-points"] == {group: {name: value} for group in groups}
    assert project["project"]["name"] == "acme-json"
    assert (folder / "src" / "acme_json" / "py.typed").exists()
    assert "bryo_plugins.testing" in (folder / "tests" / "conftest.py").read_text()
    for path in folder.rglob("*.py"):
        ast.parse(path.read_text(), str(path))  # every template renders to Python
        assert "$" not in path.read_text(), f"{path}: a placeholder was left"


def test_names_follow_the_distribution():
    found = names("bryo-json")
    assert (found.package, found.format, found.command) == ("bryo_json", "json", "json")
    assert names("Acme.Hello_World").package == "acme_hello_world"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plugin", "new", "9lives", "--kind", "cli"], "must be a distribution name"),
        (["plugin", "new", "bryo-graph", "--kind", "cli"], "which is taken"),
        (["plugin", "new", "class", "--kind", "cli"], "which is taken"),
    ],
)
def test_bad_names_are_one_line_errors(tmp_path, capsys, argv, message):
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bryo plugin new: ") and message in err
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_empty_is_left_alone(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["plugin", "new", "acme", "--kind", "cli", "-o", str(tmp_path)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_the_default_folder_is_the_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plugin", "new", "acme-hello", "--kind", "cli"]) == 0
    assert (Path("acme-hello") / "src" / "acme_hello" / "_plugin.py").is_file()
