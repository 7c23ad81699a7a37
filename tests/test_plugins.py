"""bryo's plugin system across the packages, with real (fake) installed distributions.

Each test installs tiny distributions with `bryo` entry points (`bryo_fake_distributions`
writes real `*.dist-info` directories on `sys.path`) and works on a fresh manager, so the
global one is never disturbed. The manager's own rules are tested in core-plugins; here:
the core without entry points, lazy loading per family, a third-party plugin that raises,
answers garbage and conflicts, the one rule for callable filters, and the docs' hook table.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import bryo._cli
from bryo_filters import ValuePredicate, to_predicate
from bryo_graph import NodeType, Param, get_partition_spec, node_types, split
from bryo_plugins import (
    BLOCK_ENV,
    PluginConflictWarning,
    PluginError,
    _manager,
    describe_hooks,
    describe_plugins,
    hookimpl,
    hookspec_sources,
    new_plugin_manager,
    plugin_failures,
    use_plugin_manager,
)

ROOT = Path(__file__).resolve().parents[1]

HELLO = """
    from bryo.cli import Argument
    from bryo_plugins import hookimpl

    def _hello(args):
        print(f"hello, {args.who}")
        return 0

    @hookimpl
    def bryo_cli_commands(commands):
        commands.add_command(
            "hello", "say hello", _hello, [Argument("who", nargs="?", default="world")]
        )
"""

MISSPELT = """
    import bryo
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_cli_command(commands):
        pass
"""

BROKEN = """
    raise ZeroDivisionError("boom at import")
"""

# A third-party graph backend gone wrong three ways, each its own plugin of one distribution.
RAISES = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_graph_node_types():
        raise KeyError("a bug in the plugin")
"""

GARBAGE = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_graph_node_types():
        return object()
"""

CONFLICT = """
    from bryo_graph import NodeType
    from bryo_plugins import hookimpl

    def _unflatten(cls, aux, children):
        return tuple(child for _, child in children)

    @hookimpl
    def bryo_graph_node_types():
        return [NodeType(tuple, flatten=lambda node: (enumerate(node), None), unflatten=_unflatten)]
"""


def _names(pm) -> set[str]:
    return {name for name, plugin in pm.list_name_plugin() if plugin is not None}


def _bryo_entry_point_names() -> set[str]:
    return {
        ep.name
        for dist in importlib.metadata.distributions()
        for ep in dist.entry_points
        if ep.group == "bryo" or ep.group.startswith("bryo.")
    }


# --- the core needs no entry point ---------------------------------------------------------


def test_the_core_works_with_every_entry_point_blocked(monkeypatch):
    monkeypatch.setenv(BLOCK_ENV, ",".join(_bryo_entry_point_names()))
    with use_plugin_manager(new_plugin_manager()) as pm:
        pm.load_all()
        assert {"core-graph", "core-scan", "cli"} <= _names(pm)
        assert not {"backend-nnx", "backend-equinox", "serializer-xml"} & _names(pm)
        _, state = split({"w": Param(jnp.ones(2)), "pair": (1, Param(jnp.zeros(1)))})
        assert set(state.flat_state()) == {("w",), ("pair", 1)}
        assert not pm.failures


def test_the_core_works_without_any_dist_info(monkeypatch):
    """Zipapps, Bazel, PyInstaller: no metadata at all, built-ins only."""
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(()))
    with use_plugin_manager(new_plugin_manager()) as pm:
        assert pm.pending_entries() == []
        _, state = split({"w": Param(jnp.ones(2))})
        assert list(state.flat_state()) == [("w",)]


# --- lazy loading, per hook family ---------------------------------------------------------

LAZY = """
import json, sys

def loaded():
    names = ("bryo_nnx", "bryo_equinox", "equinox", "bryo_named", "bryo_xml", "bryo_yson",
             "lxml", "yt", "bryo_mox")
    return sorted(name for name in names if name in sys.modules)

steps = {}
import bryo_filters
bryo_filters.to_predicate(lambda p, v: True)
bryo_filters.to_predicate(lambda v: True)
steps["to_predicate"] = loaded()

import jax
import jax.numpy as jnp
from bryo_graph import NodeType, Param, get_partition_spec, node_types, split
split({"w": Param(jnp.ones(2)), "n": 3})
steps["split a dict"] = loaded()

import bryo_mox
mox = bryo_mox.make_mox(jnp.sin)(jnp.ones(2))
bryo_mox.loads(bryo_mox.dumps(mox, format="xml"), format="xml")
steps["xml round trip"] = loaded()

import equinox as eqx, jax
split(eqx.nn.Linear(2, 2, key=jax.random.key(0)))
steps["split an equinox model"] = loaded()
print(json.dumps(steps))
"""


@pytest.mark.slow  # a fresh interpreter imports jax
def test_plugins_load_lazily_per_family_and_key():
    result = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    steps = __import__("json").loads(result.stdout.strip().splitlines()[-1])
    assert steps["to_predicate"] == []  # no backend for a callable filter
    assert steps["split a dict"] == []  # builtins only: no backend's types were met
    assert steps["xml round trip"] == ["bryo_mox", "bryo_xml", "lxml"]  # not yson
    assert {"bryo_equinox", "equinox"} <= set(steps["split an equinox model"])
    assert "bryo_yson" not in steps["split an equinox model"]


def test_a_lazy_family_plugin_loads_on_first_use(bryo_fake_distributions, capsys):
    modules = bryo_fake_distributions.add("acme-bryo-hello", {"hello": HELLO}, group="bryo.cli")
    with use_plugin_manager(new_plugin_manager()):
        assert modules["hello"] not in sys.modules  # library code never needs the cli family
        assert bryo._cli.main(["hello", "plugins"]) == 0
    assert capsys.readouterr().out == "hello, plugins\n"


# --- a third-party plugin that raises, answers garbage, and conflicts -----------------------


def test_a_third_party_plugin_that_raises_answers_garbage_and_conflicts(
    bryo_fake_distributions, capsys
):
    bryo_fake_distributions.add(
        "acme-bryo-bad",
        {"acme-raises": RAISES, "acme-garbage": GARBAGE, "acme-tuples": CONFLICT},
        version="0.3",
        group="bryo.graph",
    )
    with use_plugin_manager(new_plugin_manager()) as pm, pytest.warns(Warning) as record:
        _, state = split({"w": Param(jnp.ones(2)), "pair": (Param(jnp.zeros(1)),)})
        assert set(state.flat_state()) == {("w",), ("pair", 0)}  # the rest keeps working
        failures = {failure.name: failure for failure in plugin_failures()}
        assert bryo._cli.main(["plugins", "--strict"]) == 1
    messages = [str(warning.message) for warning in record]
    assert set(failures) == {"acme-raises", "acme-garbage"}
    for name, error in [("acme-raises", "KeyError: 'a bug"), ("acme-garbage", "got <object")]:
        text = str(failures[name])
        assert f"bryo plugin {name!r} (distribution acme-bryo-bad) failed in hook" in text
        assert "`bryo_graph_node_types`" in text and error in text
        assert pm.is_blocked(name)  # disabled for the rest of the process
    [conflict] = [m for m in messages if "both answer" in m]
    assert "'acme-tuples' (acme-bryo-bad) and 'core-graph' (bryo-core-graph)" in conflict
    assert "for tuple; 'acme-tuples' wins" in conflict
    out = capsys.readouterr().out
    assert "FAILED bryo plugin 'acme-raises' (distribution acme-bryo-bad)" in out
    assert "FAILED bryo plugin 'acme-garbage' (distribution acme-bryo-bad)" in out


class _Labelled:
    """A value carrying its own axis names, and a graph node type, for two plugins to claim."""

    def __init__(self, array, names):
        self.array, self.names = array, names


jax.tree_util.register_pytree_node(
    _Labelled, lambda x: ((x.array,), x.names), lambda names, c: _Labelled(c[0], names)
)


def _claims(names: tuple[str, ...]):
    class Claims:
        @hookimpl
        def bryo_graph_node_types(self):
            flatten = lambda node: ([("array", node.array)], names)
            return [NodeType(_Labelled, flatten=flatten, unflatten=lambda c, a, ch: None)]

        @hookimpl
        def bryo_graph_logical_axes(self):
            return {_Labelled: lambda value: names}

    return Claims()


def test_every_table_follows_one_precedence_and_warns(bryo_plugin_manager):
    """Node types used to go to the later plugin and logical axes to the earlier one."""
    bryo_plugin_manager.register(_claims(("early",)), name="early")
    bryo_plugin_manager.register(_claims(("late",)), name="late")
    with pytest.warns(PluginConflictWarning) as record:
        node_type = node_types().lookup(_Labelled)
        spec = get_partition_spec({"x": _Labelled(jnp.ones(2), None)})
    assert node_type.flatten(_Labelled(1, None))[1] == ("late",)
    assert spec["x"] == jax.sharding.PartitionSpec("late")
    hooks = sorted(re.search(r"answer `(\w+)`", str(w.message)).group(1) for w in record)
    assert hooks == ["bryo_graph_logical_axes", "bryo_graph_node_types"]
    assert all("'late' wins" in str(w.message) for w in record)


def test_a_plugin_failing_to_import_is_reported_and_the_rest_keeps_working(
    bryo_fake_distributions, capsys
):
    bryo_fake_distributions.add("acme-broken", {"broken": BROKEN}, version="0.1")
    bryo_fake_distributions.add("acme-bryo-hello", {"hello": HELLO}, group="bryo.cli")
    with pytest.warns(RuntimeWarning, match=r"'broken' \(distribution acme-broken\).*boom"):
        pm = new_plugin_manager()
    with use_plugin_manager(pm):
        assert bryo._cli.main(["hello"]) == 0
        assert bryo._cli.main(["plugins", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bryo plugin 'broken' (distribution acme-broken) failed to load" in out


def test_a_model_whose_backend_failed_is_refused_not_taken_for_a_leaf(
    bryo_fake_distributions, monkeypatch
):
    """`split` of a model whose backend failed to load handed the model back as one State
    leaf (after a warning that is easy to miss); the next step failed far from the cause."""
    bryo_fake_distributions.add(
        "acme-layers-bryo", {"acme-layers": BROKEN}, group="bryo.graph.acme_layers"
    )
    model_class = type("MLP", (), {"__module__": "acme_layers.models"})
    with use_plugin_manager(new_plugin_manager()):
        with pytest.warns(RuntimeWarning, match="'acme-layers'"):
            with pytest.raises(PluginError) as raised:
                split(model_class())
        _, state = split({"w": Param(jnp.ones(2))})  # the rest keeps working
    assert list(state.flat_state()) == [("w",)]
    message = str(raised.value)
    assert "bryo cannot handle acme_layers.models.MLP: the `graph` plugin installed" in message
    assert "'acme-layers' (distribution acme-layers-bryo, entry point group " in message
    assert "bryo.graph.acme_layers) failed to load: ZeroDivisionError: boom at import" in message
    monkeypatch.setenv(BLOCK_ENV, "acme-layers")  # blocked on purpose: a plain value again
    with use_plugin_manager(new_plugin_manager()):
        model = model_class()
        assert split(model)[1] is model


def test_a_misspelt_hook_is_reported_and_bryo_keeps_working(
    bryo_fake_distributions, monkeypatch, capsys
):
    """It used to make every bryo program raise `PluginError` (and `bryo` exit 2)."""
    bryo_fake_distributions.add("acme-typo", {"typo": MISSPELT})
    bryo_fake_distributions.add("acme-bryo-hello", {"hello": HELLO}, group="bryo.cli")
    monkeypatch.setattr(_manager, "_manager", None)
    with pytest.warns(RuntimeWarning, match="'typo' .*unknown hook 'bryo_cli_command'"):
        assert bryo._cli.main(["hello"]) == 0
        _, state = split({"w": Param(jnp.ones(2))})
    assert list(state.flat_state()) == [("w",)]
    assert bryo._cli.main(["plugins"]) == 0
    assert bryo._cli.main(["plugins", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bryo plugin 'typo' (distribution acme-typo) failed to load: PluginError" in out
    assert "did you mean 'bryo_cli_commands'?" in out
    monkeypatch.setenv(BLOCK_ENV, "typo")
    assert "typo" not in _names(pm := new_plugin_manager()) and not pm.failures


# --- bryo plugins --strict asks every hook -------------------------------------------------

FILTER_RAISES = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_filter_predicate(filter):
        raise RuntimeError("a filter plugin that breaks when asked")
"""

FILTER_GARBAGE = """
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_filter_predicate(filter):
        return "a predicate, honest"
"""

SERIALIZER_GARBAGE = """
    import bryo_mox
    from bryo_plugins import hookimpl

    @hookimpl
    def bryo_mox_serializers():
        return ["json"]
"""

# A dataclass backend keyed by its distribution's name instead of its classes' module.
MISKEYED = """
    import dataclasses

    from bryo_graph import NodeType
    from bryo_plugins import hookimpl

    @dataclasses.dataclass
    class Dense:
        w: object

    Dense.__module__ = "acme_models.layers"

    @hookimpl
    def bryo_graph_node_types():
        return [NodeType(Dense, flatten=lambda node: ([("w", node.w)], None),
                         unflatten=lambda cls, aux, children: Dense(dict(children)["w"]))]
"""


def test_strict_asks_every_hook_of_every_lazy_family_once(bryo_fake_distributions, capsys):
    """`bryo plugins --strict` used to exit 0 here: it never called the hooks."""
    dists = bryo_fake_distributions
    dists.add("acme-filters", {"acme-raises": FILTER_RAISES}, group="bryo.filters")
    dists.add("acme-garbage", {"acme-garbage": FILTER_GARBAGE}, group="bryo.filters.acme")
    dists.add("acme-json", {"acme-json": SERIALIZER_GARBAGE}, group="bryo.serializers.json")
    with use_plugin_manager(new_plugin_manager()), pytest.warns(RuntimeWarning):
        assert bryo._cli.main(["plugins", "--strict"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if "FAILED" in line]
    assert len(failed) == 3, failed
    [raises] = [line for line in failed if "'acme-raises'" in line]
    assert "failed in hook `bryo_filter_predicate`: RuntimeError: a filter plugin" in raises
    [garbage] = [line for line in failed if "'acme-garbage'" in line]
    assert "answered 'a predicate, honest' about a probe" in garbage
    [json] = [line for line in failed if "'acme-json'" in line]
    assert "`bryo_mox_serializers`: PluginResultError: expected `bryo_mox.Serializer`s" in json


def test_a_backend_keyed_by_the_wrong_module_is_reported(bryo_fake_distributions, capsys):
    bryo_fake_distributions.add(
        "acme-dataclasses", {"acme-dataclasses": MISKEYED}, group="bryo.graph.acme_dataclasses"
    )
    with use_plugin_manager(new_plugin_manager()) as pm:
        with pytest.warns(RuntimeWarning, match="keyed by modules none of the types"):
            assert bryo._cli.main(["plugins"]) == 0
        assert bryo._cli.main(["plugins", "--strict"]) == 1
        [failure] = pm.failures
    assert failure.name == "acme-dataclasses" and failure.hook == "bryo_graph_node_types"
    message = str(failure)
    assert "entry points (bryo.graph.acme_dataclasses)" in message
    assert "(acme_models.layers.Dense)" in message
    assert "Key it by the top-level module of its classes (bryo.graph.acme_models)" in message
    assert "FAILED bryo plugin 'acme-dataclasses'" in capsys.readouterr().out


def test_a_backend_keyed_by_its_classes_module_passes(bryo_fake_distributions):
    bryo_fake_distributions.add(
        "acme-dataclasses", {"acme-dataclasses": MISKEYED}, group="bryo.graph.acme_models"
    )
    with use_plugin_manager(new_plugin_manager()) as pm:
        assert bryo._cli.main(["plugins", "--strict"]) == 0
        assert "acme-dataclasses" in _names(pm)


# --- threads -------------------------------------------------------------------------------

SPLIT_IN_THREADS = """
import threading
import equinox as eqx, jax
from bryo_graph import split

barrier = threading.Barrier(4)
errors = []

def work(seed):
    model = eqx.nn.Linear(2, 2, key=jax.random.key(seed))
    barrier.wait()  # the four threads meet the Equinox backend at once
    try:
        _, state = split(model)
        assert set(state.flat_state()) == {("weight",), ("bias",)}, state
    except Exception as error:
        errors.append(f"{type(error).__name__}: {str(error)[:300]}")

threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("errors:", errors)
"""


@pytest.mark.slow  # fresh interpreters: the backend must not be loaded yet
def test_threads_splitting_fresh_equinox_models_all_wait_for_the_backend():
    """Before the fix, 5 of 14 fresh processes (measured here) had a thread get `GraphError:
    ... no graph node` while another thread was still importing the Equinox backend."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", SPLIT_IN_THREADS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(6)
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert out.strip().splitlines()[-1] == "errors: []", out


# --- one-argument filters are a core rule --------------------------------------------------


@pytest.mark.parametrize("blocked", ["", "backend-equinox"])
def test_one_argument_filters_mean_the_same_with_or_without_the_equinox_plugin(
    monkeypatch, blocked
):
    import equinox as eqx

    monkeypatch.setenv(BLOCK_ENV, blocked)
    with use_plugin_manager(new_plugin_manager()) as pm:
        pm.load_all()
        assert ("backend-equinox" in _names(pm)) is not bool(blocked)
        assert to_predicate(eqx.is_inexact_array) == ValuePredicate(eqx.is_inexact_array)
        assert isinstance(to_predicate(lambda value: value.ndim == 2), ValuePredicate)
        two = lambda path, value: True
        assert to_predicate(two) is two
        model = {"kernel": Param(jnp.ones((2, 2))), "bias": Param(jnp.ones(2))}
        _, matrices, _ = split(model, lambda v: v.ndim == 2, ...)
        assert list(matrices.flat_state()) == [("kernel",)]


# --- the hooks are documented --------------------------------------------------------------

HOOK_ROW = re.compile(r"^\| `[\w-]+` .*\| `([\w.]+\.hookspecs)` \| (.+) \|$", re.MULTILINE)


def _documented_hooks() -> set[tuple[str, str]]:
    text = (ROOT / "docs" / "plugins.md").read_text()
    return {
        (module, hook)
        for module, hooks in HOOK_ROW.findall(text)
        for hook in re.findall(r"`(bryo_\w+)`", hooks)
    }


def test_the_docs_hook_table_lists_exactly_the_declared_hooks():
    import bryo  # noqa: F401  (declares every bryo package's hooks)

    declared = {
        (hook.owner, hook.name)
        for hook in describe_hooks(new_plugin_manager(load=False))
        if hook.owner.endswith(".hookspecs")
    }
    owners = {source.__name__ for source in hookspec_sources()}
    assert {owner for owner, _ in declared} <= owners
    assert _documented_hooks() == declared, (
        "docs/plugins.md's hook table and the hookspec modules differ: "
        f"undocumented {sorted(declared - _documented_hooks())}, "
        f"not declared {sorted(_documented_hooks() - declared)}"
    )


def test_the_docs_walk_through_the_code_the_scaffold_writes():
    from bryo._scaffold import names, render

    text = (ROOT / "docs" / "plugins.md").read_text()
    listings = dict(re.findall(r'^```python title="([\w/.]+)"\n(.*?)^```', text, re.M | re.S))
    serializer = render(names("bryo-json"), "serializer")
    backend = render(names("acme-layers"), "backend")
    assert listings["bryo_json/_plugin.py"] == serializer["src/bryo_json/_plugin.py"]
    assert listings["acme_layers/layers.py"] == backend["src/acme_layers/layers.py"]
    assert listings["acme_layers/_plugin.py"] == backend["src/acme_layers/_plugin.py"]
    for group in ("bryo.serializers.json", "bryo.graph.acme_layers"):
        assert f'[project.entry-points."{group}"]' in text


def test_describe_plugins_names_distribution_version_and_hooks(bryo_fake_distributions):
    bryo_fake_distributions.add("acme-bryo-hello", {"hello": HELLO}, version="2.0")
    infos = {info.name: info for info in describe_plugins(new_plugin_manager())}
    assert infos["hello"].distribution == "acme-bryo-hello"
    assert infos["hello"].version == "2.0"
    assert infos["hello"].hooks == ("bryo_cli_commands",)


# --- pytest: the fixtures are opt-in -------------------------------------------------------

UNRELATED = """
import sys

def test_nothing_imported_jax():
    assert "jax" not in sys.modules
    assert "bryo_plugins" not in sys.modules
"""

OPTED_IN = """
from bryo_plugins import get_plugin_manager, hookimpl

class P:
    @hookimpl
    def bryo_cli_commands(self, commands):
        pass

def test_a(bryo_plugin_manager):
    bryo_plugin_manager.register(P(), name="p")
    assert get_plugin_manager() is bryo_plugin_manager

def test_b(bryo_plugin_manager):
    assert bryo_plugin_manager.get_plugin("p") is None
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


@pytest.mark.slow  # fresh pytest processes
def test_an_unrelated_pytest_session_never_imports_jax(tmp_path):
    (tmp_path / "test_unrelated.py").write_text(UNRELATED)
    result = _pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.slow  # fresh pytest processes
@pytest.mark.parametrize("spelling", ["-p", "conftest"])
def test_the_fixtures_work_once_opted_in(tmp_path, spelling):
    (tmp_path / "test_uses_fixture.py").write_text(textwrap.dedent(OPTED_IN))
    if spelling == "conftest":
        (tmp_path / "conftest.py").write_text('pytest_plugins = ["bryo_pytree.testing"]\n')
        result = _pytest(tmp_path)
    else:
        result = _pytest(tmp_path, "-p", "bryo_plugins.testing")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
