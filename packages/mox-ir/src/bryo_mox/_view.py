"""The element view of a MoX and `query`: XPath 1.0 (lxml) over the tree of nodes.

The view is an lxml tree with one element per node (`<mox>`, `<module_call>`, one element
per equation named after its primitive, `<region>` for sub-jaxprs), shown as documents
show them (`_attrs`), without the inputs, outputs and constants that files carry.

It is built to make the first query cheap, because a MoX is usually queried a few times:

- the tree is written as text, one start tag per line, and parsed by libxml2 in one call;
  an element's line number (`sourceline`) is the index of its node in document order,
  so no map from elements to nodes is kept;
- attributes are filled lazily, one name at a time and only the names a query's XPath
  mentions (`//module_call[@type="Linear"]` fills `type`; `@*` fills all), because
  writing every equation's params as text costs more than all the rest.

The view is cached in the MoX (`Mox.memo`) and compiled XPath expressions are cached by
text, so repeated queries cost only the XPath evaluation.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any
from xml.sax.saxutils import quoteattr

from lxml import etree

from ._attrs import (
    MODULE_KEYS,
    SPECIAL_EQUATION_KEYS,
    equation_attr,
    equation_shows,
    equation_tag,
    is_xml_name,
    module_attr,
    tree_example,
)
from ._codec import encode_attr
from ._collector import collector_paused
from ._dialect import yax_to_xpath
from ._errors import MoxError
from ._ir import (
    JIT_ALIASES,
    JIT_NAME,
    Block,
    Equation,
    ModuleCall,
    Mox,
    Node,
    Region,
    edit_count,
    is_root,
    note_source,
)

Location = tuple[Any, ...]
"""A node's place in its MoX: indices into blocks, `("region", r)` steps into equations."""

_ALL = "*"


class ElementView:
    """A MoX as an lxml tree. `objects[i]` is what the element on line `i + 1` stands for
    (a node, a `Region`, or `None` for the root); `lines[tag]` are the lines of the
    elements named `tag`, in document order."""

    def __init__(self, mox: Mox) -> None:
        self._trees = (mox.in_tree, mox.out_tree, mox.extra_params)  # not the MoX: no cycle
        self._root_attrs: dict[str, Any] | None = None
        self.edits = edit_count()  # module calls edited in place after this: stale
        text, self.objects, self.lines = _write(mox)
        try:
            self.root = etree.fromstring(text, _PARSER)
        except etree.XMLSyntaxError as error:  # libxml2 nests 2048 elements at most
            raise MoxError(
                f"this MoX is too deep to query: its element view nests deeper than libxml2 "
                f"allows ({error.msg}); the rest of bryo_mox (eval_mox, pformat, dumps) "
                "works at any depth."
            ) from None
        self.lock = threading.RLock()
        self._filled: set[str] = set()
        self._names: dict[str, frozenset[str]] = {}
        self._locations: dict[int, tuple[Node, Location]] | None = None

    def object_of(self, element: Any) -> Any:
        """What an element of this view stands for (`None`: the root)."""
        return self.objects[element.sourceline - 1]

    def fill(self, names: frozenset[str]) -> None:
        """Give every element its attributes called `names` (`*`: all of them), once."""
        with self.lock:
            if _ALL in self._filled:
                return
            wanted = None if _ALL in names else names - self._filled
            if wanted is not None and not wanted:
                return
            for tag, lines in self.lines.items():
                possible = self._names_of(tag)
                keys = possible if wanted is None else possible & wanted
                if keys:
                    self._fill_tag(tag, lines, sorted(keys))
            self._filled.update(names if wanted is not None else {_ALL})

    def _fill_tag(self, tag: str, lines: list[int], keys: list[str]) -> None:
        attr = _ATTR_OF[type(self.objects[lines[0]])]
        for element, line in zip(self.root.iter(tag), lines, strict=True):
            obj = self.objects[line]
            for key in keys:
                value = self.root_attrs().get(key, _MISSING) if obj is None else attr(obj, key)
                if value is not _MISSING:
                    element.set(key, encode_attr(value, strict=False))

    def _names_of(self, tag: str) -> frozenset[str]:
        """The attribute names elements named `tag` may have (a superset for equations)."""
        names = self._names.get(tag)
        if names is None:
            objects = [self.objects[line] for line in self.lines[tag]]
            kind = type(objects[0])  # a tag names one kind of object (see `_write`)
            found: set[str] = set()
            if kind is type(None):
                found.update(self.root_attrs())
            elif kind is ModuleCall:
                found.update(MODULE_KEYS, _YAX_KEYS, *[obj.info.attrs for obj in objects])
            elif kind is Region:
                found.update(("param", "index", "closed"))
            else:  # one `update` over every equation's params: the loop runs in C
                found.update(SPECIAL_EQUATION_KEYS, *[obj.eqn.params for obj in objects])
                found.add("primitive")
            names = self._names[tag] = frozenset(k for k in found if is_xml_name(k))
        return names

    def root_attrs(self) -> dict[str, Any]:
        """The attributes of the root element (its trees), computed on first use."""
        if self._root_attrs is None:
            self._root_attrs = _root_attrs(*self._trees)
        return self._root_attrs

    def location_of(self, node: Node, mox: Mox) -> Location | None:
        """Where `node` is in `mox` (this view's MoX), or `None` when it is not there."""
        with self.lock:
            if self._locations is None:
                self._locations = {id(n): (n, loc) for n, loc in _locations(mox)}
        found = self._locations.get(id(node))
        return found[1] if found is not None and found[0] is node else None


_MISSING = object()


def _region_attr(region: Region, key: str) -> Any:
    if key == "param":
        return region.param
    if key == "closed":
        return region.closed
    if key == "index" and region.index is not None:
        return region.index
    return _MISSING


#: YAX's attributes of every node: `primitive` (`module_call` for the root and module
#: calls, the primitive's name for an equation) and `ephemeral` (true for the root only).
_YAX_KEYS = ("primitive", "ephemeral")


def _equation_attr(node: Equation, key: str) -> Any:
    if key == "primitive":
        return node.eqn.primitive.name
    return equation_attr(node, key) if equation_shows(node, key) else _MISSING


def _module_attr(node: ModuleCall, key: str) -> Any:
    if key == "primitive":
        return "module_call"
    if key == "ephemeral":
        return False
    return module_attr(node, key, _MISSING)


_ATTR_OF: dict[type, Callable[[Any, str], Any]] = {
    type(None): lambda obj, key: _MISSING,
    ModuleCall: _module_attr,
    Region: _region_attr,
    Equation: _equation_attr,
}


def _root_attrs(in_tree: Any, out_tree: Any, extra_params: Any) -> dict[str, Any]:
    return {
        "in_tree": tree_example(in_tree),
        "out_tree": tree_example(out_tree),
        "extra": tuple(k for k, _ in extra_params),
        "primitive": "module_call",
        "ephemeral": True,
    }


def _write(mox: Mox) -> tuple[str, list[Any], dict[str, list[int]]]:
    """The view as XML text with one start tag per line (after the end tags of what
    closes before it), the object of each line, and the lines of each tag. An element
    without children (most equations) is closed on its own line, without a stack entry."""
    parts: list[str] = ["<mox>"]
    objects: list[Any] = [None]
    lines: defaultdict[str, list[int]] = defaultdict(list)
    lines["mox"].append(0)
    pending: list[str] = []  # end tags to write before the next start tag
    stack: list[tuple[Iterator[Any], str]] = [(iter(mox.block.nodes), "</mox>")]
    tags = _EquationTags()
    while stack:
        item = next(stack[-1][0], None)
        if item is None:
            pending.append(stack.pop()[1])
            continue
        kind = type(item)
        if kind is Equation:
            tag, start, end = tags[item.eqn.primitive.name]
            children = item.regions
        elif kind is ModuleCall:
            tag, start, end = _MODULE_TAGS
            children = item.body.nodes
        else:
            tag, start, end = _REGION_TAGS
            children = item.block.nodes
        if pending:
            start = "".join(pending) + start
            pending.clear()
        lines[tag].append(len(parts))
        objects.append(item)
        if children:
            parts.append(start)
            stack.append((iter(children), end))
        else:
            parts.append(start + end)
    parts[-1] += "".join(pending)
    return "\n".join(parts), objects, dict(lines)


_MODULE_TAGS = ("module_call", "<module_call>", "</module_call>")
_REGION_TAGS = ("region", "<region>", "</region>")


class _EquationTags(dict):
    """primitive name -> (tag, start tag text, end tag text), computed once per name."""

    def __missing__(self, name: str) -> tuple[str, str, str]:
        tag, extra = equation_tag(name)
        attrs = "".join(f" {k}={quoteattr(v)}" for k, v in extra.items())
        value = self[name] = (tag, f"<{tag}{attrs}>", f"</{tag}>")
        return value


def _locations(mox: Mox) -> Iterator[tuple[Node, Location]]:
    """Every node of `mox` with its location, iteratively."""
    stack: list[tuple[Block, Location]] = [(mox.block, ())]
    while stack:
        block, prefix = stack.pop()
        for index, node in enumerate(block.nodes):
            location = (*prefix, index)
            yield node, location
            if isinstance(node, ModuleCall):
                stack.append((node.body, location))
            elif isinstance(node, Equation):
                stack.extend(
                    (region.block, (*location, ("region", r)))
                    for r, region in enumerate(node.regions)
                )


_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)

_ALIAS_RES = {
    alias: re.compile(rf"(?<![\w@$.-]){alias}(?![\w.(-])") for alias in JIT_ALIASES - {JIT_NAME}
}
_STRING = re.compile(r"(\"[^\"]*\"|'[^']*')")
_ATTRIBUTE = re.compile(
    r"(?:@|attribute\s*::)\s*(\*|[A-Za-z_][\w.-]*(?:\s*:\s*(?:\*|[A-Za-z_][\w.-]*))?)(\s*\()?"
)


def _outside_strings(xpath: str) -> list[str]:
    return _STRING.split(xpath)[::2]


def rewrite_aliases(xpath: str) -> str:
    """Spell jit as the running jax does: `//pjit[...]` -> `//jit[...]` (names, not strings)."""
    parts = _STRING.split(xpath)
    for i in range(0, len(parts), 2):
        for pattern in _ALIAS_RES.values():
            parts[i] = pattern.sub(JIT_NAME, parts[i])
    return "".join(parts)


def attribute_names(xpath: str) -> frozenset[str]:
    """The attribute names an XPath reads (`{"type"}`), or `{"*"}` when it may read any
    (`@*`, `attribute::node()`, a prefixed name)."""
    names: set[str] = set()
    for part in _outside_strings(xpath):
        for name, call in _ATTRIBUTE.findall(part):
            names.add(_ALL if name == "*" or ":" in name or call else name)
    return frozenset(names)


@functools.lru_cache(maxsize=512)
def compile_xpath(xpath: str) -> tuple[etree.XPath, frozenset[str], str]:
    """The compiled XPath, the attribute names it reads, and the XPath 1.0 text it runs
    (YAX's short forms spelled out, see `_dialect`)."""
    text = "/*" if xpath.strip() == "/" else xpath
    try:
        return etree.XPath(rewrite_aliases(text)), attribute_names(text), text
    except etree.XPathSyntaxError as error:
        spelled = yax_to_xpath(xpath)
        if spelled is not None:
            try:
                return etree.XPath(rewrite_aliases(spelled)), attribute_names(spelled), spelled
            except etree.XPathSyntaxError:
                pass
        raise MoxError(
            f"`xpath` {xpath!r} is not valid XPath 1.0 (nor YAX's short form of it, such as "
            f'`//[@type="Dense"]`): {error}.'
        ) from None
    except UnicodeEncodeError as error:  # a lone surrogate: bytes that were not UTF-8
        bad = xpath[error.start : error.end]
        raise MoxError(
            f"`xpath` {xpath!r} holds {bad!r}, which is not a character XPath can hold (a "
            "lone surrogate: bytes that are not UTF-8, passed as text); write it in UTF-8."
        ) from None


class XPath:
    """A compiled query: XPath 1.0 or YAX's short forms (see `query`).

    `query(XPath(text), mox)` is `query(text, mox)` without compiling the text again;
    `XPath(text)` checks the text at once.

    Attributes:
        source: the query as written.
        xpath: the XPath 1.0 it runs as (`source`, or its YAX forms spelled out).

    Raises:
        MoxError: the text is neither valid XPath 1.0 nor YAX's form of it.
    """

    __slots__ = ("source", "xpath")

    def __init__(self, xpath: str | XPath) -> None:
        if isinstance(xpath, XPath):
            self.source, self.xpath = xpath.source, xpath.xpath
            return
        if not isinstance(xpath, str):
            raise MoxError(f"`xpath` must be a string or an XPath, got {type(xpath).__name__}.")
        self.source = xpath
        self.xpath = compile_xpath(xpath)[2]

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return f"XPath({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, XPath) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


def element_view(mox: Mox) -> ElementView:
    """The element view of `mox`, built on first use and kept with the MoX (rebuilt after
    an in-place edit of a module call, `call.params[...] = ...`)."""
    view = mox.memo("element_view", lambda: ElementView(mox))
    if view.edits != edit_count():
        mox.forget("element_view", view)
        view = mox.memo("element_view", lambda: ElementView(mox))
    return view


def query(xpath: str | XPath, mox: Mox) -> Any:
    """Select nodes of `mox` with an XPath 1.0 expression, in document order.

    The tree reads like the seed's XML: a root `<mox>`, `<module_call type="Linear"
    qualtype="pkg.Linear" name="layers/0" features="10" ...>` elements, one element per
    equation named after its primitive (`<dot_general>`, `<custom_jvp_call name="relu">`,
    `<jit name="relu">` — `pjit` in a query means jax's jit primitive whatever its current
    name), and `<region param=...>` children for sub-jaxprs. `@type` is the short class
    name (`Dense`), `@qualtype` the dotted path. Inputs and outputs are not elements of
    the view (files have them); read them from the returned nodes.

    Args:
        xpath: an XPath 1.0 expression, e.g. `//module_call[@features=10]`,
            `//pjit[@name="relu"]`, `//module_call[@type="Linear"]/..`, `//a | //b`.
        mox: the module expression to search.

    Returns:
        A list of MoX nodes (`ModuleCall`, `Equation`, or the `Mox` root) in document
        order (`Region` records for region elements, strings for attribute nodes); a
        plain value for expressions that return a string, number or boolean.

    Raises:
        MoxError: `xpath` is not a string of valid XPath 1.0, or calls an unknown function.

    Example:
        >>> dense = query('//module_call[@type="Linear" and @features=10]', mox)  # doctest: +SKIP
    """
    if not is_root(mox):
        if is_root(xpath) and isinstance(mox, str | XPath):
            raise MoxError(
                "`query` takes the XPath first and the Mox second, as YAX's does: "
                "write `query(xpath, mox)`."
            )
        raise MoxError(f"`mox` must be a Mox, got {type(mox).__name__}.")
    if isinstance(xpath, XPath):
        xpath = xpath.source
    elif not isinstance(xpath, str):
        raise MoxError(f"`xpath` must be a string or an XPath, got {type(xpath).__name__}.")
    compiled, names, _ = compile_xpath(xpath)
    with collector_paused():  # building the view and its attributes only allocates
        view = element_view(mox)
        with view.lock:
            view.fill(names)
            try:
                result = compiled(view.root)
            except etree.XPathError as error:
                raise MoxError(f"`xpath` {xpath!r} cannot be evaluated: {error}.") from None
            if not isinstance(result, list):
                return result
            found = [_result(item, view, mox) for item in result]
            for node in found:  # see `Mox.children`: a call taken out knows its source
                if type(node) is ModuleCall and node.n_state:
                    location = view.location_of(node, mox)
                    if location is not None:
                        note_source(mox, location, node)
        return found


def _result(item: Any, view: ElementView, mox: Mox) -> Any:
    if isinstance(item, etree._Element):
        obj = view.object_of(item)
        return mox if obj is None else obj
    return str(item)
