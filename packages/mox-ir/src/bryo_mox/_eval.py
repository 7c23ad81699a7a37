"""`eval_mox`: evaluate a module expression, inlining every module call.

Evaluation walks the tree and binds each leaf equation as traced (through
`jax.core.eval_jaxpr` on a one-equation jaxpr), so custom derivative rules are kept and
the computation is the original one: under `jax.jit` it compiles to the same program.
The one-equation jaxprs are cached per equation node, weakly: deleting a MoX frees them.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex

from bryo_pytree import PyTreeDef, safe_equal

from ._compat import DebugInfo, new_jaxpr_eqn
from ._errors import MoxError
from ._ir import Block, Equation, Literal, ModuleCall, Mox, Node, Var, array_aval, is_root
from ._trace import TRACING
from ._treespec import Known, TreeSpec, spec_text
from ._types import type_str


def eval_mox(mox: Mox, *args: Any, **kwargs: Any) -> Any:
    """Evaluate `mox` on `args` and `kwargs`, the same arguments the traced function took.

    Works eagerly and under `jax.jit`, `jax.grad`, `jax.vmap` and `jax.lax.scan`.

    Args:
        mox: a module expression from `make_mox`, `sub` or `loads`.
        *args: the traced function's positional arguments. When `sub` added parameters
            (`mox.extra_params`), pass them as one more trailing argument: a dict
            `{key: array}` with every key of `mox.extra_params`.
        **kwargs: its keyword arguments: those traced (holding arrays, `mox.traced_kwargs`)
            are required; static ones may be repeated and must equal the traced values.

    Returns:
        The result, with the traced function's output structure.

    Example:
        >>> y = jax.jit(lambda x: eval_mox(mox, x))(x)   # doctest: +SKIP
    """
    if not is_root(mox):
        raise MoxError(f"`mox` must be a Mox (from `make_mox`), got {type(mox).__name__}.")
    known: Known = {}
    with TRACING:  # not while a model among `args` holds another thread's tracers
        if mox.in_tree is None and mox.in_spec is not None:  # loaded: checked by its spec
            leaves, known = _leaves_by_spec(mox, args, kwargs)
        else:
            leaves = _flatten_args(mox, args, kwargs)
    out = eval_block(mox.block, leaves)
    if mox.out_tree is not None:
        return mox.out_tree.unflatten(out)
    return out if mox.out_spec is None else mox.out_spec.build(out, known)


_SPEC_TREES = "bryo_mox.eval.in_spec_trees"


def _leaves_by_spec(
    mox: Mox, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], Known]:
    """The array leaves of `args` and the traced `kwargs` of a MoX loaded with an argument
    spec (`Mox.in_spec`), checked against it; and the treedefs of their subtrees by spec
    text, for rebuilding the result (`TreeSpec.build`). A structure that passed is kept
    with the MoX (by treedef), so later calls only flatten."""
    spec = mox.in_spec
    assert spec is not None
    args, extra = _split_extra(mox, args)
    static = dict(mox.static_kwargs)
    for name, value in kwargs.items():
        if name in static and not _same_static(value, static[name]):
            raise MoxError(
                f"keyword argument `{name}={value!r}` differs from the traced "
                f"`{name}={static[name]!r}`: keyword arguments without arrays are static, "
                f"baked into the MoX. Trace again with `{name}={value!r}`."
            )
    traced = {k: v for k, v in kwargs.items() if k not in static}
    with_paths, treedef = jax.tree_util.tree_flatten_with_path((args, traced))
    positions = spec.static_positions
    trees: dict[Any, Known] = mox.memo(_SPEC_TREES, dict)
    try:
        known = trees.get(treedef)
    except TypeError:  # a node whose aux data cannot be hashed: checked each call
        known = None
    if known is None:
        text, known = spec_text(treedef, [p for p, _ in with_paths], frozenset(positions))
        if text != spec.text:
            path, got, want = spec.difference(TreeSpec.parse(text))
            raise MoxError(
                f"the arguments do not have the structure the MoX was traced with: at "
                f"`{_argument_path(path)}` they hold {got}; the file records {want}. Pass "
                "arguments of the traced structure (the model itself, not its `nnx.split` "
                "state, when the model was traced)."
            )
        with contextlib.suppress(TypeError):
            trees[treedef] = known
    skip = set(positions)
    leaves = [leaf for i, (_, leaf) in enumerate(with_paths) if i not in skip]
    _check_shapes(mox, leaves + extra)
    return leaves + extra, known


def _argument_path(path: str) -> str:
    """A path of the `(args, kwargs)` pair as the user wrote it: `args[1]['w']`."""
    if path.startswith("[0]"):
        return "args" + path[3:]
    if path.startswith("[1]"):
        return "kwargs" + path[3:]
    return "args" if not path else path


def _split_extra(mox: Mox, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[Any]]:
    """The positional arguments without the trailing dict of extra parameters (`sub`),
    and those parameters in `mox.extra_params` order."""
    extra: list[Any] = []
    if mox.extra_params:
        if not args or not isinstance(args[-1], dict):
            raise MoxError(
                "`args` lacks the trailing dict of extra parameters this MoX takes (added by "
                f"`sub`): keys {[k for k, _ in mox.extra_params]}. Pass "
                "`eval_mox(mox, *args, {key: array, ...})`."
            )
        args, given = args[:-1], args[-1]
        missing = [k for k, _ in mox.extra_params if k not in given]
        unknown = sorted(set(given) - {k for k, _ in mox.extra_params})
        if missing or unknown:
            raise MoxError(
                f"the extra-parameter dict does not fit `mox.extra_params`: missing "
                f"{missing}, unknown {unknown}."
            )
        extra = [given[k] for k, _ in mox.extra_params]
    return args, extra


def _flatten_args(mox: Mox, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    args, extra = _split_extra(mox, args)
    if mox.in_tree is None:
        leaves = list(args)
    else:
        leaves, tree = jax.tree_util.tree_flatten(tuple(args))
        if tree != mox.in_tree:
            traced = len(mox.in_tree.children())
            if len(args) != traced:
                raise MoxError(
                    f"`args` are {len(args)} positional arguments; the MoX was traced with "
                    f"{traced}. Pass arguments of the traced structure."
                )
            where, got, want = _first_difference(tree, mox.in_tree)
            raise MoxError(
                f"`args` do not have the structure the MoX was traced with: at "
                f"args{''.join(where)} (children in flattening order) they hold {got}; "
                f"the MoX was traced with {want}. Pass arguments of the traced structure "
                "(the model itself, not its `nnx.split` state, when the model was traced)."
            )
    leaves += _kwarg_leaves(mox, kwargs)
    if mox.static_leaves:
        leaves = _without_static(mox, leaves, args, kwargs)
    expected = len(mox.block.invars) - len(extra)
    if len(leaves) != expected:
        raise MoxError(f"`args` have {len(leaves)} leaves; the MoX takes {expected}.")
    _check_shapes(mox, leaves + extra)
    return leaves + extra


def _check_shapes(mox: Mox, leaves: list[Any]) -> None:
    for index, (leaf, var) in enumerate(zip(leaves, mox.block.invars, strict=False)):
        shape = getattr(leaf, "shape", ())
        if tuple(shape) != tuple(array_aval(var).shape):
            raise MoxError(
                f"`args` leaf {index} has shape {tuple(shape)}, the MoX expects "
                f"{type_str(var.aval)}."
            )


def _first_difference(got: PyTreeDef, want: PyTreeDef) -> tuple[tuple[str, ...], str, str]:
    """The first place two treedefs differ, as `([0]['layers'], got, want)` texts; a loop
    down the first differing child, so trees of any depth compare."""
    where: tuple[str, ...] = ()
    while True:
        got_node, want_node = got.node_data(), want.node_data()
        got_children, want_children = got.children(), want.children()
        if (
            got_node is None
            or want_node is None
            or got_node[0] is not want_node[0]
            or len(got_children) != len(want_children)
        ):
            return where, _describe(got), _describe(want)
        keys = got_node[1] if isinstance(got_node[1], (list, tuple)) else None
        differing = next(
            (i for i, (g, w) in enumerate(zip(got_children, want_children, strict=True)) if g != w),
            None,
        )
        if differing is None:
            return where, _describe(got), _describe(want)
        key = keys[differing] if keys is not None and len(keys) == len(got_children) else differing
        where = (*where, f"[{key!r}]")
        got, want = got_children[differing], want_children[differing]


def _describe(tree: PyTreeDef) -> str:
    node = tree.node_data()
    if node is None:
        return "an array leaf" if tree.num_leaves == 1 else "None"
    kind, aux = node
    text = "" if aux is None else f" ({aux})"
    return f"a {kind.__name__}{text if len(text) <= 240 else text[:240] + '...)'}"


def _kwarg_leaves(mox: Mox, kwargs: dict[str, Any]) -> list[Any]:
    """The leaves of the traced keyword arguments; static ones are checked, not passed."""
    traced = mox.traced_kwargs
    static = dict(mox.static_kwargs)
    for name, value in kwargs.items():
        if name in traced:
            continue
        if name not in static:
            raise MoxError(
                f"keyword argument `{name}` was not given when the MoX was traced (traced: "
                f"{list(traced)}, static: {list(static)}). Trace again with it."
            )
        if not _same_static(value, static[name]):
            raise MoxError(
                f"keyword argument `{name}={value!r}` differs from the traced "
                f"`{name}={static[name]!r}`: keyword arguments without arrays are static, "
                f"baked into the MoX. Trace again with `{name}={value!r}`."
            )
    if mox.kwargs_tree is None:
        return []
    missing = [name for name in traced if name not in kwargs]
    if missing:
        raise MoxError(
            f"keyword arguments {missing} are missing: the MoX traced them as inputs "
            f"(they held arrays). Pass {', '.join(f'{n}=...' for n in missing)}."
        )
    leaves, tree = jax.tree_util.tree_flatten({name: kwargs[name] for name in traced})
    if tree != mox.kwargs_tree:
        raise MoxError(
            f"keyword arguments have structure {tree}, but the MoX was traced with "
            f"{mox.kwargs_tree}. Pass keyword arguments of the traced structure."
        )
    return leaves


def _without_static(
    mox: Mox, leaves: list[Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> list[Any]:
    """The traced leaves; each static leaf must be the traced one (or equal to it)."""
    static = dict(mox.static_leaves)
    for position, traced in static.items():
        given = leaves[position] if position < len(leaves) else None
        if not _same_static(given, traced):
            where = _leaf_path(args, {k: kwargs[k] for k in mox.traced_kwargs}, position)
            raise MoxError(
                f"`{where}` is {given!r:.80}, but the MoX was traced with {traced!r:.80}: "
                "leaves that are not arrays are static, baked into the MoX. Pass the traced "
                "value, or trace again with this one."
            )
    return [leaf for i, leaf in enumerate(leaves) if i not in static]


def _leaf_path(args: Sequence[Any], kwargs: dict[str, Any], position: int) -> str:
    """`args[0].activation` or `kwargs['key'][1]`: the argument leaf at `position`."""
    arg_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]]
    if position < len(arg_paths):
        return "args" + jax.tree_util.keystr(arg_paths[position])
    kwarg_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(kwargs)[0]]
    return "kwargs" + jax.tree_util.keystr(kwarg_paths[position - len(arg_paths)])


def _same_static(value: object, traced: object) -> bool:
    return value is traced or (type(value) is type(traced) and safe_equal(value, traced))


def eval_block(block: Block, args: Sequence[Any]) -> list[Any]:
    """Evaluate a block on its inputs, module calls inlined.

    Iterative (an explicit stack of blocks): models of any depth evaluate without Python
    recursion.
    """
    stack = [_Frame(block, _bind_inputs(block, args))]
    while True:
        frame = stack[-1]
        if frame.next == len(frame.block.nodes):
            outs = [_read_out(frame.env, a) for a in frame.block.outvars]
            stack.pop()
            if not stack:
                return outs
            _store(stack[-1].env, frame.caller, outs)
            continue
        node = frame.block.nodes[frame.next]
        frame.next += 1
        ins = [_read(frame.env, a) for a in node.invars]
        if isinstance(node, ModuleCall):
            stack.append(_Frame(node.body, _bind_inputs(node.body, ins), node))
        elif isinstance(node, Equation):
            _store(frame.env, node, eval_equation(node, ins))
        else:
            raise MoxError(f"cannot evaluate node {node!r}.")


@dataclass
class _Frame:
    """A block being evaluated: its environment, its next node, the node it stands for."""

    block: Block
    env: dict[Any, Any]
    caller: Node | None = None
    next: int = 0


def _bind_inputs(block: Block, args: Sequence[Any]) -> dict[Any, Any]:
    env: dict[Any, Any] = dict(zip(block.constvars, block.consts, strict=True))
    env.update(zip(block.invars, args, strict=True))
    return env


def _read(env: dict[Any, Any], atom: Any) -> Any:
    return atom.val if isinstance(atom, Literal) else env[atom]


def _read_out(env: dict[Any, Any], atom: Any) -> Any:
    """A block's output: a constant one (a literal in the jaxpr, such as the `False` an
    Equinox BatchNorm stores in its State) as the array a traced function returns."""
    if not isinstance(atom, Literal):
        return env[atom]
    value = np.asarray(atom.val)
    if getattr(atom.aval, "weak_type", False) and value.ndim == 0:
        return jnp.asarray(value.item())  # a Python scalar: weakly typed, as JAX keeps it
    return jnp.asarray(value, dtype=getattr(atom.aval, "dtype", value.dtype))


def _store(env: dict[Any, Any], node: Node | None, values: Sequence[Any]) -> None:
    assert node is not None
    env.update(zip(node.outvars, values, strict=True))


class _Single(NamedTuple):
    """An equation as a one-equation jaxpr, and which of its operands are its inputs."""

    jaxpr: jex.Jaxpr
    positions: tuple[int, ...]


# Keyed weakly by the equation node: an entry lives as long as its MoX does.
_singles: weakref.WeakKeyDictionary[Equation, _Single] = weakref.WeakKeyDictionary()
_singles_lock = threading.Lock()


def clear_equation_cache() -> None:
    """Forget every one-equation jaxpr made so far (`bryo_mox.clear_caches`)."""
    with _singles_lock:
        _singles.clear()


def eval_equation(node: Equation, args: Sequence[Any]) -> list[Any]:
    """Bind one equation as traced (custom rules included) on the values of its inputs."""
    with _singles_lock:
        single = _singles.get(node)
    if single is None:
        single = _single(node.eqn)
        with _singles_lock:
            _singles[node] = single
    return jax.core.eval_jaxpr(single.jaxpr, [], *(args[i] for i in single.positions))


def _single(eqn: jex.JaxprEqn) -> _Single:
    invars: list[Var] = []
    positions: list[int] = []
    for i, atom in enumerate(eqn.invars):
        if isinstance(atom, Var) and atom not in invars:
            invars.append(atom)
            positions.append(i)
    outvars = [jex.Var(v.aval) for v in eqn.outvars]
    single = new_jaxpr_eqn(
        list(eqn.invars),
        outvars,
        eqn.primitive,
        eqn.params,
        eqn.effects,
        eqn.source_info,
        eqn.ctx,
    )
    debug_info = DebugInfo("eval_mox", eqn.primitive.name, None, None)
    jaxpr = jex.Jaxpr([], invars, outvars, [single], eqn.effects, debug_info)
    return _Single(jaxpr, tuple(positions))
