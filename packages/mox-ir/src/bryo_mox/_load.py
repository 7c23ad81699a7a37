"""Rebuild a MoX from a document (what serializers read), by re-tracing it.

The document is interpreted under `jax.make_jaxpr`: primitives are looked up by name in
jax's primitive registry (`jax.extend.core.primitives`) and bound with their decoded
params; `jit` regions are rebuilt with `jax.jit`; custom derivative equations with
`jax.custom_jvp`/`jax.custom_vjp` from their primal and rule regions; other sub-jaxprs
(`scan`, `cond`, ...) are traced from their regions; module calls become module regions
again. Every failure is a `MoxSerializationError` naming the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex

from ._errors import MoxError, MoxSerializationError
from ._ir import CUSTOM_DERIVATIVE_NAMES, JIT_ALIASES, ModuleInfo, Mox
from ._regions import bind_with_regions
from ._rules import rebuild_custom
from ._trace import call_region, convert_closed, intercepting
from ._types import from_storage, parse_type, same_type
from .document import MAX_DEPTH, MODULE_ATTRS, Const, DocNode, Port, literal_value


def _primitive_table() -> dict[str, jex.Primitive]:
    table: dict[str, jex.Primitive] = {}
    for value in vars(jex.primitives).values():
        if isinstance(value, jex.Primitive):
            table.setdefault(value.name, value)
    return table


_PRIMITIVES = _primitive_table()


def _wrap_key_data(ins: list[Any], params: dict[str, Any]) -> list[Any]:
    impl = params.get("impl")
    return [jax.random.wrap_key_data(ins[0], impl=getattr(impl, "name", impl))]


#: Primitives jax does not export, rebuilt through the public function that binds them.
PUBLIC_BINDERS: dict[str, Any] = {
    "random_unwrap": lambda ins, params: [jax.random.key_data(ins[0])],
    "random_wrap": _wrap_key_data,
}


def primitive(name: str) -> jex.Primitive:
    """jax's primitive called `name`."""
    found = _PRIMITIVES.get(name)
    if found is None:
        raise MoxSerializationError(
            f"unknown primitive `{name}`: it is not in `jax.extend.core.primitives` of this "
            f"jax ({jax.__version__}). The file was written by another jax version or "
            "uses a primitive that cannot be rebuilt."
        )
    return found


def check_depth(doc: DocNode, limit: int = MAX_DEPTH) -> None:
    """Reject documents nested deeper than `limit` (iteratively, no recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise MoxSerializationError(
                f"the document nests deeper than {limit} levels; refusing to read it."
            )
        stack.extend((child, depth + 1) for child in node.children)


def from_document(doc: DocNode) -> Mox:
    """Rebuild a `Mox` from a document read by a serializer."""
    check_depth(doc)
    if doc.tag != "mox":
        raise MoxSerializationError(f"the root element is `{doc.tag}`, expected `mox`.")
    avals = [_type(p) for p in doc.inputs]
    names = [_name(p, "mox input") for p in doc.inputs]

    def flat(*xs: Any) -> list[Any]:
        return run_block(doc, xs, names)

    try:
        with intercepting():
            closed = jax.make_jaxpr(flat)(*avals)
    except MoxSerializationError:
        raise
    except (MoxError, TypeError, ValueError, KeyError, AttributeError) as error:
        raise MoxSerializationError(f"cannot rebuild the MoX: {error}") from error
    in_tree, out_tree = _tree(doc.attrs.get("in_tree")), _tree(doc.attrs.get("out_tree"))
    extra_keys = tuple(doc.attrs.get("extra") or ())
    if len(extra_keys) > len(avals):
        raise MoxSerializationError("attr `extra` names more parameters than the root has.")
    extra_avals = avals[len(avals) - len(extra_keys) :]
    extra = tuple(
        (str(k), jax.ShapeDtypeStruct(a.shape, a.dtype))
        for k, a in zip(extra_keys, extra_avals, strict=False)
    )
    if in_tree is not None and in_tree.num_leaves != len(avals) - len(extra):
        in_tree = None
    return Mox(convert_closed(closed), in_tree, out_tree, extra)


def _tree(example: Any) -> jax.tree_util.PyTreeDef | None:
    if example is None:
        return None
    return jax.tree_util.tree_structure(example)


def _type(port: Port | Const) -> jax.ShapeDtypeStruct:
    try:
        return parse_type(port.type)
    except MoxError as error:
        raise MoxSerializationError(str(error)) from None


def _name(port: Port, where: str) -> str:
    name = port.bind or port.name
    if name is None:
        raise MoxSerializationError(f"a {where} has no variable name.")
    return name


def run_block(doc: DocNode, args: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """Evaluate a document block (root, module body or region) inside the trace."""
    env: dict[str, Any] = {}
    for const in doc.consts:
        aval = _type(const)
        try:
            env[const.name] = from_storage(np.asarray(const.data), aval)
        except MoxError as error:
            raise MoxSerializationError(f"constant `{const.name}`: {error}") from None
    for name, value in zip(names, args, strict=True):
        env[name] = value

    def read(port: Port) -> Any:
        if port.name is None:
            return literal_value(port)
        try:
            return env[port.name]
        except KeyError:
            raise MoxSerializationError(
                f"variable `{port.name}` is used in <{doc.tag}> before it is defined."
            ) from None

    for child in doc.children:
        if child.tag == "region":
            raise MoxSerializationError(f"a <region> may not appear directly in <{doc.tag}>.")
        ins = [read(p) for p in child.inputs]
        outs = run_node(child, ins)
        if len(outs) != len(child.outputs):
            raise MoxSerializationError(
                f"<{child.tag}> produces {len(outs)} values but lists {len(child.outputs)} outputs."
            )
        for port, value in zip(child.outputs, outs, strict=False):
            if port.name is None:
                raise MoxSerializationError(f"an output of <{child.tag}> has no name.")
            if not same_type(parse_type(port.type), value):
                raise MoxSerializationError(
                    f"<{child.tag}> output `{port.name}` is {port.type} in the file but "
                    f"computes to a different type ({value.shape}, {value.dtype})."
                )
            env[port.name] = value
    return [read(p) for p in doc.results]


def run_node(doc: DocNode, ins: list[Any]) -> list[Any]:
    """Evaluate one document node on its input values."""
    if doc.tag == "module_call":
        return _module_call(doc, ins)
    regions = {
        (c.attrs.get("param"), c.attrs.get("index")): c for c in doc.children if c.tag == "region"
    }
    if doc.tag in JIT_ALIASES:
        body = _region_fn(regions, "jaxpr", doc)
        body.__name__ = body.__qualname__ = str(doc.attrs.get("name", "jit"))
        jitted = jax.jit(
            body,
            inline=bool(doc.attrs.get("inline", False)),
            keep_unused=bool(doc.attrs.get("keep_unused", False)),
        )
        return list(jitted(*ins))
    if doc.tag in CUSTOM_DERIVATIVE_NAMES:
        rule_key = "jvp" if doc.tag == "custom_jvp_call" else "vjp"
        fun = rebuild_custom(
            doc.tag,
            str(doc.attrs.get("name") or doc.tag),
            _region_fn(regions, "call_jaxpr", doc),
            _region_fn(regions, rule_key, doc),
            ins,
        )
        return fun(*ins)
    return _bind(doc, ins, regions)


def _module_call(doc: DocNode, ins: list[Any]) -> list[Any]:
    attrs = dict(doc.attrs)
    n_state = int(attrs.get("state_inputs", 0))
    n_state_out = int(attrs.get("state_outputs", 0))
    info = ModuleInfo(
        str(attrs.get("qualtype") or attrs.get("type") or "module"),
        str(attrs.get("name", "")),
        {k: v for k, v in attrs.items() if k not in MODULE_ATTRS},
    )
    names = [_name(p, "module_call input") for p in doc.inputs]

    def fn(state: list[Any], args: list[Any]) -> tuple[list[Any], list[Any]]:
        outs = run_block(doc, [*state, *args], names)
        return outs[:n_state_out], outs[n_state_out:]

    new_state, out = call_region(info, fn, ins[:n_state], ins[n_state:])
    return [*new_state, *out]


def _region_fn(regions: dict[Any, DocNode], key: str, doc: DocNode) -> Any:
    region = regions.get((key, None))
    if region is None:
        raise MoxSerializationError(f'<{doc.tag}> lacks its <region param="{key}">.')
    names = [_name(p, "region input") for p in region.inputs]
    return lambda *xs: run_block(region, xs, names)


def _bind(doc: DocNode, ins: list[Any], regions: dict[Any, DocNode]) -> list[Any]:
    if doc.tag in PUBLIC_BINDERS and not regions:
        return PUBLIC_BINDERS[doc.tag](ins, dict(doc.attrs))
    prim = primitive(doc.tag)
    params = dict(doc.attrs)
    traced: dict[tuple[str, int | None], jex.ClosedJaxpr] = {}
    open_params: dict[tuple[str, int | None], bool] = {}
    counts: dict[str, int] = {}
    for (key, index), region in regions.items():
        names = [_name(p, "region input") for p in region.inputs]
        avals = [_type(p) for p in region.inputs]
        traced[str(key), index] = jax.make_jaxpr(
            lambda *xs, _r=region, _n=names: run_block(_r, xs, _n)
        )(*avals)
        open_params[str(key), index] = not region.attrs.get("closed", True)
        if index is not None:
            counts[str(key)] = max(counts.get(str(key), 0), int(index) + 1)
    for key, count in counts.items():
        if sorted(i for k, i in traced if k == key) != list(range(count)):
            raise MoxSerializationError(f'<{doc.tag}> lacks a <region param="{key}"> index.')
        params[key] = tuple(traced[key, i] for i in range(count))  # placeholders, replaced
    try:
        return bind_with_regions(
            prim, params, ins, traced, open_params, lambda: f"equation `{doc.tag}`"
        )
    except MoxSerializationError:
        raise
    except Exception as error:
        raise MoxSerializationError(
            f"cannot rebuild equation `{doc.tag}` with params {sorted(params)}: "
            f"{type(error).__name__}: {error}"
        ) from error
