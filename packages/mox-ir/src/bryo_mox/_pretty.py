"""The pretty printer: MoX in the jaxpr-like text form of the seed.

Module calls print as `module_call[type=... name=... attrs] args { lambda ... }` with
their body indented; equations print like jaxpr equations, sub-jaxprs as nested lambdas.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from jax.extend.core import Var as _Var

from ._codec import encode
from ._ir import JIT_NAME, Block, Equation, Literal, ModuleCall, Node, is_root, set_text_form
from ._types import type_str


class Namer:
    """Short variable names (`a`, ..., `z`, `ba`, ...) given in order of first appearance."""

    def __init__(self, start: int = 0) -> None:
        self.names: dict[Any, str] = {}
        self.count = start

    def __call__(self, var: Any) -> str:
        if type(var) is _Var:  # the common case: a variable named before
            name = self.names.get(var)
            if name is not None:
                return name
        if isinstance(var, Literal):
            return f"{encode(_scalar(var.val), strict=False)}:{type_str(var.aval)}"
        if type(var).__name__ == "DropVar":
            return "_"
        name = self.names.get(var)
        if name is None:
            name = self.names[var] = _letters(self.count)
            self.count += 1
        return name

    def typed(self, var: Any) -> str:
        return self(var) if self(var) == "_" else f"{self(var)}:{type_str(var.aval)}"


def _scalar(value: Any) -> Any:
    try:
        return value.item()
    except (AttributeError, ValueError):
        return value


@functools.lru_cache(maxsize=1 << 16)
def _letters(n: int) -> str:
    out = ""
    while True:
        out = chr(ord("a") + n % 26) + out
        n //= 26
        if n == 0:
            return out


def pformat(node: Node) -> str:
    """The text form of a MoX node (root, module call or equation)."""
    namer = Namer()
    if is_root(node):
        return _render(_block(node.block, namer, 0))
    return _render(_node(node, namer, 0)).removeprefix("\n")


# The printer is written as generators that yield text or nested generators; `_render`
# runs them with an explicit stack, so a model nested 1,000 modules deep prints without
# Python recursion while the code still reads top-down.
_Text = Iterator["str | _Text"]


def _render(text: _Text) -> str:
    parts: list[str] = []
    stack = [text]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif isinstance(item, str):
            parts.append(item)
        else:
            stack.append(item)
    return "".join(parts)


def _block(block: Block, namer: Namer, indent: int) -> _Text:
    """`{ lambda consts; invars. let`, the nodes, `in (outs) }`, jaxpr-style: the block
    opens on the current line, nodes sit at `indent + 4`, `in` at `indent + 2`."""
    consts = " ".join(namer.typed(v) for v in block.constvars)
    invars = " ".join(namer.typed(v) for v in block.invars)
    yield f"{{ lambda {consts}; {invars}. let"
    for node in block.nodes:
        yield _node(node, namer, indent + 4)
    outs = " ".join(namer(v) for v in block.outvars)
    yield f"\n{' ' * (indent + 2)}in ({outs}{',' if len(block.outvars) == 1 else ''}) }}"


_HIDDEN_JIT_PARAMS = frozenset(
    {
        "in_shardings",
        "out_shardings",
        "in_layouts",
        "out_layouts",
        "donated_invars",
        "ctx_mesh",
        "compiler_options_kvs",
        "keep_unused",
        "inline",
    }
)


def _shown_params(node: Equation) -> dict[str, Any]:
    params = {k: v for k, v in node.params.items() if v is not None}
    if node.primitive.name == JIT_NAME:
        params = {k: v for k, v in params.items() if k not in _HIDDEN_JIT_PARAMS}
    if node.name is not None:
        params = {"name": node.name, **params}
    return params


def _node(node: Node, namer: Namer, indent: int) -> _Text:
    """A node's lines, each after a line break."""
    pad = " " * indent
    ins = " ".join(namer(v) for v in node.invars)
    outs = " ".join(namer.typed(v) for v in node.outvars)
    if isinstance(node, ModuleCall):
        attrs = {"type": node.info.short_type, "name": node.info.name, **node.info.attrs}
        params = " ".join(f"{k}={_param(v)}" for k, v in attrs.items())
        yield f"\n{pad}{outs} = module_call[{params}] {ins} "
        yield _block(node.body, namer, indent)
        return
    assert isinstance(node, Equation)
    regions = {(region.param, region.index): region.block for region in node.regions}
    params = _shown_params(node)
    if not regions:
        text = " ".join(f"{k}={_param(v)}" for k, v in params.items())
        bracket = f"[{text}]" if text else ""
        yield f"\n{pad}{outs} = {node.primitive.name}{bracket} {ins}".rstrip()
        return
    yield f"\n{pad}{outs} = {node.primitive.name}["
    for key, value in params.items():
        yield f"\n{pad}  {key}="
        if (key, None) in regions:
            yield _block(regions[key, None], namer, indent + 2)
        elif (key, 0) in regions:
            for i in range(len(value)):
                yield " " if i else ""
                yield _block(regions[key, i], namer, indent + 2)
        else:
            yield _param(value)
    yield f"\n{pad}] {ins}".rstrip()


def _param(value: Any) -> str:
    if isinstance(value, str):
        return value
    func_name = getattr(getattr(value, "debug_info", None), "func_name", None)
    if func_name is not None:
        return func_name
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", type(value).__name__)
    return encode(value, strict=False)


set_text_form(pformat)
