"""The element view of a MoX and `query`: XPath 1.0 (lxml) over the document tree.

The view is the MoX's document (`document.to_document`) as lxml elements, without the
port elements (`<input>`, `<output>`, ...) and derivative rules that files carry: nodes
only, so that queries over large models stay fast. Each element maps back to its MoX
node. The view is built once per MoX and cached, and compiled XPath expressions are
cached by text, so repeated queries cost only the XPath evaluation.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from lxml import etree

from ._codec import encode_attr
from ._errors import MoxError
from ._ir import JIT_ALIASES, JIT_NAME, Mox, Node
from .document import DocNode, Port, to_document

_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_PORT_TAGS = frozenset({"const", "input", "output", "outputs", "region", "mox", "module_call"})


def element_tag(doc: DocNode) -> tuple[str, dict[str, Any]]:
    """The element name for a document node, and extra attrs when the tag is not usable."""
    if _XML_NAME.match(doc.tag) and not doc.tag.lower().startswith("xml"):
        if doc.node is None or doc.tag not in _PORT_TAGS or doc.tag in ("module_call", "mox"):
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
    parent: etree._Element | None = None,
    *,
    on_element: Any = None,
    const_data: Any = None,
) -> etree._Element:
    """lxml elements for a document; `on_element(element, doc_or_port)` sees each one."""
    tag, extra = element_tag(doc)
    attrs = {k: encode_attr(v, strict=False) for k, v in doc.attrs.items()}
    attrs.update(extra)
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


def _port(parent: etree._Element, kind: str, port: Port, on_element: Any) -> None:
    child = etree.SubElement(parent, kind, port_attrs(port))
    if port.name is not None:
        child.text = port.name
    if on_element is not None:
        on_element(child, port)


class ElementView:
    """A MoX as an lxml tree, with a map from elements back to MoX nodes."""

    def __init__(self, mox: Mox) -> None:
        self.doc = to_document(mox, strict=False, rules=False, ports=False)
        self.objects: dict[etree._Element, Any] = {}
        self.locations: dict[int, tuple[Any, ...]] = {}
        self.nodes: dict[int, Node] = {}
        self.root = build_element(self.doc, on_element=self._record)

    def _record(self, element: etree._Element, item: Any) -> None:
        if isinstance(item, DocNode):
            if item.node is not None:
                self.objects[element] = item.node
                self.locations[id(item.node)] = item.location
                self.nodes[id(item.node)] = item.node
            else:
                self.objects[element] = item
        else:
            self.objects[element] = item

    def location_of(self, node: Node) -> tuple[Any, ...] | None:
        if self.nodes.get(id(node)) is node:
            return self.locations[id(node)]
        return None


_ALIAS_RES = {
    alias: re.compile(rf"(?<![\w@$.-]){alias}(?![\w.(-])") for alias in JIT_ALIASES - {JIT_NAME}
}
_STRING = re.compile(r"(\"[^\"]*\"|'[^']*')")


def rewrite_aliases(xpath: str) -> str:
    """Spell jit as the running jax does: `//pjit[...]` -> `//jit[...]` (names, not strings)."""
    parts = _STRING.split(xpath)
    for i in range(0, len(parts), 2):
        for pattern in _ALIAS_RES.values():
            parts[i] = pattern.sub(JIT_NAME, parts[i])
    return "".join(parts)


@functools.lru_cache(maxsize=512)
def compile_xpath(xpath: str) -> etree.XPath:
    try:
        return etree.XPath(rewrite_aliases(xpath))
    except etree.XPathSyntaxError as error:
        raise MoxError(f"`xpath` {xpath!r} is not valid XPath 1.0: {error}.") from None


def query(xpath: str, mox: Mox) -> Any:
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
        order (`document.DocNode` objects for region elements, strings for attribute
        nodes); a plain value for expressions that return a string, number or boolean.

    Example:
        >>> dense = query('//module_call[@type="Linear"][@features=10]', mox)  # doctest: +SKIP
    """
    if not isinstance(mox, Mox):
        raise MoxError(f"`mox` must be a Mox, got {type(mox).__name__}.")
    view = mox._view
    try:
        result = compile_xpath(xpath)(view.root)
    except etree.XPathError as error:  # an unknown function, a wrong argument count, ...
        raise MoxError(f"`xpath` {xpath!r} cannot be evaluated: {error}.") from None
    if not isinstance(result, list):
        return result
    objects = view.objects
    return [
        objects.get(item, item) if isinstance(item, etree._Element) else str(item)
        for item in result
    ]
