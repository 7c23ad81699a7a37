"""The serialization document: a plain tree between a MoX and a file format.

`to_document(mox)` names every variable and writes each node as a `DocNode` (a tag, typed
attributes, input/output ports with their types, constants, children, results);
`from_document(doc)` rebuilds a MoX from it (see `_load.py`). Serializer plugins only
translate `DocNode` trees to and from their syntax, so every format shares one schema:

- the root has tag `mox`, its `consts`, `inputs` (the traced arguments' leaves, then
  the extra parameters named by attr `extra`), `children` and `results`;
- a `module_call` has attrs `type` (short class name), `qualtype` (dotted path), `name`,
  `state_inputs`, `state_outputs` and the module's static attributes; its `inputs` are
  the caller's atoms (`bind` names the body's variable when it differs), its `outputs`
  the caller's variables, its `children` and `results` the body;
- an equation has the primitive's name as tag, its params as attrs, and one child
  `region` (attrs `param`, `index`, `closed`) per sub-jaxpr, built like a module body;
  custom derivative equations add a `jvp` or `vjp` region holding their rule.

Constants hold numpy arrays in their storage layout (`storage_layout`: PRNG key arrays
as their key data), written as base64 text (`const_text`, `read_const`). Attr values are
Python values (ints, floats, bools, strings, `None`, tuples, numpy dtypes and arrays, jax
enums and named tuples); formats without such types write them with
`encode`/`encode_attr` and read them back with `decode`/`decode_attr` (a safe parser, no
`eval`; `AttrReader` caches it for one file). Types are strings (`type_str`,
`parse_type`): `f32[2,3]`, `f32[]{weak}`, `key<fry>[]`. Attribute names must be XML
names that XPath can query (`ATTR_NAME`).

Readers record where each node, port and constant is in the file (`Source`) so that
`from_document` can say where a problem is; they run under the load's budgets
(`Limits`, `current_budget`), which count the array bytes a file declares before they
are allocated.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import jax
import numpy as np
from jax.extend.core import Var
from lxml import etree

from bryo_pytree import BoundedCache, PyTreeDef

from ._attrs import CUSTOM_ATTRS as CUSTOM_ATTRS
from ._attrs import JIT_ATTRS as JIT_ATTRS
from ._attrs import RESERVED_TAGS, equation_attrs, is_xml_name, module_attrs, tree_example
from ._codec import Unencodable, plain_number
from ._codec import decode as decode
from ._codec import decode_array as decode_array
from ._codec import decode_attr as decode_attr
from ._codec import encode as encode
from ._codec import encode_array as encode_array
from ._codec import encode_attr as encode_attr
from ._codec import value_key as value_key
from ._errors import MoxError, MoxSerializationError
from ._ir import (
    CUSTOM_DERIVATIVE_NAMES,
    RESERVED_ATTRS,
    Block,
    Equation,
    Literal,
    ModuleCall,
    Mox,
    Node,
)
from ._limits import MAX_DEPTH as MAX_DEPTH
from ._limits import Budget as Budget
from ._limits import Limits as Limits
from ._limits import current_budget as current_budget
from ._limits import loading as loading
from ._pretty import Namer
from ._treespec import TreeSpec
from ._types import from_storage as from_storage
from ._types import parse_type as parse_type
from ._types import storage_layout as storage_layout
from ._types import to_storage
from ._types import type_str as type_str

MODULE_ATTRS = RESERVED_ATTRS
#: Attribute names a file may use: XML names that XPath can query.
ATTR_NAME = re.compile(r"^(?![Xx][Mm][Ll])[A-Za-z_][A-Za-z0-9_.-]*$")


class Source(NamedTuple):
    """Where a node, port or constant is in the file it was read from.

    Attributes:
        line: 1-based line (text formats).
        position: 1-based column on that line.
        path: the path in the format's tree (YSON: `/0/3/@inputs/1`).
        hint: what `resolve` needs to find the line or position (a tag, an offset).
        resolve: `resolve(source) -> source` with the line and position filled in; called
            only when an error is raised, for readers that find positions lazily.
    """

    line: int | None = None
    position: int | None = None
    path: str | None = None
    hint: Any = None
    resolve: Callable[[Source], Source] | None = None

    def error(
        self, message: str, kind: type[MoxSerializationError] = MoxSerializationError
    ) -> MoxSerializationError:
        """A `MoxSerializationError` (or `kind`) located here."""
        where = self.resolve(self) if self.resolve is not None else self
        return kind(message, line=where.line, position=where.position, path=where.path)


NOWHERE = Source()
#: The `hint` of a `Source` that a reader gives every port of one list (instead of a
#: source per port, for files of many ports): its `path`, if any, ends where the port's
#: index goes (`/0/3/@inputs/`), and `port_source` makes each port's own source from it,
#: a `PortAt` in its `hint` (for readers that find a port from its node: XML's).
PORT_LIST = "<the ports of a list>"


class PortAt(NamedTuple):
    """The `hint` `port_source` gives the resolver of a `PORT_LIST` source: the port is
    the `index`-th of `node`'s `kind` (`"inputs"`, `"outputs"` or `"results"`)."""

    node: DocNode
    kind: str
    index: int


def port_source(node: DocNode, port: Port) -> Source | None:
    """Where `port` of `node` is in the file: its own `source`, or its node's when it has
    none. A source shared by ports (`PORT_LIST`) gets the port's index (in its path, and
    as a `PortAt` hint) when an error is raised there (found then: it is not kept)."""
    source = port.source
    if source is None:
        return node.source
    if source.hint is not PORT_LIST:
        return source
    return Source(source.line, source.position, source.path, (source, node, port), _in_list)


def _in_list(lazy: Source) -> Source:
    shared, node, port = lazy.hint
    for kind in ("inputs", "outputs", "results"):
        for index, other in enumerate(getattr(node, kind)):
            if other is port and other.source is shared:
                path = None if shared.path is None else f"{shared.path}{index}"
                found = shared._replace(path=path, hint=PortAt(node, kind, index))
                return found.resolve(found) if found.resolve is not None else found
    return shared._replace(hint=None, resolve=None)


#: `new_source((line, position, path, hint, resolve))`: a `Source` made without the
#: named tuple's Python-level `__new__`, for readers that make one per port.
new_source = cast(Callable[[tuple[Any, ...]], Source], functools.partial(tuple.__new__, Source))


def located(error: MoxError, source: Source | None) -> MoxSerializationError:
    """`error` as a `MoxSerializationError` located at `source` (unless it has a place)."""
    if isinstance(error, MoxSerializationError) and (
        error.line is not None or error.position is not None or error.path is not None
    ):
        return error
    kind = type(error) if isinstance(error, MoxSerializationError) else MoxSerializationError
    message = getattr(error, "message", None) or str(error)
    return (source or NOWHERE).error(message, kind)


@dataclass(slots=True)
class Port:
    """A typed value flowing into or out of a node.

    Attributes:
        name: the variable's name; `None` for a literal.
        type: its type string, `f32[2,3]`.
        value: the literal's value (a Python scalar) when `name` is `None`.
        bind: for module-call inputs and region inputs: the name of the body's variable,
            when it differs from `name`.
        source: where the port is in the file it was read from.
    """

    name: str | None
    type: str
    value: Any = None
    bind: str | None = None
    source: Source | None = field(default=None, compare=False)


@dataclass
class Const:
    """A constant of a block (arrays closed over by the traced function).

    `data` is the array as files store it: for a PRNG key type (`key<fry>[3]`) its key
    data (`u32[3,2]`); `storage_layout(parse_type(type))` gives the dtype and shape.
    """

    name: str
    type: str
    data: np.ndarray
    source: Source | None = field(default=None, compare=False)


def const_text(const: Const) -> str:
    """A constant's data as files write it: base64 of its little-endian bytes."""
    return encode_array(const.data)


def read_const(name: str, type: str, text: str, source: Source | None = None) -> Const:
    """A constant from its name, type and base64 data (`const_text`), within the budget.

    Raises:
        MoxSerializationError: the type or the data is malformed, located at `source`.
        MoxLimitError: the array is over the load's array budget.
    """
    try:
        dtype, shape = storage_layout(parse_type(type))
        data = decode_array(text, dtype, shape, f"constant `{name}`")
    except MoxError as error:
        raise located(error, source) from None
    return Const(name, type, data, source)


#: Attribute texts decoded to immutable values, for every load of this process: a
#: model's files repeat their params' texts (`(((1,), (0,)), ((), ()))`, `relu`), each
#: of which `decode_attr` parses with `ast` (a bare name fails to parse first), a few
#: percent of loading an MLP. `decode_attr` is a function of the text alone; arrays are
#: decoded (and counted against the budget) each time. Bounded: 4,096 texts of at most
#: 512 characters.
_DECODED_ATTRS: BoundedCache[tuple[Any]] = BoundedCache(4096)
_MAX_DECODED_ATTR_TEXT = 512
#: Plain numbers (`plain_number`) an `AttrReader` keeps at most: a model's file repeats a
#: few dozen literal values.
_MAX_FILE_NUMBERS = 1 << 12


class AttrReader:
    """`decode_attr` with a cache for one file (and `_DECODED_ATTRS`, for the process):
    files repeat the same attribute texts, and the same sets of attributes (`attrs`,
    `decoded_attrs`).

    Only immutable values are cached; arrays are decoded (and counted) each time.
    """

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}
        self._attrs: dict[Any, dict[str, Any]] = {}

    def attrs(self, items: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> dict[str, Any]:
        """An element's attributes (name and text pairs) decoded: a new dict, the same
        values for equal texts (decoded once when they are all immutable)."""
        key = items if type(items) is tuple else tuple(items)
        hit = self._attrs.get(key)
        if hit is not None:  # the usual case, without making `decode`
            return hit.copy()

        def decode() -> tuple[dict[str, Any], bool]:
            attrs = {name: self(text) for name, text in key}
            return attrs, all(text in self._cache for _, text in key)

        return self.decoded_attrs(key, decode)

    def decoded_attrs(
        self, key: Any, decode: Callable[[], tuple[dict[str, Any], bool]]
    ) -> dict[str, Any]:
        """A node's attributes by `key` (a hashable form of their text: equal keys mean
        equal attributes): a new dict; `decode()` gives them and whether they may be
        kept for the next equal key (only when every value is immutable)."""
        hit = self._attrs.get(key)
        if hit is not None:
            return hit.copy()
        attrs, immutable = decode()
        if immutable:
            self._attrs[key] = attrs.copy()
        return attrs

    @staticmethod
    def immutable(attrs: dict[str, Any]) -> bool:
        """Whether every value of `attrs` is immutable (may be shared by equal nodes)."""
        return all(_immutable(value) for value in attrs.values())

    def __call__(self, text: str) -> Any:
        try:
            return self._cache[text]
        except KeyError:
            pass
        number = plain_number(text)
        if number is not None:  # read without `ast`, kept for this file only, and only
            if len(self._cache) < _MAX_FILE_NUMBERS:  # the first ones: a hostile file
                self._cache[text] = number  # may hold a literal value per equation
            return number
        shared = len(text) <= _MAX_DECODED_ATTR_TEXT
        found = _DECODED_ATTRS.get(text) if shared else None
        if found is not None:
            value = self._cache[text] = found[0]
            return value
        value = decode_attr(text)
        if _immutable(value):
            self._cache[text] = value
            if shared:
                _DECODED_ATTRS.put(text, (value,))
        return value


def _immutable(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, complex, str, np.dtype)):
        return True
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return isinstance(value, enum.Enum)


@dataclass(eq=False, slots=True)
class DocNode:
    """One node of a serialization document (see the module docstring for the schema)."""

    tag: str
    attrs: dict[str, Any] = field(default_factory=dict)
    consts: list[Const] = field(default_factory=list)
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    children: list[DocNode] = field(default_factory=list)
    results: list[Port] = field(default_factory=list)
    node: Node | None = field(default=None, repr=False, compare=False)
    location: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    source: Source | None = field(default=None, repr=False, compare=False)
    #: A hashable key of `attrs` a reader may set (the attributes' text): equal keys
    #: mean equal attrs, so the loader need not compare the values themselves.
    attrs_key: Any = field(default=None, repr=False, compare=False)
    #: `name -> (value, text)`: `attrs` as `encode_attr` wrote them when `to_document`
    #: checked that they can be written; read them with `attr_texts`.
    texts: dict[str, tuple[Any, str]] | None = field(default=None, repr=False, compare=False)


def attr_texts(doc: DocNode) -> dict[str, str]:
    """The attributes of `doc` as text (`encode_attr`), reusing what `to_document` encoded
    for the values `attrs` still holds."""
    texts = doc.texts or {}
    out = {}
    for key, value in doc.attrs.items():
        known = texts.get(key)
        out[key] = (
            known[1]
            if known is not None and known[0] is value
            else encode_attr(value, strict=False)
        )
    return out


def shared_texts(doc: DocNode) -> dict[str, tuple[Any, str]] | None:
    """`doc.texts` when `doc.attrs` holds exactly the values they were encoded from (the
    same objects), else `None`. `to_document` gives equations with equal params one
    shared texts dict, so writers may cache what they make of a node's attrs by it."""
    texts = doc.texts
    if texts is None or len(texts) != len(doc.attrs):
        return None
    for key, value in doc.attrs.items():
        known = texts.get(key)
        if known is None or known[0] is not value:
            return None
    return texts


def element_tag(doc: DocNode) -> tuple[str, dict[str, Any]]:
    """The element name for a document node, and extra attrs when the tag is not usable."""
    if is_xml_name(doc.tag):
        if doc.node is None or doc.tag not in RESERVED_TAGS or doc.tag in ("module_call", "mox"):
            return doc.tag, {}
    return "eqn", {"primitive": doc.tag}


def port_attrs(port: Port) -> dict[str, str]:
    """Attributes of an `<input>`/`<output>` element: type, and literal value or bind."""
    attrs = {"type": port.type}
    if port.name is None:
        attrs["value"] = encode_attr(port.value, strict=False)
    if port.bind is not None:
        attrs["bind"] = port.bind
    return attrs


def build_element(
    doc: DocNode,
    parent: Any = None,
    *,
    on_element: Any = None,
    const_data: Any = None,
) -> Any:
    """The lxml element tree of a document, in the schema `query` sees (see `_attrs`);
    `on_element(element, doc_or_port)` sees each element."""
    tag, extra = element_tag(doc)
    attrs = {**attr_texts(doc), **extra}
    element = etree.Element(tag, attrs) if parent is None else etree.SubElement(parent, tag, attrs)
    if on_element is not None:
        on_element(element, doc)
    for const in doc.consts:
        child = etree.SubElement(element, "const", {"type": const.type})
        child.text = const.name
        if const_data is not None:
            const_data(child, const)
    for kind, ports in (("input", doc.inputs), ("output", doc.outputs)):
        for port in ports:
            _port(element, kind, port, on_element)
    for child_doc in doc.children:
        build_element(child_doc, element, on_element=on_element, const_data=const_data)
    for port in doc.results:
        _port(element, "outputs", port, on_element)
    return element


def _port(parent: Any, kind: str, port: Port, on_element: Any) -> None:
    child = etree.SubElement(parent, kind, port_attrs(port))
    if port.name is not None:
        child.text = port.name
    if on_element is not None:
        on_element(child, port)


def to_document(
    mox: Mox, *, strict: bool = True, rules: bool | None = None, ports: bool = True
) -> DocNode:
    """The document of `mox`.

    Args:
        mox: the module expression.
        strict: raise `MoxSerializationError` for values that cannot be written (for
            files); when `False`, such values are shown as text (for the query view).
        rules: write custom derivative rules as `jvp`/`vjp` regions (default: `strict`).
        ports: write inputs, outputs, results and constants (the query view omits them).

    Returns:
        The root `DocNode`, tag `mox`.
    """
    writer = _Writer(
        mox.block, strict=strict, rules=strict if rules is None else rules, ports=ports, mox=mox
    )
    root = DocNode("mox", node=mox, location=())
    _run(writer.block(root, mox.block, ()))
    # Static leaves (functions, flags) are not in the file: it takes the flat array leaves.
    in_tree = None if mox.static_leaves else writer.tree(mox.in_tree)
    root.attrs.update(in_tree=in_tree, out_tree=writer.tree(mox.out_tree))
    if mox.kwargs_tree is not None and mox.in_tree is not None and in_tree is not None:
        root.attrs["kwargs_tree"] = writer.tree(mox.kwargs_tree, mox.in_tree.num_leaves)
    if mox.static_kwargs and writer.encodable(mox.static_kwargs):
        root.attrs["static_kwargs"] = tuple(mox.static_kwargs)
    root.attrs["extra"] = tuple(k for k, _ in mox.extra_params)
    if strict:
        in_spec, out_spec = file_specs(
            mox, write_in=in_tree is None, write_out=root.attrs["out_tree"] is None
        )
        if in_spec is not None:
            root.attrs["in_spec"] = in_spec.text
        if out_spec is not None:
            root.attrs["out_spec"] = out_spec.text
    return root


def file_specs(
    mox: Mox, *, write_in: bool, write_out: bool
) -> tuple[TreeSpec | None, TreeSpec | None]:
    """The specs (paths and node kinds) a file records for the argument and result
    structures that its `in_tree`/`out_tree` attrs cannot write (a model, a static leaf):
    the MoX's own when it was loaded, else made from its treedefs. Kept with the MoX
    (`Mox.memo`; its fields are frozen): a model's spec walks its whole state, which
    costs a tenth of writing a 32-block transformer."""
    build = lambda: _file_specs(mox, write_in=write_in, write_out=write_out)
    return mox.memo(f"{_FILE_SPECS}:{write_in:d}{write_out:d}", build)


_FILE_SPECS = "file_specs"


def _file_specs(
    mox: Mox, *, write_in: bool, write_out: bool
) -> tuple[TreeSpec | None, TreeSpec | None]:
    in_spec = out_spec = None
    if write_in:
        in_spec = mox.in_spec
        if in_spec is None and mox.in_tree is not None:
            kwargs_tree = mox.kwargs_tree or jax.tree_util.tree_structure({})
            pair = jax.tree_util.treedef_tuple([mox.in_tree, kwargs_tree])
            in_spec = TreeSpec.of(pair, [i for i, _ in mox.static_leaves])
    if write_out:
        out_spec = mox.out_spec
        if out_spec is None and mox.out_tree is not None:
            out_spec = TreeSpec.of(mox.out_tree)
    return in_spec, out_spec


#: A step of the writer: yields the steps of its children (receiving each one's result)
#: and returns its own. `_run` drives them with an explicit stack, so a MoX nested
#: 1,000 modules deep is written without Python recursion.
_Step = Generator["_Step", Any, Any]


def _run(step: _Step) -> Any:
    """Run `step` and the child steps it yields, depth first; return its result. An
    exception in a step is thrown into its parent (whose `finally` blocks run)."""
    stack = [step]
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            if error is None:
                child = stack[-1].send(value)
            else:
                child, error = stack[-1].throw(error), None
        except StopIteration as done:
            stack.pop()
            value = done.value
            if not stack:
                return value
            continue
        except BaseException as raised:
            stack.pop()
            if not stack:
                raise
            error = raised
            continue
        stack.append(child)
        value = None


class _Writer:
    def __init__(
        self,
        root: Block,
        *,
        strict: bool,
        rules: bool,
        ports: bool = True,
        mox: Mox | None = None,
    ) -> None:
        self.root = root
        self.mox = mox
        self.strict = strict
        self.rules = rules
        self.ports = ports
        self.namer = Namer()
        self.rule_regions: dict[int, tuple[str, Block]] | None = None
        self.other_rule_regions: dict[int, tuple[str, Block]] = {}
        self.types: dict[int, tuple[Any, str]] = {}
        self.encoded: list[str] = []  # what `checked` encoded for the node being written
        #: `(primitive, exact key of its params) -> (attrs, texts)`: the equations of a
        #: model repeat (128 blocks, one set of params), so each set is encoded once.
        self.equation_attrs: dict[Any, tuple[dict[str, Any], dict[str, tuple[Any, str]]]] = {}
        #: `value_key(value) -> encode_attr(value)`: module calls repeat their attributes.
        self.attr_texts: dict[Any, str] = {}
        self.attr_names: set[str] = set()  # module attribute names checked (`ATTR_NAME`)

    def port(self, atom: Any) -> Port:
        if type(atom) is Literal:
            return Port(None, self.type_of(atom.aval), _scalar(atom.val))
        return Port(self.namer(atom), self.type_of(atom.aval))

    def port_list(self, atoms: Any) -> list[Port]:
        """`[self.port(atom) for atom in atoms]`, with the common port (a variable named
        before, of a type written before) made here."""
        names, types, ports = self.namer.names, self.types, []
        for atom in atoms:
            name = names.get(atom) if type(atom) is Var else None
            known = types.get(id(atom.aval)) if name is not None else None
            if known is not None and known[0] is atom.aval:
                ports.append(Port(name, known[1]))
            else:
                ports.append(self.port(atom))
        return ports

    def type_of(self, aval: Any) -> str:
        """`type_str(aval, weak=True)`, once per aval object: jax shares one aval between
        many variables (an MLP's hundreds of ports have a handful)."""
        hit = self.types.get(id(aval))
        if hit is not None and hit[0] is aval:
            return hit[1]
        text = type_str(aval, weak=True)
        self.types[id(aval)] = (aval, text)  # holding the aval keeps its id unique
        return text

    def block(self, doc: DocNode, block: Block, location: tuple[Any, ...]) -> _Step:
        if not self.ports:
            for index, node in enumerate(block.nodes):
                doc.children.append((yield self.node(node, (*location, index))))
            return
        for var, value in zip(block.constvars, block.consts, strict=False):
            doc.consts.append(
                Const(self.namer(var), self.type_of(var.aval), self.const_data(var, value))
            )
        if not doc.inputs:
            doc.inputs = self.port_list(block.invars)
        for index, node in enumerate(block.nodes):
            doc.children.append((yield self.node(node, (*location, index))))
        doc.results = self.port_list(block.outvars)

    def const_data(self, var: Any, value: Any) -> np.ndarray:
        try:
            return to_storage(value)
        except MoxError as error:
            if self.strict:
                raise MoxSerializationError(f"constant {self.namer(var)}: {error}") from None
            return np.zeros((0,), np.uint8)

    def bind_inputs(self, doc: DocNode, caller: tuple[Any, ...], body: tuple[Any, ...]) -> None:
        """Caller atoms as inputs; the body's variables take the caller's names when they can."""
        seen: set[str] = set()
        for outer, inner in zip(caller, body, strict=True):
            port = self.port(outer)
            if port.name is not None and port.name not in seen and inner not in self.namer.names:
                self.namer.names[inner] = port.name
            else:
                port.bind = self.namer(inner)
            seen.add(self.namer(inner))
            doc.inputs.append(port)

    def node(self, node: Node, location: tuple[Any, ...]) -> _Step:
        if isinstance(node, ModuleCall):
            doc = DocNode("module_call", self.module_attrs(node), node=node, location=location)
            doc.texts = self.texts(doc.attrs)
            if self.ports:
                self.bind_inputs(doc, node.invars, node.body.invars)
                doc.outputs = self.port_list(node.outvars)
            yield self.block(doc, node.body, location)
            return doc
        assert isinstance(node, Equation)
        attrs, texts = self.equation(node)
        doc = DocNode(node.primitive.name, attrs, node=node, location=location)
        doc.texts = texts
        if self.ports:
            doc.inputs = self.port_list(node.invars)
            doc.outputs = self.port_list(node.outvars)
        for r, (key, index, region, closed) in enumerate(node.regions):
            where = (*location, ("region", r))
            doc.children.append((yield self.region(key, index, region, where, closed)))
        if self.rules and node.primitive.name in CUSTOM_DERIVATIVE_NAMES:
            key, block = self.rule_region(node)
            doc.children.append((yield self.region(key, None, block, (*location, ("rule",)))))
        return doc

    def rule_region(self, node: Equation) -> tuple[str, Block]:
        """The derivative rule of a custom derivative equation. The first call traces the
        rules of every such equation in the MoX together (see `derivative_rule_regions`);
        they are kept with the MoX (`Mox.memo`, keyed by the equations it holds), so
        writing it again does not trace them again."""
        if self.rule_regions is None:
            build = lambda: _rule_regions(self.root)
            self.rule_regions = build() if self.mox is None else self.mox.memo(_RULES, build)
        found = self.rule_regions.get(id(node)) or self.other_rule_regions.get(id(node))
        if found is None:  # an equation the walk did not see: trace its rule alone
            from ._rules import derivative_rule_region

            found = self.other_rule_regions[id(node)] = derivative_rule_region(node)
        return found

    def region(
        self,
        key: str,
        index: int | None,
        block: Block,
        location: tuple[Any, ...],
        closed: bool = True,
    ) -> _Step:
        attrs: dict[str, Any] = {"param": key, "closed": closed}
        if index is not None:
            attrs["index"] = index
        doc = DocNode("region", attrs, location=location)
        # A region is a closed scope, and jax shares one jaxpr object between equal
        # calls: name its variables afresh so that each copy reads the same.
        outer, self.namer = self.namer, Namer(self.namer.count)
        try:
            yield self.block(doc, block, location)
        finally:
            outer.count, self.namer = self.namer.count, outer
        return doc

    def module_attrs(self, node: ModuleCall) -> dict[str, Any]:
        for key in node.info.attrs:
            if key in self.attr_names:
                continue
            if self.strict and not ATTR_NAME.match(key):
                raise MoxSerializationError(
                    f"attribute {key!r} of module_call {node.name!r} is not a name XML can "
                    "hold and XPath can query (letters, digits, `_`, `-`, `.`); rename it in "
                    "the backend."
                )
            self.attr_names.add(key)
        return {
            key: self.checked(value, "attribute `{}` of module_call {!r}", key, node.name)
            for key, value in module_attrs(node).items()
        }

    def equation(self, node: Equation) -> tuple[dict[str, Any], dict[str, tuple[Any, str]] | None]:
        """An equation's attrs and their texts (`DocNode.texts`); encoded once per distinct
        set of params when writing a file (the attrs are a copy, the texts shared)."""
        key = None
        if self.strict and not node.regions:
            key = value_key((node.primitive.name, *node.params.items()))
            hit = self.equation_attrs.get(key) if key is not None else None
            if hit is not None:
                return dict(hit[0]), hit[1]
        attrs = self.params(node)
        texts = self.texts(attrs)
        if key is not None and texts is not None:
            self.equation_attrs[key] = (dict(attrs), texts)
        return attrs, texts

    def params(self, node: Equation) -> dict[str, Any]:
        name = node.primitive.name
        return {
            key: self.checked(value, "param `{}` of equation `{}`", key, name)
            for key, value in equation_attrs(node).items()
        }

    def checked(self, value: Any, what: str, *names: Any) -> Any:
        """`value`, its text (`encode_attr`) appended to `encoded`; an error names it as
        `what.format(*names)` (made only then: a model has thousands of attributes)."""
        if not self.strict:
            return value  # the element view writes it with `encode(strict=False)`
        key = value_key(value)
        text = self.attr_texts.get(key) if key is not None else None
        if text is None:
            try:
                text = encode_attr(value)
            except Unencodable as error:
                raise MoxSerializationError(
                    f"{what.format(*names)} cannot be serialized: {error}. Replace the "
                    "equation (`sub`) or keep this MoX in memory."
                ) from None
            if key is not None:
                self.attr_texts[key] = text
        self.encoded.append(text)
        return value

    def texts(self, attrs: dict[str, Any]) -> dict[str, tuple[Any, str]] | None:
        """The texts `checked` encoded for `attrs` (in order), for `attr_texts`."""
        if not self.strict:
            return None
        encoded, self.encoded = self.encoded, []
        return {k: (v, text) for (k, v), text in zip(attrs.items(), encoded, strict=True)}

    def encodable(self, value: Any) -> bool:
        try:
            encode(value)
        except Unencodable:
            return False
        return True

    def tree(self, treedef: PyTreeDef | None, first: int = 0) -> Any:
        """A treedef of tuples/lists/dicts/None as a value whose leaves number the flat
        values from `first` (`(0, {'a': 1})`), or None."""
        return tree_example(treedef, first)


_RULES = "derivative_rule_regions"


def _rule_regions(root: Block) -> dict[int, tuple[str, Block]]:
    """The derivative rule region of every custom derivative equation under `root`, by
    the equation's id (the MoX holding `root` keeps the equations alive)."""
    from ._ir import iter_nodes
    from ._rules import derivative_rule_regions

    customs = [
        n
        for n in iter_nodes(root)
        if isinstance(n, Equation) and n.primitive.name in CUSTOM_DERIVATIVE_NAMES
    ]
    regions = derivative_rule_regions(customs)
    return {id(n): r for n, r in zip(customs, regions, strict=True)}


def _scalar(value: Any) -> Any:
    value = np.asarray(value)
    return value.item() if value.ndim == 0 else value.tolist()


def literal_value(port: Port) -> Any:
    """The numpy value of a literal port."""
    from ._types import parse_type

    aval = parse_type(port.type)
    value = np.asarray(port.value, dtype=aval.dtype)
    # A weakly typed literal is a Python scalar to jax; keep it one.
    return value.item() if aval.weak_type and value.ndim == 0 else value
