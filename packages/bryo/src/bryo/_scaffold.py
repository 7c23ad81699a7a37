"""`bryo plugin new NAME --kind serializer|backend|cli`: a complete plugin distribution.

It writes what docs/plugins.md walks through: a `pyproject.toml` whose entry point names
the right group and key, a working hook implementation, and tests written with
`bryo_plugins.testing` that pass as generated once the distribution is installed
(`pip install -e DIR`). The three kinds:

- `serializer`: a MoX file format, MoX documents as JSON (`bryo_mox_serializers`), keyed
  by its format name;
- `backend`: graph nodes for a small module class of the plugin's own, frozen dataclasses
  whose array fields are `Param`s (`bryo_graph_node_types`), keyed by the top-level module
  of the classes (the plugin's package);
- `cli`: a `bryo <command>` subcommand (`bryo_cli_commands`).
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template
from typing import NamedTuple

KINDS = ("serializer", "backend", "cli")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*$")


class ScaffoldError(Exception):
    """A name or folder `bryo plugin new` cannot use; the message says how to fix it."""


class Names(NamedTuple):
    """The names one scaffold uses, all derived from the distribution's name.

    Attributes:
        distribution: the distribution (`acme-json`), as given.
        package: its import name (`acme_json`).
        short: the name with a leading `bryo-` dropped (`json`), for the format or command.
    """

    distribution: str
    package: str
    short: str

    @property
    def format(self) -> str:
        """The serializer's format name and file extension word (`json`)."""
        return self.short.replace("-", "").replace("_", "").replace(".", "").lower()

    @property
    def command(self) -> str:
        """The CLI kind's command (`bryo hello`)."""
        return re.sub(r"[_.]+", "-", self.short).lower()


def names(distribution: str) -> Names:
    """The names of a scaffold for `distribution`.

    Raises:
        ScaffoldError: not a distribution name Python can import as a package.
    """
    if not _NAME.match(distribution):
        raise ScaffoldError(
            f"`NAME` {distribution!r} must be a distribution name: letters and digits, "
            "words joined by '-', '_' or '.', starting with a letter (`acme-json`)."
        )
    package = re.sub(r"[-.]+", "_", distribution).lower()
    short = re.sub(r"^bryo[-_.]", "", distribution, flags=re.IGNORECASE)
    if keyword.iskeyword(package) or package in _TAKEN or package == "bryo":
        raise ScaffoldError(
            f"`NAME` {distribution!r} would make the package {package!r}, which is taken; "
            "pick another name."
        )
    return Names(distribution, package, short)


_TAKEN = frozenset(
    {
        "bryo_plugins",
        "bryo_pytree",
        "bryo_filters",
        "bryo_graph",
        "bryo_rngs",
        "bryo_scan",
        "bryo_transforms",
        "bryo_mox",
        "bryo_training",
        "bryo_nnx",
        "bryo_equinox",
        "bryo_flax",
        "bryo_named",
        "bryo_xml",
        "bryo_yson",
    }
)


def write(distribution: str, kind: str, folder: Path | None = None) -> list[Path]:
    """Write the scaffold of a `kind` plugin named `distribution` into `folder`.

    Args:
        distribution: the distribution's name (`acme-json`).
        kind: `"serializer"`, `"backend"` or `"cli"`.
        folder: where to write it; `./<distribution>` by default. It must not exist, or
            be empty.

    Returns:
        The files written, in order.

    Raises:
        ScaffoldError: a bad name or kind, or a folder that is not empty.
    """
    if kind not in KINDS:
        raise ScaffoldError(f"`--kind` must be one of {', '.join(KINDS)}, got {kind!r}.")
    found = names(distribution)
    folder = Path(distribution) if folder is None else folder
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScaffoldError(f"{folder} exists and is not an empty folder; pass `-o` a new folder.")
    files = render(found, kind)
    written = []
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def render(found: Names, kind: str) -> dict[str, str]:
    """`{relative path: text}` of every file of the scaffold."""
    values = {
        "distribution": found.distribution,
        "package": found.package,
        "format": found.format,
        "command": found.command,
        "entry_points": "\n".join(
            _ENTRY_POINT.substitute(
                group=group.substitute(package=found.package, format=found.format),
                distribution=found.distribution,
                package=found.package,
            )
            for group in _GROUPS[kind]
        ),
        "plugin_doc": Template(_PLUGIN_DOCS[kind]).substitute(
            package=found.package, format=found.format, command=found.command
        ),
        "dependencies": _DEPENDENCIES[kind],
        "extras": _EXTRAS.get(kind, ""),
    }
    package = f"src/{found.package}"
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"{package}/__init__.py": _INIT,
        f"{package}/py.typed": "",
        f"{package}/_plugin.py": _PLUGINS[kind],
        "tests/conftest.py": _CONFTEST,
        "tests/test_plugin.py": _TESTS[kind],
    }
    if kind == "backend":
        files[f"{package}/layers.py"] = _LAYERS
    return {path: Template(text).substitute(values) for path, text in files.items()}


_GROUPS = {
    "serializer": (Template("bryo.serializers.$format"),),
    # one plugin under two keys: its graph nodes, and its module calls for make_mox
    "backend": (Template("bryo.graph.$package"), Template("bryo.mox.$package")),
    "cli": (Template("bryo.cli"),),
}

_PLUGIN_DOCS = {
    "serializer": "MoX files in the `$format` format (JSON)",
    "backend": "bryo graph nodes for the module classes of `$package.layers`",
    "cli": "the `bryo $command` command",
}

_DEPENDENCIES = {
    "serializer": '"bryo-core-plugins~=0.1.0", "bryo-mox-ir~=0.1.0", "numpy"',
    "backend": '"bryo-core-plugins~=0.1.0", "bryo-core-graph~=0.1.0", "jax>=0.7.2"',
    "cli": '"bryo~=0.1.0"',
}

_EXTRAS = {
    "backend": (
        "\n# make_mox sees the module calls (the optional `bryo_mox_interceptor` hook)\n"
        'mox = ["bryo-mox-ir~=0.1.0"]'
    )
}

_ENTRY_POINT = Template('[project.entry-points."$group"]\n$distribution = "$package._plugin"\n')

_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "$distribution"
version = "0.1.0"
description = "A bryo plugin: $plugin_doc."
readme = "README.md"
requires-python = ">=3.11"
# The bryo packages whose hooks the plugin implements or whose names it imports.
dependencies = [$dependencies]

[project.optional-dependencies]
test = ["bryo~=0.1.0", "bryo-core-plugins[testing]~=0.1.0", "pytest"]$extras

# The group says when bryo imports the plugin (docs/plugins.md, "Loading"); the name is
# the plugin's name in bryo (`bryo plugins`, BRYO_BLOCK_PLUGINS).
$entry_points
[tool.hatch.build.targets.wheel]
packages = ["src/$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

_README = """\
# $distribution

A bryo plugin: $plugin_doc. Made by `bryo plugin new`; see bryo's docs/plugins.md.

    pip install -e '.[test]'
    pytest
    bryo plugins --strict      # loads every plugin and asks each hook once
"""

_INIT = '''\
"""$distribution: a bryo plugin ($plugin_doc).

bryo imports `$package._plugin` through the entry point in pyproject.toml.
"""
'''

_CONFTEST = '''\
"""bryo's pytest fixtures (`bryo_plugin_manager`, ...): opt-in, enabled here."""

pytest_plugins = ["bryo_plugins.testing"]
'''

_SERIALIZER = '''\
"""The `$format` MoX format: a bryo plugin implementing `bryo_mox_serializers`.

Serializers translate `bryo_mox.document` trees (`DocNode`) to and from their syntax;
bryo converts between MoX and documents. A `DocNode` is written as a JSON object:

    {"tag": "mox", "attrs": {name: encoded text}, "consts": [[name, type, base64]],
     "inputs": [port], "outputs": [port], "children": [node], "results": [port]}

and a port as `[name, type, literal value text or null, bind or null]`. Attribute values
and literal values go through `encode_attr`/`decode_attr` (a safe parser, no `eval`),
constants through `const_text`/`read_const` (counted against the load's array budget
before they are allocated). `loads` reads untrusted files: anything malformed is a
`MoxSerializationError` naming where it is, and the load's budgets bound the size, the
nesting and the number of nodes before they are built.
"""

from __future__ import annotations

import json
from typing import Any

from bryo_mox import MoxError, MoxSerializationError, Serializer
from bryo_mox.document import (
    DocNode,
    Port,
    Source,
    attr_texts,
    const_text,
    current_budget,
    decode_attr,
    encode_attr,
    read_const,
)
from bryo_plugins import hookimpl

FORMAT = "$format"
EXTENSIONS = (".mox.$format",)
PORTS = ("inputs", "outputs", "results")


@hookimpl
def bryo_mox_serializers() -> list[Serializer]:
    """The format: its name, the file extensions it claims, and its two functions."""
    return [Serializer(FORMAT, EXTENSIONS, dumps, loads)]


def dumps(doc: DocNode) -> str:
    """The document as JSON text."""
    return json.dumps(_node(doc), separators=(",", ":"))


def _node(doc: DocNode) -> dict[str, Any]:
    node: dict[str, Any] = {"tag": doc.tag, "attrs": attr_texts(doc)}
    node["consts"] = [[c.name, c.type, const_text(c)] for c in doc.consts]
    for kind in PORTS:
        node[kind] = [_port(port) for port in getattr(doc, kind)]
    node["children"] = [_node(child) for child in doc.children]
    return node


def _port(port: Port) -> list[Any]:
    value = None if port.name is not None else encode_attr(port.value)
    return [port.name, port.type, value, port.bind]


def loads(data: str | bytes) -> DocNode:
    """The document of JSON text, checked piece by piece.

    Raises:
        MoxSerializationError: the text is not JSON, or not a document (the error names
            the path in the JSON tree, `/children/0/inputs/1`).
        MoxLimitError: the file is over a budget of the load (size, nesting, nodes).
    """
    budget = current_budget(len(data))
    budget.check_size()
    try:
        tree = json.loads(data)
    except json.JSONDecodeError as error:
        raise MoxSerializationError(
            f"not JSON: {error.msg}", line=error.lineno, position=error.colno
        ) from None
    except RecursionError:
        raise MoxSerializationError("the JSON nests too deeply to be a MoX") from None
    return _Reader(budget).node(tree, "", 0)


class _Reader:
    def __init__(self, budget: Any) -> None:
        self.budget = budget
        self.count = 0

    def node(self, tree: object, path: str, depth: int) -> DocNode:
        self.budget.check_depth(depth, path=path or "/")
        obj = _expect(tree, dict, path or "/", "an object")
        source = Source(path=path or "/")
        doc = DocNode(_expect(obj.get("tag"), str, f"{path}/tag", "a string"), source=source)
        attrs = _expect(obj.get("attrs", {}), dict, f"{path}/attrs", "an object")
        for name, text in attrs.items():
            where = f"{path}/attrs/{name}"
            doc.attrs[name] = _decoded(_expect(text, str, where, "a string"), where)
        for index, const in enumerate(_items(obj, "consts", path)):
            where = f"{path}/consts/{index}"
            name, const_type, text = _fields(const, 3, where)
            doc.consts.append(read_const(name, const_type, text, Source(path=where)))
        for kind in PORTS:
            ports = getattr(doc, kind)
            for index, port in enumerate(_items(obj, kind, path)):
                ports.append(self.port(port, f"{path}/{kind}/{index}"))
        for index, child in enumerate(_items(obj, "children", path)):
            doc.children.append(self.node(child, f"{path}/children/{index}", depth + 1))
        self.count += 1
        self.budget.check_nodes(self.count, path=path or "/")
        return doc

    def port(self, tree: object, path: str) -> Port:
        items = _expect(tree, list, path, "a list [name, type, value, bind]")
        if len(items) != 4:
            raise MoxSerializationError(
                f"expected [name, type, value, bind], got {len(items)} items", path=path
            )
        name, port_type, value, bind = items
        for item, what in ((name, "name"), (bind, "bind"), (value, "value")):
            _expect(item, (str, type(None)), f"{path}/{what}", "a string or null")
        _expect(port_type, str, f"{path}/type", "a string")
        literal = None if value is None else _decoded(value, path)
        self.count += 1
        return Port(name, port_type, literal, bind, source=Source(path=path))


def _items(obj: dict[str, Any], key: str, path: str) -> list[Any]:
    return _expect(obj.get(key, []), list, f"{path}/{key}", "a list")


def _fields(tree: object, count: int, path: str) -> list[str]:
    items = _expect(tree, list, path, f"a list of {count} strings")
    if len(items) != count or not all(isinstance(item, str) for item in items):
        raise MoxSerializationError(f"expected a list of {count} strings", path=path)
    return items


def _decoded(text: str, path: str) -> Any:
    try:
        return decode_attr(text)
    except MoxError as error:
        raise MoxSerializationError(getattr(error, "message", str(error)), path=path) from None


def _expect(value: Any, kind: type | tuple[type, ...], path: str, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise MoxSerializationError(
            f"expected {what}, got {type(value).__name__}", path=path or "/"
        )
    return value
'''

_SERIALIZER_TESTS = '''\
"""The `$format` format round-trips MoX, and refuses malformed files saying where.

`bryo_plugin_manager` (from `bryo_plugins.testing`) is a fresh plugin manager with the
installed plugins, this one included: it loads through its entry point, as for users.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import bryo_mox
from bryo_mox import MoxSerializationError
from bryo_mox.testing import MLP, Counter, LoRA, Linear, ResBlock, ToyBackend, assert_round_trip

FORMAT = "$format"
X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


@pytest.fixture
def toy(bryo_plugin_manager):
    """bryo_mox's toy modules, seen as module calls by make_mox."""
    bryo_plugin_manager.register(ToyBackend())
    return bryo_plugin_manager


@jax.custom_vjp
def clipped(x):
    return x * 1.0


clipped.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))


def scanned(x):
    return jax.lax.scan(lambda c, row: (c + row, c * row), jnp.zeros(4), x)


def test_the_format_is_found_through_the_entry_point(bryo_plugin_manager):
    mox = bryo_mox.make_mox(jnp.sin)(X)
    text = bryo_mox.dumps(mox, format=FORMAT)
    assert bryo_plugin_manager.get_plugin("$distribution") is not None
    assert bryo_mox.eval_mox(bryo_mox.loads(text, format=FORMAT), X).shape == X.shape


@pytest.mark.parametrize(
    "make",
    [
        lambda key: (ResBlock(4, key=key), X),
        lambda key: (MLP((4, 8, 3), key=key), X),
        lambda key: (LoRA(Linear(4, 3, key=key), 2, key=key), X),
        lambda key: (Counter(), X),
    ],
    ids=["resblock", "mlp", "lora", "stateful"],
)
def test_module_calls_round_trip(toy, make):
    model, x = make(jax.random.key(0))
    mox = bryo_mox.make_mox(lambda m, v: m(v))(model, x)
    back = assert_round_trip(mox, FORMAT, model, x)
    calls = [node.name for node in bryo_mox.query("//module_call", back)]
    assert calls == [node.name for node in bryo_mox.query("//module_call", mox)]


@pytest.mark.parametrize(
    "function",
    [
        lambda x: jnp.tanh(x) @ jnp.ones((4, 2)),  # a constant
        lambda x: jax.nn.relu(x) * 3.0,  # custom_jvp
        lambda x: clipped(x) * 4.0,  # custom_vjp, its rule written as a region
        lambda x: scanned(x),  # a scan: a region and tuples of results
        lambda x: jax.random.normal(jax.random.key(1), x.shape) + x,  # PRNG keys
        lambda x: jnp.where(x > 0, x, 0.5).astype(jnp.bfloat16),  # literals and dtypes
    ],
    ids=["const", "custom-jvp", "custom-vjp", "scan", "keys", "dtypes"],
)
def test_functions_round_trip(bryo_plugin_manager, function):
    mox = bryo_mox.make_mox(function)(X)
    assert_round_trip(mox, FORMAT, X)


def test_a_file_round_trips(bryo_plugin_manager, tmp_path):
    mox = bryo_mox.make_mox(jnp.cos)(X)
    path = tmp_path / "model.mox.$format"
    bryo_mox.dump(mox, path)  # the format is chosen by the extension
    assert bryo_mox.load(path).nodes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "expected an object"),
        ('{"tag": 3}', "expected a string, got int (at path /tag)"),
        ('{"tag": "mox", "inputs": [["x"]]}', "expected [name, type, value, bind]"),
        ('{"tag": "mox", "consts": [["c", "f32[2]", "!!"]]}', "path /consts/0"),
    ],
)
def test_malformed_files_are_refused_saying_where(bryo_plugin_manager, text, message):
    with pytest.raises(MoxSerializationError, match=re.escape(message)):
        bryo_mox.loads(text, format=FORMAT)
'''

_BACKEND = '''\
"""bryo graph nodes for `$package.layers`: a bryo plugin implementing `bryo_graph_node_types`.

bryo's graph functions (`split`, `merge`, `state`, `update`, the lifted transforms) walk
a model through the node types plugins declare. The classes of `$package.layers` are
frozen dataclasses: a node's children are its fields, its arrays are `Param`s in a
`State`, and it is rebuilt from its children (an immutable node, as Equinox's modules).

The entry point is keyed `bryo.graph.$package`: bryo imports this plugin the first time
its graph functions meet a class whose MRO holds a class of the top-level module
`$package`, so `split(model)` loads it, whatever the order of imports. It is keyed
`bryo.mox.$package` too: `make_mox` then sees each module call (`bryo_mox_interceptor`,
optional: it needs bryo-mox-ir, the `mox` extra).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from bryo_graph import NodeType, Param, iter_graph, merge, split
from bryo_plugins import CallRouter, hookimpl

from .layers import Module


def flatten(node: Module) -> tuple[list[tuple[str, object]], Hashable]:
    """`(children, aux)`: every field as `(name, value)`, in a stable order; no aux."""
    return [(field.name, getattr(node, field.name)) for field in dataclasses.fields(node)], None


def unflatten(cls: type[Module], aux: Hashable, children: list[tuple[str, object]]) -> Module:
    """The node rebuilt from its children (already rebuilt themselves)."""
    return cls(**dict(children))


@hookimpl
def bryo_graph_node_types() -> list[NodeType]:
    """One node type for `Module` and every subclass; raw arrays are `Param`s."""
    return [NodeType(Module, flatten=flatten, unflatten=unflatten, leaf_type=Param)]


def route(
    handler: Callable[..., Any],
    call: Callable[..., Any],
    module: Module,
    parent: tuple[object, str] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """One module call while `make_mox` traces: describe it and hand it to `handler`."""
    from bryo_mox.interception import module_info, module_path, static_attributes

    name = module_path(module, parent, iter_graph)  # "hidden", "out", ...
    graphdef, state = split(module)

    def pure(new_state: Any, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        rebuilt = merge(graphdef, new_state)
        with router.running(rebuilt, name):
            return new_state, call(rebuilt, *call_args, **call_kwargs)

    def write_back(new_state: Any) -> None:
        """Nothing to write: a call cannot change a frozen module."""

    fields = ((field.name, getattr(module, field.name)) for field in dataclasses.fields(module))
    info = module_info(module, name, static_attributes(fields))
    return handler(info, state, pure, write_back, args, kwargs)


router = CallRouter("$package", route)


@contextlib.contextmanager
def intercept(handler: Callable[..., Any]) -> Iterator[None]:
    """Route every `Module` call to `handler` inside the block (`__call__` is wrapped only
    while `make_mox` traces)."""
    with router.patching(Module), router.active(handler):
        yield


@hookimpl(optionalhook=True)  # declared by bryo-mox-ir, an optional dependency (extra)
def bryo_mox_interceptor() -> Callable[..., Any]:
    """Module calls for `make_mox`."""
    return intercept
'''

_LAYERS = '''\
"""The module classes this plugin teaches bryo: frozen dataclasses of arrays and modules."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Module:
    """The base class: subclasses are frozen dataclasses (bryo rebuilds them)."""


@dataclasses.dataclass(frozen=True)
class Linear(Module):
    """`x @ weight + bias`."""

    weight: jax.Array
    bias: jax.Array

    @classmethod
    def create(cls, in_features: int, out_features: int, *, key: jax.Array) -> Linear:
        weight = jax.random.normal(key, (in_features, out_features)) / in_features**0.5
        return cls(weight, jnp.zeros((out_features,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.weight
        return y + jnp.broadcast_to(self.bias, y.shape)


@dataclasses.dataclass(frozen=True)
class MLP(Module):
    """Two `Linear`s with a ReLU between them."""

    hidden: Linear
    out: Linear

    @classmethod
    def create(cls, sizes: tuple[int, int, int], *, key: jax.Array) -> MLP:
        first, second = jax.random.split(key)
        return cls(
            Linear.create(sizes[0], sizes[1], key=first),
            Linear.create(sizes[1], sizes[2], key=second),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.relu(self.hidden(x)))
'''

_BACKEND_TESTS = '''\
"""bryo's graph functions on `$package.layers`, the backend loaded through its entry point.

`bryo_plugin_manager` (from `bryo_plugins.testing`) is a fresh plugin manager with the
installed plugins: the first `split` of a model loads this one, as it will for users.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import bryo
from bryo_graph import Param, merge, split, state
from $package.layers import MLP, Linear

X = jnp.ones((2, 3))


def model() -> MLP:
    return MLP.create((3, 4, 2), key=jax.random.key(0))


def test_the_backend_loads_when_a_model_is_split(bryo_plugin_manager):
    assert bryo_plugin_manager.get_plugin("$distribution") is None
    split(model())
    assert bryo_plugin_manager.get_plugin("$distribution") is not None
    assert not bryo_plugin_manager.failures


def test_split_finds_every_array_as_a_param(bryo_plugin_manager):
    _, params = split(model())
    flat = params.flat_state()
    assert set(flat) == {
        ("hidden", "weight"), ("hidden", "bias"), ("out", "weight"), ("out", "bias")
    }
    assert all(isinstance(variable, Param) for variable in flat.values())


def test_merge_rebuilds_the_model(bryo_plugin_manager):
    original = model()
    graphdef, params = split(original)
    rebuilt = merge(graphdef, params)
    assert isinstance(rebuilt, MLP) and isinstance(rebuilt.hidden, Linear)
    np.testing.assert_allclose(rebuilt(X), original(X))


def test_a_gradient_step_through_split_and_merge(bryo_plugin_manager):
    graphdef, params = split(model())

    def loss(params):
        return jnp.sum(merge(graphdef, params)(X) ** 2)

    grads = jax.grad(loss)(params)
    stepped = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    assert loss(stepped) < loss(params)
    assert set(state(merge(graphdef, stepped)).flat_state()) == set(params.flat_state())


def test_make_mox_sees_the_module_calls(bryo_plugin_manager):
    import bryo_mox

    original = model()
    mox = bryo_mox.make_mox(lambda model, x: model(x))(original, X)
    calls = [(call.info.type, call.info.name) for call in bryo_mox.query("//module_call", mox)]
    assert calls == [
        ("$package.layers.MLP", ""),
        ("$package.layers.Linear", "hidden"),
        ("$package.layers.Linear", "out"),
    ]
    np.testing.assert_allclose(bryo_mox.eval_mox(mox, original, X), original(X), rtol=1e-6)


def test_bryo_plugins_strict_passes(bryo_plugin_manager, capsys):
    from bryo._cli import main

    assert main(["plugins", "--strict"]) == 0, capsys.readouterr().out
    assert bryo.__version__
'''

_CLI = '''\
"""`bryo $command`: greets someone. A bryo plugin implementing `bryo_cli_commands`.

The hook receives a `bryo.cli.Commands` facade (never argparse objects): each
`add_command(name, help, handler, arguments)` adds `bryo <name>`; the handler gets the
parsed `argparse.Namespace` and returns the exit code.
"""

from __future__ import annotations

import argparse

from bryo.cli import Argument, Commands
from bryo_plugins import hookimpl


def greet(args: argparse.Namespace) -> int:
    """Print the greeting; exit code 0."""
    greeting = f"hello, {args.who}"
    print(greeting.upper() if args.loud else greeting)
    return 0


@hookimpl
def bryo_cli_commands(commands: Commands) -> None:
    commands.add_command(
        "$command",
        "say hello",
        greet,
        [
            Argument("who", nargs="?", default="world", help="whom to greet"),
            Argument("--loud", flag=True, help="shout"),
        ],
    )
'''

_CLI_TESTS = '''\
"""`bryo $command`, added through the plugin's entry point (group `bryo.cli`).

`bryo_plugin_manager` (from `bryo_plugins.testing`) is a fresh plugin manager with the
installed plugins: `main` loads this one as the `bryo` command does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from bryo._cli import main


def test_the_command_runs(bryo_plugin_manager, capsys):
    assert main(["$command", "bryo"]) == 0
    assert capsys.readouterr().out == "hello, bryo\\n"


def test_its_options(bryo_plugin_manager, capsys):
    assert main(["$command", "--loud"]) == 0
    assert capsys.readouterr().out == "HELLO, WORLD\\n"
    with pytest.raises(SystemExit) as info:
        main(["$command", "--no-such-option"])
    assert info.value.code == 2


def test_bryo_plugins_lists_it_and_strict_passes(bryo_plugin_manager, capsys):
    assert main(["plugins", "--strict"]) == 0
    assert "$distribution" in capsys.readouterr().out


def test_the_installed_command(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bryo", "$command", "installed"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello, installed\\n"
'''

_PLUGINS = {"serializer": _SERIALIZER, "backend": _BACKEND, "cli": _CLI}
_TESTS = {"serializer": _SERIALIZER_TESTS, "backend": _BACKEND_TESTS, "cli": _CLI_TESTS}
