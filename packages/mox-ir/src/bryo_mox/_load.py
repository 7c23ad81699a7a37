"""Rebuild a MoX from a document (what serializers read): its jaxpr is built directly.

A document is read straight into MoX blocks: the root's and each module body's
equations become `Equation` nodes as they are built, and each module call a
`ModuleCall` around its body's block, with what `convert_closed` would make of a traced
jaxpr (unchanged state outputs pruned, each block holding the constants it uses).
Nothing is re-traced node by node, so loading costs about what the file holds:

- a leaf equation is bound once with `jax.make_jaxpr` per distinct (primitive, params,
  input types) — jax checks the params and computes the output types there — and every
  equation like it reuses that result with its own variables;
- a `jit` equation is built around its body directly, with the params a `jax.jit`
  equation of that arity gets (traced once per arity). Sub-jaxprs (a `jit`'s body, a
  `scan`'s) are jaxprs, since equations hold them: a module call inside one is its
  body's equations between the two marker equations tracing puts around a call
  (`_markers`), converted with the rest of the region;
- an equation with other regions (custom derivatives, `scan`, `cond`, `while`, `remat`)
  is rebuilt through public APIs (`jax.custom_jvp`/`custom_vjp` from its primal and rule
  regions, the primitive's bind around traced regions) once per distinct subtree: the 31
  ReLUs of an MLP are rebuilt once;
- each (primitive, param names) this process has not lowered before is lowered once,
  a file's new ones together (`_lowering`): an abstract evaluation may ignore a param
  name its lowering refuses (`<lt bogus="1">`).

Every declared type is checked against what it connects to (an input against the
variable it reads, an output against what its equation computes, a literal against its
value, a module's body against its call); names are defined once per scope (a root that
lists an input twice is refused). The builder walks nested scopes with an explicit
stack, so depth is bounded by `Limits.max_depth`, never by Python's recursion limit.
Every failure is a `MoxSerializationError` naming the node, located in the file.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Generator, Hashable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

import jax
import jax.core
import numpy as np
from jax import lax
from jax.extend import core as jex

from bryo_pytree import BoundedCache, PyTreeDef, run_frames

from ._codec import value_key
from ._compat import (
    DebugInfo,
    DropVar,
    JaxprTypeError,
    check_jaxpr,
    missing_primitives,
    new_jaxpr_eqn,
    trace_context,
)
from ._errors import MoxError, MoxSerializationError
from ._ir import (
    CUSTOM_DERIVATIVE_NAMES,
    JIT_ALIASES,
    Block,
    Equation,
    ModuleCall,
    ModuleInfo,
    Mox,
    array_aval,
    jaxpr_params,
    new_equation,
)
from ._limits import array_nbytes, current_budget
from ._lowering import LOWERED, Pending, check_param_names, names_key
from ._markers import CallMarker, begin_p, end_p, marker_equation
from ._params import check_params
from ._regions import bind_with_regions
from ._rules import differentiable, rebuild_custom
from ._trace import equation_node, named_equation
from ._treespec import ARRAY, TreeSpec
from ._types import from_storage, is_key_dtype, parse_type, same_type, type_str
from .document import (
    ATTR_NAME,
    MODULE_ATTRS,
    NOWHERE,
    DocNode,
    Port,
    Source,
    located,
    port_source,
)

Atom = jex.Var | jex.Literal


def _primitive_table() -> dict[str, jex.Primitive]:
    """The primitives `jax.extend.core.primitives` exports, by name (`primitive` finds the
    others, `missing_primitives`, on first use: they are traced)."""
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
    found = _PRIMITIVES.get(name) or missing_primitives().get(name)
    if found is None:
        raise MoxSerializationError(
            f"unknown primitive `{name}`: it is not in `jax.extend.core.primitives` of this "
            f"jax ({jax.__version__}). The file was written by another jax version or "
            "uses a primitive that cannot be rebuilt."
        )
    return found


def check_depth(doc: DocNode) -> None:
    """Refuse documents nested deeper than the load's `Limits.max_depth`, iteratively."""
    budget = current_budget()
    limit = budget.limits.max_depth
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            budget.check_depth(depth, **_where(node.source))
        if depth < limit:  # a child without children is within the limit: nothing to check
            stack.extend((child, depth + 1) for child in node.children if child.children)
        else:
            stack.extend((child, depth + 1) for child in node.children)


def from_document(doc: DocNode) -> Mox:
    """Rebuild a `Mox` from a document read by a serializer.

    Raises:
        MoxSerializationError: the document is malformed; the error is located in the file
            when the serializer recorded where each node is (`DocNode.source`).
    """
    if not isinstance(doc, DocNode):
        raise MoxSerializationError(f"expected a document (DocNode), got {type(doc).__name__}.")
    check_depth(doc)
    if doc.tag != "mox":
        raise _at(doc.source, f"the root element is `{doc.tag}`, expected `mox`.")
    block = _Builder().run(doc)
    extra = _extra(doc, [v.aval for v in block.invars])
    n_args = len(block.invars) - len(extra)
    in_tree = _tree(doc, "in_tree")
    kwargs_tree = _tree(doc, "kwargs_tree", 0 if in_tree is None else in_tree.num_leaves)
    counted = sum(t.num_leaves for t in (in_tree, kwargs_tree) if t is not None)
    if in_tree is not None and counted != n_args:
        raise _at(
            doc.source,
            f"attrs `in_tree` and `kwargs_tree` number {counted} inputs; the root has "
            f"{n_args} (besides {len(extra)} extra parameters).",
        )
    out_tree = _tree(doc, "out_tree", 0, len(block.outvars))
    in_spec = _spec(doc, "in_spec", n_args) if in_tree is None else None
    out_spec = _spec(doc, "out_spec", len(block.outvars)) if out_tree is None else None
    return Mox(
        block,
        in_tree,
        out_tree,
        extra,
        kwargs_tree=kwargs_tree if in_tree is not None else None,
        static_kwargs=_static_kwargs(doc),
        in_spec=in_spec,
        out_spec=out_spec,
    )


def _spec(doc: DocNode, attr: str, arrays: int) -> TreeSpec | None:
    """The tree spec written in attr `attr` (paths and node kinds, `TreeSpec`), or `None`
    when not written; it must hold `arrays` array leaves (and the arguments' spec, a pair
    `(args, kwargs)`; a result's spec, no static leaves)."""
    text = doc.attrs.get(attr)
    if text is None:
        return None
    try:
        spec = TreeSpec.parse(text)
    except MoxError as error:
        raise _at(doc.source, f"attr `{attr}`: {error}") from None
    kinds = spec.leaf_kinds
    n_arrays = kinds.count(ARRAY)
    if n_arrays != arrays or (attr == "out_spec" and len(kinds) != arrays):
        what = "inputs" if attr == "in_spec" else "results"
        raise _at(
            doc.source,
            f"attr `{attr}` has {n_arrays} array leaves and {len(kinds) - n_arrays} static "
            f"ones; the root has {arrays} {what}.",
        )
    root = spec.nodes[0]
    if attr == "in_spec" and (root.kind != "tuple" or root.arity != 2):
        raise _at(
            doc.source, f"attr `{attr}` must be the pair `(args, kwargs)`, got a `{root.kind}`."
        )
    return spec


def _static_kwargs(doc: DocNode) -> tuple[tuple[str, Any], ...]:
    pairs = doc.attrs.get("static_kwargs") or ()
    if not isinstance(pairs, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in pairs
    ):
        raise _at(
            doc.source, f"attr `static_kwargs` must be (name, value) pairs, got {pairs!r:.80}."
        )
    return pairs


def _extra(doc: DocNode, avals: Sequence[Any]) -> tuple[tuple[str, jax.ShapeDtypeStruct], ...]:
    keys = doc.attrs.get("extra") or ()
    if not isinstance(keys, tuple) or not all(isinstance(k, str) for k in keys):
        raise _at(doc.source, f"attr `extra` must be a tuple of names, got {keys!r:.80}.")
    if len(set(keys)) != len(keys):
        raise _at(doc.source, "attr `extra` names a parameter twice.")
    if len(keys) > len(avals):
        raise _at(
            doc.source, f"attr `extra` names {len(keys)} parameters; the root has {len(avals)}."
        )
    tail = avals[len(avals) - len(keys) :]
    return tuple(
        (k, jax.ShapeDtypeStruct(a.shape, a.dtype)) for k, a in zip(keys, tail, strict=True)
    )


def _tree(doc: DocNode, attr: str, first: int = 0, leaves: int | None = None) -> PyTreeDef | None:
    """The treedef written in attr `attr`: a tree of tuples/lists/dicts/None whose leaves
    number flat values in order from `first` (`(0, {'a': 1})`), or `None` when not written.
    With `leaves`, the tree must number exactly that many values."""
    example = doc.attrs.get(attr)
    if example is None:
        return None
    flat, treedef = jax.tree_util.tree_flatten(example)
    count = len(flat) if leaves is None else leaves
    if not _plain_tree(example) or flat != list(range(first, first + count)):
        raise _at(
            doc.source,
            f"attr `{attr}` must be a tree of tuples, lists and dicts numbering "
            f"{'the ' + str(leaves) if leaves is not None else 'its'} flat values in order"
            f"{f' from {first}' if first else ''}, got {example!r:.80}.",
        )
    return treedef


def _plain_tree(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) in (tuple, list):
            stack.extend(item)
        elif type(item) is dict:
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend(item.values())
        elif not (item is None or type(item) is int):
            return False
    return True


def _where(source: Source | None) -> dict[str, Any]:
    source = source or NOWHERE
    return {"line": source.line, "position": source.position, "path": source.path}


def _at(source: Source | None, message: str) -> MoxSerializationError:
    return (source or NOWHERE).error(message)


#: What loads traced, for every load of this process: a file of a 128-block model has
#: some 46 distinct leaf equations (an `add` of two `f32[2,8,32]`, ...), and tracing one
#: with `jax.make_jaxpr` costs more than building a hundred equations like it, so that a
#: small file would spend most of its load tracing what the last file traced.
#:
#: Holds leaf equations (keyed by the primitive, its params by `value_key` and the input
#: types), equations with regions (by `_fingerprint`: their whole content) and `jit`
#: templates (by arity); every key holds jax's trace context (`_compat.trace_context`:
#: x64, precision, the mesh, ...), and only values compared by content, never an object
#: alive with one document. A traced equation is immutable, so two MoXes may share it as
#: the equations of one file do.
TRACES: BoundedCache[Any] = BoundedCache(4096)
#: The largest params (as text) or equation with regions (in `_fingerprint` tokens) kept
#: in `TRACES`, so that what loads of untrusted files leave there stays small (a few MB
#: in all); equations with regions that hold constants are not kept either.
SHARED_KEY_CHARS = 2048
SHARED_FINGERPRINT_TOKENS = 512


def _shared(key: Hashable | None, make: Callable[[], Any]) -> Any:
    """What `TRACES` keeps for `key`, else `make()`, kept there (unless `key` is None: not
    shareable). A `make` that raises keeps nothing."""
    found = None if key is None else TRACES.get(key)
    if found is None:
        found = make()
        if key is not None:
            TRACES.put(key, found)
    return found


class _Scope(NamedTuple):
    """A request from a scope being built to the driver: build `doc`'s scope first.

    `doc` is a module call (its body) or a region, `depth` its scope's nesting (the
    root's is 1). A region's `ClosedJaxpr` is sent back; a module body built `into` its
    caller's jaxpr sends back its results; a module body built on `block_ins` (the
    body of a call in a block) its `Block`.
    """

    doc: DocNode
    depth: int
    into: _Into | None = None
    block_ins: list[jex.Var] | None = None


class _Into(NamedTuple):
    """Where the body of a module called inside a region (a sub-jaxpr) is built: straight
    into its caller's jaxpr (`eqns`, `constvars`, `consts`) between the call's marker
    equations, on the variables `ins` (the begin marker's outputs), so that an equation
    is made once, not once more per module around it. (A module called in a block gets a
    block of its own: `_BlockBuilder.call`.)"""

    ins: list[jex.Var]
    eqns: list[jex.JaxprEqn]
    constvars: list[jex.Var]
    consts: list[Any]


class _JitTemplate(NamedTuple):
    """The params, source info and context of a traced `jax.jit` equation of one arity."""

    params: dict[str, Any]
    source_info: Any
    ctx: Any


#: A scope being built. The driver sends back what the requested scope returns: a region's
#: `ClosedJaxpr`, a module body's outputs (a scope built `into` its caller) or its `Block`.
_Building = Generator[_Scope, Any, "jex.ClosedJaxpr | list[Atom] | Block"]


class _Builder:
    """Builds one document's jaxpr; caches what it traced for this document only."""

    def __init__(self) -> None:
        self.budget = current_budget()
        #: jax's trace context during this load (`TRACES` keys), None without one
        self.context = trace_context() if trace_context is not None else None
        self.avals: dict[str, jax.core.ShapedArray] = {}
        self.literals: dict[Any, Any] = {}  # see `literal`
        #: `(id(aval), type string) -> aval` for the pairs `check_type` found equal
        self.checked: dict[tuple[int, Any], Any] = {}
        self.same_pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
        self.traced: dict[Any, _Traced] = {}
        self.frozen_attrs: dict[Any, Any] = {}  # see `_fingerprint`
        self.attr_names: set[str] = set()
        self.jit_templates: dict[tuple[int, int], _JitTemplate] = {}
        self.at: Source | None = None
        #: `jaxpr_params` of the equations made into nodes (`equation_node`)
        self.params_jaxprs: dict[int, tuple[Any, list[Any]]] = {}
        #: equations whose (primitive, param names) this process has not lowered yet
        #: (`_lowering`), lowered together when the document is built
        self.unlowered: dict[Hashable, Pending] = {}

    # -- the driver: nested scopes on an explicit stack ---------------------------------

    def run(self, root: DocNode) -> Block:
        """Build the root scope, and every scope it asks for, without recursing."""
        built = run_frames(self.scope(root, root=True), self.enter, on_error=self.locate_error)
        check_param_names(list(self.unlowered.values()))
        return cast(Block, built)  # the root scope is a block

    def note_names(self, node: DocNode, closed: jex.ClosedJaxpr) -> None:
        """Have `node`'s param names lowered (`_lowering`) unless this process did."""
        names = frozenset(node.attrs)
        key = names_key(node.tag, names)
        if key not in self.unlowered and LOWERED.get(key) is None:
            self.unlowered[key] = Pending(node.tag, names, closed, node.source)

    def enter(self, request: _Scope) -> _Building:
        """The scope a request asks for, within the load's depth budget."""
        self.budget.check_depth(request.depth, **_where(request.doc.source))
        return self.scope(
            request.doc, depth=request.depth, into=request.into, block_ins=request.block_ins
        )

    def locate_error(self, error: Exception) -> MoxSerializationError:
        """An error raised while building a scope, located at the node being built."""
        if isinstance(error, MoxError):
            return located(error, self.at)
        if isinstance(error, RecursionError):
            return _at(self.at, "the document nests too deeply for jax to rebuild.")
        return _at(self.at, f"cannot rebuild the node: {type(error).__name__}: {error}")

    # -- one scope: a root, a module body or a region -----------------------------------

    def scope(
        self,
        doc: DocNode,
        *,
        root: bool = False,
        depth: int = 1,
        into: _Into | None = None,
        block_ins: list[jex.Var] | None = None,
    ) -> _Building:
        """Build `doc`'s scope: the root, or a module body on `block_ins`, into a `Block`;
        a region into a closed jaxpr; a module body `into` a caller's jaxpr (its
        results). Asks the driver for inner scopes."""
        self.at = doc.source
        _check_attr_names(doc, self.attr_names)
        env: dict[str, Atom] = {}
        as_block = root or block_ins is not None
        constvars: list[jex.Var] = [] if into is None else into.constvars
        consts: list[Any] = [] if into is None else into.consts
        for const in doc.consts:
            self.at = const.source or doc.source
            aval = self.aval(const.type)
            var = jex.Var(aval)
            value = from_storage(np.asarray(const.data), aval)
            self.define(env, const.name, var, doc, "a constant")
            constvars.append(var)
            consts.append(value)
        if into is not None or block_ins is not None:
            # a body runs on its caller's values: only the types are checked
            invars = into.ins if into is not None else cast(list[jex.Var], block_ins)
            declared = [self.input_aval(port, doc) for port in doc.inputs]
            self.at = doc.source
            self.check_body(doc, invars, declared)
        else:
            invars = [self.input(port, doc) for port in doc.inputs]
        for port, var in zip(doc.inputs, invars, strict=True):
            try:
                name = port.bind or port.name
                self.define(env, name, var, doc, "a root input" if root else "an input")
            except Exception:
                self.at = port_source(doc, port)  # found only for an error: it allocates
                raise
        eqns: list[jex.JaxprEqn] = [] if into is None else into.eqns
        block = _BlockBuilder(self, constvars, consts) if as_block else None
        attr_names, checked = self.attr_names, self.checked
        traced_get, nodes = self.traced.get, block.nodes if block is not None else None
        for child in doc.children:
            self.at = child.source
            if not attr_names.issuperset(child.attrs):
                _check_attr_names(child, attr_names)
            ins = self.read_all(env, child.inputs, child)
            self.at = child.source
            tag = child.tag
            if not child.children and tag not in _NOT_LEAVES:
                # the usual node, a leaf equation traced before: copied here on fresh
                # outputs (what `leaf`, `_inline` and `_BlockBuilder.add` would do)
                attrs_key = child.attrs_key
                traced = None
                if attrs_key is not None:
                    traced = traced_get((tag, attrs_key, *map(_AVAL, ins)))
                if traced is not None and traced.plain:
                    # (`map`, not comprehensions: each of those makes a function object)
                    eqn = cast(jex.JaxprEqn, traced.single)
                    outs = list(map(jex.Var, traced.out_avals))
                    reads = ins if traced.in_order else _placed(traced, ins)
                    copy = jex.JaxprEqn(
                        reads,
                        outs,
                        eqn.primitive,
                        eqn.params,
                        eqn.effects,
                        eqn.source_info,
                        eqn.ctx,
                    )
                    if block is None:
                        eqns.append(copy)
                    else:
                        if constvars:
                            block.use(reads)
                        cast(list[Any], nodes).append(new_equation(copy))
                    outputs = child.outputs
                    if len(outputs) == 1 == len(outs):  # the usual output, as `bind_outputs`
                        port, atom = outputs[0], outs[0]
                        name, text = port.name, port.type
                        if (
                            type(name) is type(text) is str
                            and name
                            and name not in env
                            and checked.get((id(atom.aval), text)) is atom.aval
                        ):
                            env[name] = atom
                            continue
                    self.bind_outputs(env, child, outs)
                    continue
            if tag == "region":
                raise MoxSerializationError(f"a <region> may not appear directly in <{doc.tag}>.")
            if child.tag == "module_call" and block is not None:
                body_ins = [jex.Var(atom.aval) for atom in ins]
                body = yield _Scope(child, depth + 1, block_ins=body_ins)
                self.at = child.source
                outs = block.call(child, self.module_info(child, ins), ins, cast(Block, body))
            elif child.tag == "module_call":
                marker, body_ins = self.module_begin(child, ins, eqns)
                inline = _Into(body_ins, eqns, constvars, consts)
                body_outs = yield _Scope(child, depth + 1, inline)
                self.at = child.source
                outs = self.module_end(child, marker, body_outs, eqns)
            elif child.tag in JIT_ALIASES:
                region = _regions(child, expected={("jaxpr", None)})[("jaxpr", None)]
                body = yield _Scope(region, depth + 1)
                self.at = child.source
                outs = self.jit(child, ins, body, eqns)
            elif child.children or child.tag in CUSTOM_DERIVATIVE_NAMES:
                fingerprint, by_content = _fingerprint(child, self.frozen_attrs)
                key = (fingerprint, tuple(a.aval for a in ins))
                traced = self.traced.get(key)
                if traced is None:
                    shareable = by_content and self.context is not None and _small(fingerprint)
                    shared = (key, self.context) if shareable else None
                    traced = None if shared is None else TRACES.get(shared)
                    if traced is None:
                        regions = {}
                        for region_key, region in _regions(child).items():
                            regions[region_key] = yield _Scope(region, depth + 1)
                        self.at = child.source
                        traced = _prepared(self.trace_with_regions(child, ins, regions))
                        if shared is not None:
                            TRACES.put(shared, traced)
                    self.traced[key] = traced
                    if child.tag not in CUSTOM_DERIVATIVE_NAMES:  # params made by jax
                        self.note_names(child, traced.closed)
                outs = _inline(traced, ins, eqns, constvars, consts)
            else:
                outs = self.leaf(child, ins, eqns, constvars, consts)
            if block is not None and eqns:
                block.add(eqns)
            self.bind_outputs(env, child, outs)
        self.at = doc.source
        outvars = self.read_all(env, doc.results, doc)
        if block is not None:
            return block.finish(invars, outvars)
        if into is not None:
            return outvars
        effects: set[Any] = set()
        for eqn in eqns:
            effects.update(eqn.effects)
        debug = DebugInfo("bryo_mox.loads", str(doc.attrs.get("name") or doc.tag), None, None)
        jaxpr = jex.Jaxpr(constvars, invars, outvars, eqns, effects, debug)
        return jex.ClosedJaxpr(jaxpr, consts)

    def input(self, port: Port, doc: DocNode) -> jex.Var:
        """A variable for an input of a scope, of its declared type."""
        return jex.Var(self.input_aval(port, doc))

    def input_aval(self, port: Port, doc: DocNode) -> Any:
        """The declared type of an input of a scope, which must name a variable."""
        try:
            if (port.bind or port.name) is None:
                raise MoxSerializationError(f"an input of <{doc.tag}> has no variable name.")
            return self.aval(port.type)
        except Exception:
            self.at = port_source(doc, port)  # found only for an error: it allocates
            raise

    def aval(self, text: Any) -> Any:
        """The abstract value of a type string, with its size bounded."""
        try:
            return self.avals[text]
        except (KeyError, TypeError):  # a new type, or not a string (refused below)
            pass
        if not isinstance(text, str):
            raise MoxSerializationError(
                f"a `type` must be a string such as 'f32[2,3]', got {text!r:.40}."
            )
        self.budget.count_type(text)
        sds = parse_type(text)
        itemsize = 4 if is_key_dtype(sds.dtype) else np.dtype(sds.dtype).itemsize
        array_nbytes(tuple(sds.shape), itemsize)
        aval = self.avals[text] = jax.core.ShapedArray(
            sds.shape, sds.dtype, weak_type=sds.weak_type
        )
        return aval

    def literal(self, value: Any, aval: Any) -> Any:
        """`_literal(value, aval)`, once per scalar value and type: models repeat their
        literals (`x * 0.5` in every block). Arrays are made (and counted) each time."""
        if type(value) not in _SCALARS:
            return _literal(value, aval)
        key = (value_key(value), aval)
        hit = self.literals.get(key)
        if hit is None:
            self.budget.count_literal(value, type_str(aval))
            hit = self.literals[key] = _literal(value, aval)
        # a strongly typed literal is a 0-d array: each Literal gets its own
        return hit.copy() if isinstance(hit, np.ndarray) else hit

    def define(self, env: dict[str, Atom], name: Any, atom: Atom, doc: DocNode, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise MoxSerializationError(f"{what} of <{doc.tag}> has no valid variable name.")
        if name in env:
            raise MoxSerializationError(
                f"<{doc.tag}> defines variable `{name}` twice (again as {what}); every "
                "variable of a scope needs its own name."
            )
        env[name] = atom

    def read_all(self, env: dict[str, Atom], ports: list[Port], node: DocNode) -> list[Atom]:
        """The atoms `ports` of `node` read (`read`)."""
        checked, atoms = self.checked, []
        for port in ports:
            # the common port: a defined variable whose type was checked against this
            # type string before; `read` does the rest, and raises every error
            name, text = port.name, port.type
            atom = env.get(name) if type(name) is str and type(text) is str else None
            if atom is None or checked.get((id(atom.aval), text)) is not atom.aval:
                atom = self.read(env, port, node)
            atoms.append(atom)
        return atoms

    def read(self, env: dict[str, Atom], port: Port, node: DocNode) -> Atom:
        """The atom a port reads: a variable of the scope or a literal, of its declared type."""
        self.at = port_source(node, port)
        aval = self.aval(port.type)
        if port.name is None:
            return jex.Literal(self.literal(port.value, aval), aval)
        atom = env.get(port.name)
        if atom is None:
            raise MoxSerializationError(
                f"variable `{port.name}` is used in <{node.tag}> before it is defined."
            )
        self.check_type(atom, port, node, "input")
        return atom

    def bind_outputs(self, env: dict[str, Atom], node: DocNode, outs: Sequence[Atom]) -> None:
        if len(outs) != len(node.outputs):
            raise MoxSerializationError(
                f"<{node.tag}> computes {len(outs)} values but lists {len(node.outputs)} outputs."
            )
        checked = self.checked
        for port, atom in zip(node.outputs, outs, strict=True):
            name = port.name
            # the common output: a new name, of a type checked against this string before
            if (
                type(name) is type(port.type) is str
                and name
                and name not in env
                and checked.get((id(atom.aval), port.type)) is atom.aval
            ):
                env[name] = atom
                continue
            self.at = port_source(node, port)
            if port.name is None:
                raise MoxSerializationError(f"an output of <{node.tag}> has no variable name.")
            self.check_type(atom, port, node, "output")
            self.define(env, port.name, atom, node, "an output")

    def check_type(self, atom: Atom, port: Port, node: DocNode, kind: str) -> None:
        """Refuse `atom` unless its type is the port's; remember each (aval, type string)
        found equal (`checked`), so that the next port like it is not parsed or compared."""
        aval = self.aval(port.type)
        if atom.aval is not aval and not same_type(atom.aval, aval):
            if kind == "output":
                raise MoxSerializationError(
                    f"<{node.tag}> output `{port.name}` is declared {port.type} but computes "
                    f"{type_str(atom.aval)}."
                )
            raise MoxSerializationError(
                f"<{node.tag}> declares `{port.name}` as {port.type}, but `{port.name}` is "
                f"{type_str(atom.aval)}."
            )
        # the aval is kept alive by the value, so its id stays its own
        self.checked[id(atom.aval), port.type] = atom.aval

    # -- the kinds of node --------------------------------------------------------------

    def leaf(
        self,
        node: DocNode,
        ins: list[Atom],
        eqns: list[jex.JaxprEqn],
        constvars: list[jex.Var],
        consts: list[Any],
    ) -> list[Atom]:
        attrs_key = node.attrs_key if node.attrs_key is not None else _freeze(node.attrs)
        key = (node.tag, attrs_key, *map(_AVAL, ins))
        traced = self.traced.get(key)
        if traced is None:

            def trace() -> _Traced:
                params = dict(node.attrs)
                check_params(node.tag, params, [a.aval for a in ins])
                if node.tag in PUBLIC_BINDERS:
                    binder = PUBLIC_BINDERS[node.tag]
                    fn: Callable[..., Any] = lambda *xs: binder(list(xs), params)
                else:
                    prim = primitive(node.tag)
                    fn = lambda *xs: _bound(prim, prim.bind(*xs, **params))
                return _prepared(self.trace(node, fn, ins))

            traced = self.traced[key] = _shared(self.shared_key(node, ins), trace)
            self.note_names(node, traced.closed)
        return _inline(traced, ins, eqns, constvars, consts)

    def shared_key(self, node: DocNode, ins: Sequence[Atom]) -> Hashable | None:
        """The key of a leaf in `TRACES`, or None when it may not be shared: a
        param without a content key (an array, a list, an object) or no trace context."""
        if self.context is None:
            return None
        params = []
        for name, value in node.attrs.items():
            key = value_key(value)
            if key is None:
                return None
            params.append((name, key))
        if len(repr(params)) > SHARED_KEY_CHARS:
            return None
        return (node.tag, tuple(params), tuple(a.aval for a in ins), self.context)

    def trace(self, node: DocNode, fn: Callable[..., Any], ins: Sequence[Atom]) -> jex.ClosedJaxpr:
        """`jax.make_jaxpr(fn)` on the types of `ins`; errors name the node."""
        # (located by `locate_error` at the node being built: `self.at`)
        self.budget.spend_trace(f"equation `{node.tag}`", len(ins) + len(node.outputs))
        avals = [
            jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
            for aval in map(array_aval, ins)
        ]
        try:
            return jax.make_jaxpr(fn)(*avals)
        except (MoxError, RecursionError):
            raise
        except Exception as error:
            params = ", ".join(sorted(node.attrs)) or "no params"
            raise MoxSerializationError(
                f"cannot rebuild equation `{node.tag}` ({params}) on inputs "
                f"({', '.join(type_str(a.aval) for a in ins)}): {type(error).__name__}: {error}. "
                "The file is damaged or was not written by bryo for this jax: write it again "
                "from the traced MoX."
            ) from None

    def trace_with_regions(
        self, node: DocNode, ins: list[Atom], regions: dict[tuple[str, int | None], jex.ClosedJaxpr]
    ) -> jex.ClosedJaxpr:
        """Trace a custom derivative equation, or bind a primitive around its regions."""
        if node.tag in CUSTOM_DERIVATIVE_NAMES:
            rule_key = "jvp" if node.tag == "custom_jvp_call" else "vjp"
            _expect(node, regions, {("call_jaxpr", None), (rule_key, None)})
            call, rule_region = regions["call_jaxpr", None], regions[rule_key, None]
            avals = [a.aval for a in ins]
            _check_rule(node, rule_key, avals, call, rule_region)
            primal, rule = jex.jaxpr_as_fun(call), jex.jaxpr_as_fun(rule_region)
            name = node.attrs.get("name")

            def custom(*xs: Any) -> list[Any]:
                fun = rebuild_custom(node.tag, str(name or node.tag), primal, rule, avals)
                return fun(*xs)

            return self.trace(node, custom, ins)
        prim = primitive(node.tag)
        if node.tag == "while":
            _expect(node, regions, {("cond_jaxpr", None), ("body_jaxpr", None)})
            _check_while(node, [a.aval for a in ins], regions)
        params = dict(node.attrs)
        check_params(node.tag, params, [a.aval for a in ins])
        counts: dict[str, int] = {}
        for key, index in regions:
            if index is not None:
                counts[key] = counts.get(key, 0) + 1
        for key, count in counts.items():
            params[key] = tuple(regions[key, i] for i in range(count))  # replaced when bound
        open_params = {key: not _closed_attr(node, key) for key in regions}

        def bind(*xs: Any) -> list[Any]:
            return bind_with_regions(
                prim, params, xs, regions, open_params, lambda: f"equation `{node.tag}`"
            )

        traced = self.trace(node, bind, ins)
        if check_jaxpr is not None:  # jax's bind does not check every region (scan carries)
            try:
                check_jaxpr(traced.jaxpr)
            except JaxprTypeError as error:
                raise MoxSerializationError(
                    f"<{node.tag}>'s regions do not fit it: {str(error).splitlines()[0]}"
                ) from None
        return traced

    def module_begin(
        self, node: DocNode, ins: list[Atom], eqns: list[jex.JaxprEqn]
    ) -> tuple[CallMarker, list[jex.Var]]:
        """A module call's begin marker equation (a call inside a region); returns the
        marker and the variables its body reads."""
        marker = self.module_info(node, ins)
        begin, body_ins = marker_equation(begin_p, ins, {"call": marker})
        eqns.append(begin)
        return marker, body_ins

    def module_info(self, node: DocNode, ins: Sequence[Atom]) -> CallMarker:
        """What a module call's attributes say of the module, and its count of state
        inputs."""
        attrs = node.attrs
        n_state = _count(node, "state_inputs", len(ins))
        for key in ("type", "qualtype", "name"):
            if not isinstance(attrs.get(key, ""), str):
                raise MoxSerializationError(f"<module_call> attr `{key}` must be a string.")
        info = ModuleInfo(
            str(attrs.get("qualtype") or attrs.get("type") or "module"),
            str(attrs.get("name", "")),
            {k: v for k, v in attrs.items() if k not in MODULE_ATTRS},
        )
        return CallMarker(info, n_state)

    def module_end(
        self, node: DocNode, marker: CallMarker, body_outs: list[Atom], eqns: list[jex.JaxprEqn]
    ) -> list[jex.Var]:
        """A module call's end marker equation on what its body returns; returns the
        call's outputs."""
        n_state_out = _count(node, "state_outputs", len(body_outs))
        end, outs = marker_equation(end_p, body_outs, {"call": marker, "n_state_out": n_state_out})
        eqns.append(end)
        return outs

    def jit(
        self, node: DocNode, ins: list[Atom], body: jex.ClosedJaxpr, eqns: list[jex.JaxprEqn]
    ) -> list[jex.Var]:
        name = node.attrs.get("name", "jit")
        return self.jit_equation(
            node,
            ins,
            body,
            eqns,
            name=str(name),
            inline=bool(node.attrs.get("inline", False)),
            keep_unused=bool(node.attrs.get("keep_unused", False)),
        )

    def jit_equation(
        self,
        node: DocNode,
        ins: list[Atom],
        body: jex.ClosedJaxpr,
        eqns: list[jex.JaxprEqn],
        **params: Any,
    ) -> list[jex.Var]:
        """A `jit` equation calling `body` on `ins`, with the params `jax.jit` gives it."""
        self.check_body(node, ins, [v.aval for v in body.jaxpr.invars])
        template = self.jit_template(len(ins), len(body.jaxpr.outvars))
        outvars = [jex.Var(a.aval) for a in body.jaxpr.outvars]
        eqns.append(
            new_jaxpr_eqn(
                list(ins),
                outvars,
                jex.primitives.jit_p,
                {**template.params, **params, "jaxpr": body},
                body.jaxpr.effects,
                template.source_info,
                template.ctx,
            )
        )
        return outvars

    def same_type(self, a: Any, b: Any) -> bool:
        """`same_type(a, b)`, remembered for the pair of avals (models repeat them)."""
        if a is b:
            return True
        hit = self.same_pairs.get((id(a), id(b)))
        if hit is not None and hit[0] is a and hit[1] is b:
            return True
        if not same_type(a, b):
            return False
        self.same_pairs[id(a), id(b)] = (a, b)  # holding them keeps their ids unique
        return True

    def check_body(self, node: DocNode, ins: Sequence[Atom], body_avals: Sequence[Any]) -> None:
        """A body whose inputs have types `body_avals` takes values of the types of `ins`."""
        same = self.same_type
        if len(body_avals) != len(ins) or not all(
            a is b.aval or same(a, b.aval) for a, b in zip(body_avals, ins, strict=True)
        ):
            raise MoxSerializationError(
                f"<{node.tag}> passes ({', '.join(type_str(a.aval) for a in ins)}) to a body "
                f"that takes ({', '.join(type_str(a) for a in body_avals)})."
            )

    def jit_template(self, n_in: int, n_out: int) -> _JitTemplate:
        """What `jax.jit` makes of a call with `n_in` inputs and `n_out` outputs.

        One call with 2 inputs and 3 outputs is traced; its per-input params (tuples of 2
        equal items: shardings, layouts, donation) and per-output ones (3 equal items)
        are resized for other arities. A jax whose params do not look like that gets a
        trace per arity.
        """
        hit = self.jit_templates.get((n_in, n_out))
        if hit is not None:
            return hit
        base = self.jit_templates.get((2, 3)) or self.traced_jit_template(2, 3)
        params = {}
        for key, value in base.params.items():
            if isinstance(value, tuple) and len(value) in (2, 3) and len(set(map(id, value))) == 1:
                value = value[:1] * (n_in if len(value) == 2 else n_out)
            elif isinstance(value, tuple) and len(value) in (2, 3):
                return self.traced_jit_template(n_in, n_out)
            params[key] = value
        template = self.jit_templates[n_in, n_out] = base._replace(params=params)
        return template

    def traced_jit_template(self, n_in: int, n_out: int) -> _JitTemplate:
        shared = None if self.context is None else ("jit", n_in, n_out, self.context)
        template = _shared(shared, lambda: self.trace_jit_template(n_in, n_out))
        self.jit_templates[n_in, n_out] = template
        return template

    def trace_jit_template(self, n_in: int, n_out: int) -> _JitTemplate:
        def body(*xs: Any) -> list[Any]:
            return [lax.full((), float(i), np.float32) for i in range(n_out)]

        scalar = jax.ShapeDtypeStruct((), np.float32)
        closed = jax.make_jaxpr(lambda *xs: jax.jit(body)(*xs))(*[scalar] * n_in)
        (eqn,) = closed.jaxpr.eqns
        if len(eqn.invars) != n_in or len(eqn.outvars) != n_out:
            raise MoxSerializationError(
                f"this jax ({jax.__version__}) rewrites `jit` calls in a way bryo_mox cannot "
                "rebuild; please report it."
            )
        return _JitTemplate(dict(eqn.params), eqn.source_info, eqn.ctx)


class _BlockBuilder:
    """The nodes of a block being loaded (the root, a module body), made as its scope
    builds its equations; the block holds the constants its nodes use, in the order of
    their first use, as `convert_closed` gives a traced block."""

    def __init__(self, builder: _Builder, constvars: list[jex.Var], consts: list[Any]) -> None:
        self.builder = builder
        self.nodes: list[Equation | ModuleCall] = []
        #: the scope's constants (its own, and those inlined traces bring) by variable
        self.constvars = constvars
        self.consts = consts
        self.used: dict[jex.Var, None] = {}  # the constants used, in order
        self.known: set[jex.Var] = set()  # `constvars` as a set (it grows as traces inline)

    def use(self, atoms: Sequence[Atom]) -> None:
        if len(self.known) != len(self.constvars):
            self.known.update(self.constvars[len(self.known) :])
        if len(self.used) != len(self.known):
            known = self.known
            for atom in atoms:
                if isinstance(atom, jex.Var) and atom in known:
                    self.used[atom] = None

    def add(self, eqns: list[jex.JaxprEqn]) -> None:
        """Make nodes of the equations a child just built (and empty `eqns`)."""
        params_jaxprs = self.builder.params_jaxprs
        for eqn in eqns:
            if not eqn.outvars and not eqn.effects:
                continue  # computes nothing: dropped, as conversion drops it
            if self.constvars:
                self.use(eqn.invars)
            self.nodes.append(equation_node(named_equation(eqn), params_jaxprs))
        eqns.clear()

    def call(self, node: DocNode, marker: CallMarker, ins: list[Atom], body: Block) -> list[Atom]:
        """A module call of `body` on `ins`; returns the call's outputs. A state output
        that returns a state input unchanged is pruned: the caller reads its own input."""
        n_state = marker.n_state
        n_state_out = _count(node, "state_outputs", len(body.outvars))
        position = {id(var): j for j, var in enumerate(body.invars[:n_state])}
        outs: list[Atom] = []
        kept = []
        for i, atom in enumerate(body.outvars):
            j = position.get(id(atom)) if i < n_state_out else None
            if j is not None:  # the body's variables are alive: an id is theirs alone
                outs.append(ins[j])
            else:
                kept.append(i)
                outs.append(jex.Var(atom.aval))
        if len(kept) != len(body.outvars):
            body = dataclasses.replace(body, outvars=tuple(body.outvars[i] for i in kept))
        if self.constvars:
            self.use(ins)
        self.nodes.append(
            ModuleCall(
                info=marker.info,
                invars=tuple(ins),
                outvars=tuple(outs[i] for i in kept),
                body=body,
                n_state=n_state,
                n_state_out=sum(1 for i in kept if i < n_state_out),
            )
        )
        return outs

    def finish(self, invars: Sequence[jex.Var], outvars: list[Atom]) -> Block:
        if self.constvars:
            self.use(outvars)
        if not self.used:
            return Block((), (), tuple(invars), tuple(self.nodes), tuple(outvars))
        value = dict(zip(self.constvars, self.consts, strict=True))
        return Block(
            tuple(self.used),
            tuple(value[var] for var in self.used),
            tuple(invars),
            tuple(self.nodes),
            tuple(outvars),
        )


def _check_rule(
    node: DocNode,
    rule_key: str,
    in_avals: Sequence[Any],
    call: jex.ClosedJaxpr,
    rule: jex.ClosedJaxpr,
) -> None:
    """A custom derivative's regions must have the signatures its rule is called with
    (jax checks them only when differentiating): `call_jaxpr` takes the inputs; a `jvp`
    rule takes (primals, tangents of the float inputs) and returns the outputs' tangents,
    a `vjp` rule takes (primals, output cotangents) and returns the float inputs'."""
    out_avals = list(call.out_avals)
    floats = [a for a in in_avals if differentiable(a.dtype)]
    if rule_key == "jvp":
        expected_in, expected_out = [*in_avals, *floats], out_avals
    else:
        expected_in, expected_out = [*in_avals, *out_avals], floats
    _check_signature(node, "call_jaxpr takes", call.in_avals, in_avals)
    _check_signature(node, f"{rule_key} takes", rule.in_avals, expected_in)
    _check_signature(node, f"{rule_key} returns", rule.out_avals, expected_out)


def _check_while(
    node: DocNode, in_avals: Sequence[Any], regions: dict[RegionKey, jex.ClosedJaxpr]
) -> None:
    """A `while`'s regions must fit its operands (jax's own type check skips them): the
    condition takes (its constants, the carry) and returns a `bool[]`; the body takes
    (its constants, the carry) and returns the carry."""
    n_cond, n_body = (_count(node, k, len(in_avals)) for k in ("cond_nconsts", "body_nconsts"))
    if n_cond + n_body > len(in_avals):
        raise MoxSerializationError(f"<{node.tag}> has fewer operands than constants.")
    carry = list(in_avals[n_cond + n_body :])
    cond, body = regions["cond_jaxpr", None], regions["body_jaxpr", None]
    boolean = jax.core.ShapedArray((), np.dtype(bool))
    _check_signature(node, "cond_jaxpr takes", cond.in_avals, [*in_avals[:n_cond], *carry])
    _check_signature(node, "cond_jaxpr returns", cond.out_avals, [boolean])
    body_in = [*in_avals[n_cond : n_cond + n_body], *carry]
    _check_signature(node, "body_jaxpr takes", body.in_avals, body_in)
    _check_signature(node, "body_jaxpr returns", body.out_avals, carry)


def _check_signature(node: DocNode, what: str, got: Sequence[Any], expected: Sequence[Any]) -> None:
    if len(got) != len(expected) or not all(
        same_type(a, b) for a, b in zip(got, expected, strict=True)
    ):
        raise MoxSerializationError(
            f"<{node.tag}>: its region {what} ({', '.join(map(type_str, got))}); the "
            f"equation needs ({', '.join(map(type_str, expected))})."
        )


def _bound(prim: jex.Primitive, out: Any) -> list[Any]:
    return list(out) if prim.multiple_results else [out]


class _Traced(NamedTuple):
    """A traced closed jaxpr, prepared to be inlined many times (`_inline`).

    `single` is set when the jaxpr is one equation whose outputs are the jaxpr's
    (`outs = prim(ins)`, the usual leaf); `positions` then says where each of its inputs
    is among the jaxpr's inputs (-1 for a literal), so inlining is a copy.
    """

    closed: jex.ClosedJaxpr
    single: jex.JaxprEqn | None = None
    positions: tuple[int, ...] = ()
    #: `positions` is `0, 1, ...` over every input: the equation reads the inputs as given
    in_order: bool = False
    #: `single` has outputs, no effects, no sub-jaxprs among its params, and its source
    #: info and context: a copy of it on fresh outputs is a MoX `Equation` as it is (the
    #: builder's fast path for the usual leaf; see `_Builder.scope`)
    plain: bool = False
    #: the avals of `single`'s outputs
    out_avals: tuple[Any, ...] = ()


def _prepared(closed: jex.ClosedJaxpr) -> _Traced:
    jaxpr = closed.jaxpr
    if jaxpr.constvars or len(jaxpr.eqns) != 1:
        return _Traced(closed)
    (eqn,) = jaxpr.eqns
    index = {v: i for i, v in enumerate(jaxpr.invars)}
    positions = tuple(index.get(a, -1) if isinstance(a, jex.Var) else -1 for a in eqn.invars)
    direct = all(
        p >= 0 or isinstance(a, jex.Literal) for p, a in zip(positions, eqn.invars, strict=True)
    )
    same_out = list(jaxpr.outvars) == list(eqn.outvars) and not any(
        isinstance(v, DropVar) for v in eqn.outvars
    )
    if not (direct and same_out):
        return _Traced(closed)
    plain = bool(
        eqn.outvars
        and not eqn.effects
        and eqn.source_info is not None
        and eqn.ctx is not None
        and not jaxpr_params(eqn.params)
    )
    in_order = positions == tuple(range(len(jaxpr.invars)))
    out_avals = tuple(v.aval for v in eqn.outvars)
    return _Traced(closed, eqn, positions, in_order, plain, out_avals)


def _placed(traced: _Traced, ins: Sequence[Atom]) -> list[Atom]:
    """The inputs of `traced.single` on `ins`: its literals where it has them."""
    eqn = cast(jex.JaxprEqn, traced.single)
    return [ins[p] if p >= 0 else a for p, a in zip(traced.positions, eqn.invars, strict=True)]


def _inline(
    traced: _Traced,
    ins: Sequence[Atom],
    eqns: list[jex.JaxprEqn],
    constvars: list[jex.Var],
    consts: list[Any],
) -> list[Atom]:
    """Append `traced`'s equations on `ins` with fresh variables; returns its outputs."""
    eqn = traced.single
    if eqn is not None:
        invars = list(ins) if traced.in_order else _placed(traced, ins)
        outvars: list[Atom] = [jex.Var(v.aval) for v in eqn.outvars]
        eqns.append(
            new_jaxpr_eqn(
                invars, outvars, eqn.primitive, eqn.params, eqn.effects, eqn.source_info, eqn.ctx
            )
        )
        return outvars
    jaxpr = traced.closed.jaxpr
    sub: dict[jex.Var, Atom] = dict(zip(jaxpr.invars, ins, strict=True))
    for var, value in zip(jaxpr.constvars, traced.closed.consts, strict=True):
        new = jex.Var(var.aval)
        constvars.append(new)
        consts.append(value)
        sub[var] = new
    for eqn in jaxpr.eqns:
        outvars = [
            DropVar(v.aval) if isinstance(v, DropVar) else jex.Var(v.aval) for v in eqn.outvars
        ]
        invars = [sub[a] if isinstance(a, jex.Var) else a for a in eqn.invars]
        sub.update(zip(eqn.outvars, outvars, strict=True))
        eqns.append(
            new_jaxpr_eqn(
                invars, outvars, eqn.primitive, eqn.params, eqn.effects, eqn.source_info, eqn.ctx
            )
        )
    return [sub[a] if isinstance(a, jex.Var) else a for a in jaxpr.outvars]


#: The tags of nodes that are not leaf equations (each has its own way to be built).
_NOT_LEAVES = frozenset({"region", "module_call", *JIT_ALIASES, *CUSTOM_DERIVATIVE_NAMES})
_SCALARS = frozenset({bool, int, float, complex})
_AVAL = operator.attrgetter("aval")
_TYPE = operator.attrgetter("type")


def _literal(value: Any, aval: Any) -> Any:
    """A literal's value as an array of its declared type; refuses values that do not fit."""
    if isinstance(value, np.ndarray):
        if tuple(value.shape) != tuple(aval.shape):
            raise MoxSerializationError(
                f"a literal of type {type_str(aval)} has a value of shape {value.shape}."
            )
        return value.astype(aval.dtype)
    if isinstance(value, (list, tuple)):
        array = np.asarray(value)
        current_budget().spend_array(array.nbytes, "a literal")
        return _literal(array, aval)
    if is_key_dtype(aval.dtype):
        raise MoxSerializationError(f"a literal may not be of the PRNG key type {type_str(aval)}.")
    if aval.shape != () or not isinstance(value, (bool, int, float, complex)):
        raise MoxSerializationError(
            f"a literal of type {type_str(aval)} has value {value!r:.40}; literals are scalars "
            "(or arrays of that shape)."
        )
    dtype = np.dtype(aval.dtype)
    if dtype.kind in "iub":
        if not isinstance(value, (bool, int)):
            raise MoxSerializationError(
                f"a literal of type {type_str(aval)} has the non-integer value {value!r}."
            )
        low, high = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        if not low <= value <= high:
            raise MoxSerializationError(
                f"the literal {value} does not fit its type {type_str(aval)}."
            )
    elif dtype.kind == "f" and isinstance(value, complex):
        raise MoxSerializationError(f"a literal of type {type_str(aval)} has a complex value.")
    with np.errstate(all="ignore"):
        array = np.asarray(value, dtype=dtype)
    if dtype.kind in "fc" and np.isfinite(value) and not np.isfinite(array):
        raise MoxSerializationError(f"the literal {value} overflows its type {type_str(aval)}.")
    # A weakly typed literal is a Python scalar to jax; keep it one.
    return array.item() if aval.weak_type else array


def _count(node: DocNode, attr: str, limit: int) -> int:
    value = node.attrs.get(attr, 0)
    if type(value) is not int or not 0 <= value <= limit:
        raise MoxSerializationError(
            f"<{node.tag}> attr `{attr}` must be an integer from 0 to {limit}, got {value!r:.40}."
        )
    return value


def _check_attr_names(node: DocNode, known: set[str]) -> None:
    for key in node.attrs:
        if key in known:
            continue
        if isinstance(key, str) and ATTR_NAME.match(key):
            known.add(key)
        else:
            raise MoxSerializationError(
                f"<{node.tag}> has an attribute named {key!r:.60}, which XML cannot hold and "
                "XPath cannot query; attribute names are letters, digits, `_`, `-` and `.`, "
                "not starting with a digit or `xml`."
            )


def _closed_attr(node: DocNode, key: tuple[str, int | None]) -> bool:
    for child in node.children:
        if (child.attrs.get("param"), child.attrs.get("index")) == key:
            return bool(child.attrs.get("closed", True))
    return True


RegionKey = tuple[str, int | None]
#: The attributes a region node has (what `document` writes).
REGION_ATTRS = frozenset({"param", "index", "closed"})


def _regions(node: DocNode, expected: set[RegionKey] | None = None) -> dict[RegionKey, DocNode]:
    """`node`'s regions by `(param, index)`: checked names, indices below the number of
    regions present, no duplicates, and indices of a param counting from 0 without gaps."""
    found: dict[RegionKey, DocNode] = {}
    for child in node.children:
        if child.tag != "region":
            raise _at(
                child.source, f"<{node.tag}> may hold only <region> children, not <{child.tag}>."
            )
        param, index = child.attrs.get("param"), child.attrs.get("index")
        if not isinstance(param, str) or not param.isidentifier():
            raise _at(child.source, f"a <region> of <{node.tag}> has no valid `param` attr.")
        unknown = sorted(set(child.attrs) - REGION_ATTRS)
        if unknown or not isinstance(child.attrs.get("closed", True), bool):
            # a misspelt `closed` would make an open jaxpr (a `remat`'s) a closed one,
            # which jax takes on load and fails on at the first evaluation
            what = f"unknown attrs {unknown}" if unknown else "a `closed` attr that is not a bool"
            raise _at(
                child.source,
                f"<region param={param!r}> of <{node.tag}> has {what}; a region's attrs are "
                "`param`, `index` and `closed` (True or False).",
            )
        if index is not None and (type(index) is not int or not 0 <= index < len(node.children)):
            raise _at(
                child.source,
                f"<region param={param!r}> of <{node.tag}> has index {index!r:.40}; indices "
                f"count the regions of a param from 0 (this node has {len(node.children)}).",
            )
        if (param, index) in found:
            raise _at(child.source, f"<{node.tag}> has two regions ({param!r}, {index!r}).")
        found[param, index] = child
    indexed: dict[str, list[int]] = {}
    for param, index in found:
        if index is not None:
            indexed.setdefault(param, []).append(index)
    for param, indices in indexed.items():
        if (param, None) in found or sorted(indices) != list(range(len(indices))):
            raise _at(node.source, f'<{node.tag}>\'s <region param="{param}"> indices have gaps.')
    if expected is not None:
        _expect(node, found, expected)
    return found


def _expect(node: DocNode, regions: Any, expected: set[RegionKey]) -> None:
    if set(regions) != expected:
        names = ", ".join(f'param="{p}"' for p, _ in sorted(expected, key=str))
        raise _at(node.source, f"<{node.tag}> needs exactly the regions {names}.")


def _freeze(value: Any, by_identity: list[Any] | None = None) -> Any:
    """A hashable key for a decoded attribute value: equal keys mean equal values, with
    types kept apart (`True` is not `1`, `-0.0` is not `0.0`); see `value_key`. A value
    without one is keyed by its identity (alive with its document), and then appended
    to `by_identity`."""
    key = value_key(value, mutable=True)
    if key is None:
        if by_identity is not None:
            by_identity.append(value)
        return (type(value), id(value))
    return key


def _small(fingerprint: tuple[Any, ...]) -> bool:
    """Whether an equation with regions may be kept in `TRACES`: a small one, without
    constants (their bytes are part of the fingerprint, their arrays of the trace)."""
    return len(fingerprint) <= SHARED_FINGERPRINT_TOKENS and not any(
        type(token) is tuple and token[:1] == ("const",) for token in fingerprint
    )


def _fingerprint(
    node: DocNode, frozen: dict[Any, Any] | None = None
) -> tuple[tuple[Any, ...], bool]:
    """The content of an equation with regions, with variables numbered per scope: two
    equations with equal fingerprints (and input types) rebuild the same. And whether
    it keys every value by content (not by identity): then it holds in any document.

    `frozen` keeps the nodes' frozen attrs by their `attrs_key` (equal keys, equal
    attrs) for the next fingerprints of one document: an MLP's ReLUs repeat them."""
    by_identity: list[Any] = []

    def freeze(value: Any) -> Any:
        return _freeze(value, by_identity)

    def freeze_attrs(doc: DocNode) -> Any:
        key = doc.attrs_key
        if key is None or frozen is None:
            return freeze(doc.attrs)
        hit = frozen.get(key)
        if hit is None:
            before = len(by_identity)
            hit = freeze(doc.attrs)
            if len(by_identity) == before:  # keyed by content: the same for equal keys
                frozen[key] = hit
        return hit

    def refs(scope: dict[str, int], ports: list[Port]) -> tuple[Any, ...]:
        out = []
        for port in ports:
            name = port.name
            if name is None:
                out.append(("literal", port.type, freeze(port.value)))
            else:
                out.append((scope.get(name, -1), port.type))
        return tuple(out)

    # (`map` and `zip`, not comprehensions: each of those makes a function object)
    tokens: list[Any] = [node.tag, freeze_attrs(node)]
    tokens.extend(map(_TYPE, node.inputs))
    tokens.extend(map(_TYPE, node.outputs))
    # (doc, the enclosing scope's names or None for `node` itself) and scope ends
    stack: list[tuple[str, DocNode, dict[str, int] | None]] = list(
        zip(repeat("open"), reversed(node.children), repeat(None))
    )
    while stack:
        action, doc, outer = stack.pop()
        if action == "close":
            assert outer is not None
            tokens.append(("results", refs(outer, doc.results)))
            continue
        tokens.append((doc.tag, freeze_attrs(doc)))
        if outer is not None:
            tokens.append(("in", refs(outer, doc.inputs)))
            for port in doc.outputs:
                outer.setdefault(str(port.name), len(outer))
            tokens.append(("out", tuple(map(_TYPE, doc.outputs))))
        if doc.tag in ("region", "module_call"):
            inner: dict[str, int] = {}
            for const in doc.consts:
                inner.setdefault(const.name, len(inner))
                tokens.append(("const", const.type, np.asarray(const.data).tobytes()))
            for port in doc.inputs:
                inner.setdefault(str(port.bind or port.name), len(inner))
            tokens.append(("scope", tuple(map(_TYPE, doc.inputs))))
            stack.append(("close", doc, inner))
            stack.extend(zip(repeat("open"), reversed(doc.children), repeat(inner)))
        else:
            stack.extend(zip(repeat("open"), reversed(doc.children), repeat(None)))
    return tuple(tokens), not by_identity
