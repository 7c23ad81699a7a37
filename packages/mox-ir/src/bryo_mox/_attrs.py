"""A MoX node as an element: its tag and attributes, shared by queries and files.

The element view of `query` and the documents that `dumps` writes show a node the same
way, so that an XPath that works on a MoX works on its file: the root as `<mox>` with its
argument and result structures; a module call as `<module_call>` with `type` (the short
class name), `qualtype`, `name`, `state_inputs`, `state_outputs` and the module's static
attributes; an equation as an element named after its primitive, with its params as
attributes except its sub-jaxprs (child `<region>` elements) and, for `jit` and custom
derivative equations, the params jax rebuilds by itself (shardings, layouts, rules).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from bryo_pytree import PyTreeDef

from ._ir import CUSTOM_DERIVATIVE_NAMES, JIT_NAME, Equation, ModuleCall

#: Params of `jit` equations that are shown; the rest (shardings, layouts, meshes) are
#: rebuilt by `jax.jit` itself.
JIT_ATTRS = ("name", "inline", "keep_unused")
#: Params of `custom_jvp_call`/`custom_vjp_call` equations that are shown.
CUSTOM_ATTRS = ("name", "num_consts", "symbolic_zeros")
#: Tags MoX gives its own elements; an equation whose primitive has one of these names
#: becomes `<eqn primitive="...">`.
RESERVED_TAGS = frozenset({"const", "input", "output", "outputs", "region", "mox", "module_call"})

_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@functools.lru_cache(maxsize=4096)
def is_xml_name(name: str) -> bool:
    """Whether `name` can be an XML element or attribute name (and is not `xml...`).
    Cached: writers ask it of every node's tag, and a model has a few dozen."""
    return bool(_XML_NAME.match(name)) and not name.lower().startswith("xml")


def equation_tag(primitive: str) -> tuple[str, dict[str, Any]]:
    """The element name of an equation of `primitive`, and the attrs it needs besides:
    `("dot_general", {})`, or `("eqn", {"primitive": name})` for a name that cannot be
    a tag."""
    if is_xml_name(primitive) and primitive not in RESERVED_TAGS:
        return primitive, {}
    return "eqn", {"primitive": primitive}


#: The attributes every module call's element has (then the module's own attributes).
_MODULE_VALUES: dict[str, Callable[[ModuleCall], Any]] = {
    "type": lambda node: node.info.short_type,
    "qualtype": lambda node: node.info.type,
    "name": lambda node: node.info.name,
    "state_inputs": lambda node: node.n_state,
    "state_outputs": lambda node: node.n_state_out,
}
MODULE_KEYS = tuple(_MODULE_VALUES)
#: Attributes an equation's element may have that are not its params.
SPECIAL_EQUATION_KEYS = frozenset(JIT_ATTRS + CUSTOM_ATTRS)


def module_attrs(node: ModuleCall) -> dict[str, Any]:
    """The attributes of a module call's element."""
    return {**{key: value(node) for key, value in _MODULE_VALUES.items()}, **node.info.attrs}


def module_attr(node: ModuleCall, key: str, default: Any = None) -> Any:
    """One attribute of a module call's element (`default` when it has none)."""
    value = _MODULE_VALUES.get(key)
    return value(node) if value is not None else node.info.attrs.get(key, default)


def equation_attr_names(node: Equation) -> tuple[str, ...]:
    """The names of an equation element's attributes (its shown params)."""
    name = node.primitive.name
    if name == JIT_NAME:
        return JIT_ATTRS
    if name in CUSTOM_DERIVATIVE_NAMES:
        return CUSTOM_ATTRS
    regions = {region.param for region in node.regions}
    return tuple(k for k in node.params if k not in regions)


def equation_shows(node: Equation, key: str) -> bool:
    """Whether an equation's element has attribute `key` (`key in equation_attr_names`)."""
    name = node.primitive.name
    if name == JIT_NAME:
        return key in JIT_ATTRS
    if name in CUSTOM_DERIVATIVE_NAMES:
        return key in CUSTOM_ATTRS
    return key in node.params and all(region.param != key for region in node.regions)


def equation_attr(node: Equation, key: str) -> Any:
    """The value of one attribute of an equation's element (see `equation_attr_names`)."""
    return node.name if key == "name" else node.params.get(key)


def equation_attrs(node: Equation) -> dict[str, Any]:
    """The attributes of an equation's element."""
    return {key: equation_attr(node, key) for key in equation_attr_names(node)}


def tree_example(treedef: PyTreeDef | None, first: int = 0) -> Any:
    """A structure of tuples/lists/dicts/None as a value whose leaves number the flat
    values from `first` (`(0, (1, 2))`), for the root's `in_tree`/`out_tree`; `None` when
    it has other nodes (modules)."""
    if treedef is None:
        return None
    example = treedef.unflatten(list(range(first, first + treedef.num_leaves)))
    return example if _plain(example) else None


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, int):
        return True
    if type(value) in (tuple, list):
        return all(_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
