"""`sub`: replace nodes of a MoX with another MoX, returning a new MoX.

The new expression is built by replaying the old one under `jax.make_jaxpr`: untouched
equations are bound as they were, module calls are re-emitted as module regions, and each
target node is replaced by an evaluation of the replacement. Nothing is mutated; all type
checks run before the replay, so a failed `sub` leaves everything as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.extend import core as jex

from ._errors import MoxError, MoxTypeError
from ._eval import eval_equation
from ._ir import (
    CUSTOM_DERIVATIVE_NAMES,
    JIT_NAME,
    Atom,
    Block,
    Equation,
    Literal,
    ModuleCall,
    ModuleInfo,
    Mox,
    Node,
    arg_example,
    arg_paths,
    array_aval,
    is_root,
    recorded_state_paths,
    state_paths,
)
from ._regions import bind_with_regions
from ._trace import call_region, convert_closed, intercepting
from ._types import same_type, type_str
from ._view import Location, XPath, element_view, query


@dataclass
class _Target:
    node: ModuleCall | Equation
    location: Location
    n_skip: int  # leading node inputs not passed to the replacement (module state)
    keys: tuple[str, ...] = ()
    replacement: Mox = field(default=None)  # type: ignore[assignment]  # set by `sub`
    # the replacement's state key paths (relative to its own arguments) when it is a
    # module call taken from a MoX's `children`: its weights go into the params tree
    repl_paths: tuple[tuple[Any, ...], ...] | None = None
    repl_name: str = ""
    prefix: str | None = None  # the path the replacement's modules go under


#: YAX's `re.sub`-like replacement: `(path, node) -> replacement` (the node itself: keep).
SubFn = Callable[[tuple[str, ...], Node], Any]


def sub(
    target: str | Any | Node | Iterable[Node],
    replacement: Mox | ModuleCall | Equation | SubFn,
    mox: Mox,
    *,
    with_state: bool = False,
) -> Mox:
    """Replace the nodes selected by `target` with `replacement`; return a new MoX.

    Inputs are matched from the end: the replacement's last inputs take the replaced
    node's inputs (for a `module_call`, its call arguments, after the module's state;
    with `with_state=True`, the state leaves followed by the arguments), and any
    replacement inputs before them are new parameters. New parameters become inputs of
    the root, listed in `result.extra_params` under keys `"<node name>:<i>"`
    (`"layers/0:0"`); pass them to `eval_mox` as one trailing dict. The replacement's
    outputs must match the node's outputs. Nodes inside a `custom_jvp_call` or
    `custom_vjp_call` are replaced together with it (so no stale derivative rule stays).

    Args:
        target: an XPath query (see `query`; an `XPath` too), a node of `mox`, or an
            iterable of nodes.
        replacement: the new computation: a `Mox` (e.g. `make_mox(jax.nn.gelu)(x)` or
            `make_mox(lora_apply)(lora_params, x)`); one node of another MoX, as YAX
            takes (an `Equation`, or a `ModuleCall` whose state leaves are new
            parameters); or YAX's `re.sub`-like callable `fn(path, node)` returning the
            replacement of each selected node (`node` itself keeps it), where `path`
            names the node and the modules around it (`("ResBlock", "Dense_0")`: a
            module's last name part, or its class name when it has none).
        mox: the module expression to rewrite; it is not modified.
        with_state: pass a replaced module's state leaves to the replacement too.

    Returns:
        A new `Mox` (`mox` itself when nothing matched or `fn` kept every node).

    Raises:
        MoxTypeError: an input or output type of the replacement does not match; the
            message names the node and both types.

    Example:
        >>> gelu = make_mox(jax.nn.gelu)(x)                       # doctest: +SKIP
        >>> new = sub('//pjit[@name="relu"]', gelu, mox)           # doctest: +SKIP
    """
    if is_root(target) and (not is_root(mox) or isinstance(replacement, str | XPath)):
        raise MoxError(
            "`sub` takes the target first, then the replacement, then the Mox to rewrite, "
            "as YAX's does: write `sub(target, replacement, mox)`."
        )
    if not is_root(mox):
        raise MoxError(f"`mox` must be a Mox, got {type(mox).__name__}.")
    function = None if isinstance(replacement, Node) else replacement
    if function is not None and not callable(function):
        raise MoxError(
            "`replacement` must be a Mox (from `make_mox`), an Equation or ModuleCall of "
            f"another MoX, or a function `(path, node) -> replacement`; got "
            f"{type(replacement).__name__}."
        )
    targets = _resolve(target, mox, with_state)
    chosen: list[_Target] = []
    for t in targets:
        made = replacement
        if function is not None:
            made = function(_yax_path(mox, t.location), t.node)
            if made is t.node:
                continue
        what = (
            "`replacement`"
            if function is None
            else f"the replacement `fn` made for {describe(t.node)}"
        )
        t.replacement = as_mox(made, what)
        over = _written_over(made, t.node) if with_state and is_root(made) else None
        if over is not None:  # the replacement calls the replaced layer: its weights
            t.replacement = over
        if isinstance(made, ModuleCall) and isinstance(t.node, ModuleCall) and not with_state:
            t.repl_paths = recorded_state_paths(made)
            t.repl_name = made.name.rsplit("/", 1)[-1] or f"{made.info.short_type}_0"
        chosen.append(t)
    if not chosen:
        return mox
    _check_and_name(chosen, mox)
    return _replay_root(mox, chosen, _placements(mox, chosen))


def as_mox(node: Any, what: str) -> Mox:
    """A replacement as a MoX: a `Mox` itself; an `Equation` or a `ModuleCall` (of any
    MoX) as a MoX of that one node, taking its inputs (a module call's state leaves
    first) and returning its outputs."""
    if is_root(node):
        return node
    if not isinstance(node, (Equation, ModuleCall)):
        raise MoxError(
            f"{what} must be a Mox, an Equation or a ModuleCall, got {type(node).__name__}."
        )
    invars: list[jex.Var] = []
    for atom in node.invars:
        if isinstance(atom, jex.Var) and atom not in invars:
            invars.append(atom)
    if isinstance(node, ModuleCall) and len(invars) != len(node.invars):
        fresh = [jex.Var(atom.aval) for atom in node.invars]
        node = dataclasses.replace(node, invars=tuple(fresh))
        invars = fresh
    block = Block((), (), tuple(invars), (node,), tuple(node.outvars))
    return Mox(block)


def _written_over(replacement: Mox, node: ModuleCall | Equation) -> Mox | None:
    """`replacement` taking the replaced layer's state leaves before the call's arguments
    (after any new parameters), in the layer's own order, when it is written over that
    layer (`lambda layer, x: layer(x) * 2`): one of its top-level module calls has the
    replaced module's type and takes its state leaves straight from the replacement's
    inputs. `None` otherwise."""
    if not isinstance(node, ModuleCall) or not node.n_state:
        return None
    inputs = replacement.block.invars
    for inner in replacement.block.nodes:
        if not isinstance(inner, ModuleCall) or inner.info.type != node.info.type:
            continue
        state = inner.invars[: inner.n_state]
        if inner.n_state != node.n_state or len({id(v) for v in state}) != len(state):
            continue
        if not all(any(v is w for w in inputs) for v in state):
            continue
        rest = [v for v in inputs if not any(v is w for w in state)]
        n_args = len(node.invars) - node.n_state  # the call arguments stay last
        cut = len(rest) - n_args
        if cut < 0:
            continue
        # new parameters first, then the layer's state in its own order, then arguments
        ordered = (*rest[:cut], *(v for v in state if isinstance(v, jex.Var)), *rest[cut:])
        if len(ordered) != len(inputs):
            continue
        return dataclasses.replace(
            replacement, block=dataclasses.replace(replacement.block, invars=ordered)
        )
    return None


def _yax_path(mox: Mox, location: Location) -> tuple[str, ...]:
    """YAX's path of the node at `location`: the modules around it, then the node."""
    names: list[str] = []
    current = mox.block
    node: Node | None = None
    for step in location:
        if not isinstance(step, int):
            assert isinstance(node, Equation)
            current = node.regions[step[1]].block
            continue
        node = current.nodes[step]
        if isinstance(node, ModuleCall):
            names.append(node.name.rsplit("/", 1)[-1] or node.info.short_type)
            current = node.body
    assert node is not None
    if isinstance(node, Equation):
        names.append(node.name or node.primitive.name)
    return tuple(names)


def _resolve(target: Any, mox: Mox, with_state: bool) -> list[_Target]:
    if isinstance(target, (str, XPath)):
        nodes = [n for n in query(target, mox) if isinstance(n, (ModuleCall, Equation))]
    elif isinstance(target, Node):
        nodes = [target]
    else:
        nodes = list(target)
    view = element_view(mox)
    found: dict[Location, ModuleCall | Equation] = {}
    for node in nodes:
        location = view.location_of(node, mox) if isinstance(node, Node) else None
        if location is None or not isinstance(node, (ModuleCall, Equation)):
            raise MoxError(
                f"`target` {node!r} is not a module_call or equation of this `mox`; pass "
                "nodes returned by `query(..., mox)` on the same MoX, or an XPath string."
            )
        location, node = _lift(mox, location, node)
        found[location] = node
    locations = sorted(found, key=_sort_key)
    kept = [
        loc
        for loc in locations
        if not any(loc[: len(other)] == other and loc != other for other in locations)
    ]
    targets = []
    for loc in kept:
        node = found[loc]
        n_skip = node.n_state if isinstance(node, ModuleCall) and not with_state else 0
        targets.append(_Target(node, loc, n_skip))
    return targets


def _sort_key(location: Location) -> tuple[Any, ...]:
    return tuple((0, s) if isinstance(s, int) else (1, s[1]) for s in location)


def node_at(block: Block, location: Location) -> Node:
    """The node at `location` (indices into blocks, `("region", r)` into an equation)."""
    node: Node | None = None
    current = block
    for step in location:
        if isinstance(step, int):
            node = current.nodes[step]
            if isinstance(node, ModuleCall):
                current = node.body
        else:
            assert isinstance(node, Equation)
            current = node.regions[step[1]].block
    assert node is not None
    return node


def _lift(
    mox: Mox, location: Location, node: ModuleCall | Equation
) -> tuple[Location, ModuleCall | Equation]:
    """Targets inside a custom derivative equation are replaced with the whole equation."""
    for end, step in enumerate(location):
        if not isinstance(step, int):
            outer = node_at(mox.block, location[:end])
            if isinstance(outer, Equation) and outer.primitive.name in CUSTOM_DERIVATIVE_NAMES:
                return location[:end], outer
    return location, node


def describe(node: Node, location: Location = ()) -> str:
    """`module_call Linear 'layers/0'` or `equation custom_jvp_call 'relu'`, for messages."""
    where = f" at node path {'/'.join(str(s if isinstance(s, int) else s[1]) for s in location)}"
    if isinstance(node, ModuleCall):
        return f"module_call {node.info.short_type} {node.name!r}{where}"
    assert isinstance(node, Equation)
    name = f" {node.name!r}" if node.name else ""
    return f"equation {node.primitive.name}{name}{where}"


def _types(avals: Sequence[Any]) -> str:
    return "(" + ", ".join(type_str(a) for a in avals) + ")"


def _check_and_name(targets: list[_Target], mox: Mox) -> None:
    used = {k for k, _ in mox.extra_params}
    labels: dict[str, int] = {}
    for target in targets:
        repl_in = [v.aval for v in target.replacement.block.invars]
        repl_out = [v.aval for v in target.replacement.block.outvars]
        node = target.node
        node_in = [v.aval for v in node.invars][target.n_skip :]
        node_out = [v.aval for v in node.outvars]
        what = describe(node, target.location)
        if len(repl_in) < len(node_in):
            raise MoxTypeError(
                f"`replacement` takes {len(repl_in)} inputs {_types(repl_in)} but {what} "
                f"passes {len(node_in)} {_types(node_in)}; its last inputs must take the "
                "node's inputs."
            )
        n_new = len(repl_in) - len(node_in)
        for i, (want, got) in enumerate(zip(node_in, repl_in[n_new:], strict=False)):
            if not same_type(want, got):
                raise MoxTypeError(
                    f"`replacement` input {n_new + i} has type {type_str(got)}, but {what} "
                    f"passes {type_str(want)} there (node inputs {_types(node_in)}, "
                    f"replacement inputs {_types(repl_in)})."
                )
        if len(repl_out) != len(node_out) or not all(map(same_type, node_out, repl_out)):
            raise MoxTypeError(
                f"`replacement` returns {_types(repl_out)}, but {what} returns "
                f"{_types(node_out)}; outputs must match in number, shape and dtype."
            )
        label = (
            (node.name or node.info.short_type)
            if isinstance(node, ModuleCall)
            else (f"{node.primitive.name}/{node.name}" if node.name else node.primitive.name)
        )
        labels[label] = labels.get(label, 0) + 1
        if labels[label] > 1 or any(k.startswith(f"{label}:") for k in used):
            label = f"{label}@{labels[label] - 1}"
        target.keys = tuple(f"{label}:{j}" for j in range(n_new))
        used.update(target.keys)


class _Removed:
    """The value of a root input `sub` took out of the params tree (the replaced module's
    weights): reading it anywhere else is an error naming the reader."""

    def __repr__(self) -> str:
        return "<removed weights>"


_REMOVED = _Removed()


@dataclass
class _Placement:
    """The rewritten root arguments: `example` is the new positional arguments with leaf
    placeholders (`int`: an old leaf; `str`: a new parameter's key)."""

    example: Any
    keys: set[str]


def _placements(mox: Mox, targets: list[_Target]) -> _Placement | None:
    """Put the weights of module-call replacements into the root's params tree, YAX's
    way: under the replaced module's parent, named after the replacement (its name, or
    `<Type>_0`), in place of the replaced module's entry. Targets for which the trees
    do not allow it keep the trailing dict."""
    candidates = [t for t in targets if t.repl_paths is not None and t.keys]
    if not candidates or mox.in_tree is None:
        return None
    args = arg_example(mox)
    if args is None:
        return None
    example = list(args)
    placed = _Placement(example, set())
    for target in candidates:
        node = target.node
        assert isinstance(node, ModuleCall) and target.repl_paths is not None
        mine = _module_entry(target.repl_paths, own=True)
        if mine is None or len(target.repl_paths) != len(target.keys):
            continue
        collection, argpos, tails = mine
        if node.n_state:
            chain = _chain(mox, target.location)
            paths = None if chain is None else state_paths(mox, chain, node)
            where = None if paths is None else _module_entry(paths)
            if where is None or where[:2] != (collection, argpos):
                continue
            module_path = where[2]
        elif node.name:  # a module without state: its entry would be at its path
            module_path = tuple(node.name.split("/"))
        else:
            continue
        if argpos >= len(example) or not isinstance(example[argpos], dict):
            continue
        parent = _dict_at(example[argpos], (collection, *module_path[:-1]), create=True)
        if parent is None:
            continue
        if node.n_state:
            assert paths is not None
            old = parent.get(module_path[-1])
            if not isinstance(old, dict) or sorted(jax.tree_util.tree_leaves(old)) != sorted(
                _leaf_positions(paths, mox)
            ):
                continue  # the entry holds more than this module's state
        elif module_path[-1] in parent:
            continue
        name = target.repl_name
        if name != module_path[-1] and name in parent:
            entry = "/".join(map(str, (*module_path[:-1], name)))
            raise MoxError(
                f"the replacement's weights would go to {entry!r} in argument {argpos}'s "
                f"{collection!r} collection, which holds another module; rename the "
                "replacement (`call.params['name'] = ...`)."
            )
        parent.pop(module_path[-1], None)
        # the call is named as its weights are placed: `<parent path>/<name>`
        target.prefix = "/".join(map(str, (*module_path[:-1], name)))
        (call,) = target.replacement.block.nodes
        assert isinstance(call, ModuleCall)
        unnamed = dataclasses.replace(call, info=ModuleInfo(call.type, "", call.attrs))
        block = dataclasses.replace(target.replacement.block, nodes=(unnamed,))
        target.replacement = dataclasses.replace(target.replacement, block=block)
        fresh: dict[str, Any] = {}
        for key, rel in zip(target.keys, tails, strict=True):
            _put(fresh, rel, key)
        parent[name] = fresh
        placed.keys.update(target.keys)
    return placed if placed.keys else None


def _leaf_positions(paths: Sequence[tuple[Any, ...]], mox: Mox) -> list[int]:
    index = {path: leaf for leaf, path in enumerate(arg_paths(mox) or ())}
    return [index[tuple(path)] for path in paths]


def _chain(mox: Mox, location: Location) -> list[ModuleCall] | None:
    """The module calls around the node at `location` (`None`: it sits in a region)."""
    chain: list[ModuleCall] = []
    block = mox.block
    for step in location[:-1]:
        if not isinstance(step, int):
            return None
        node = block.nodes[step]
        if not isinstance(node, ModuleCall):
            return None
        chain.append(node)
        block = node.body
    return chain


def _module_entry(paths: Sequence[tuple[Any, ...]], own: bool = False) -> tuple[Any, ...] | None:
    """`(collection, argument position, module path)` of state leaves at `paths` (all in
    one argument's one dict collection; the module path is their common prefix), or with
    `own`, `(collection, argument position, leaf paths relative to the module)`."""
    keys = []
    for path in paths:
        if len(path) < 3 or not isinstance(path[0], jax.tree_util.SequenceKey):
            return None
        rest = path[1:]
        if not all(isinstance(k, jax.tree_util.DictKey) for k in rest):
            return None
        keys.append((path[0].idx, *(k.key for k in rest)))
    if len({k[:2] for k in keys}) != 1:
        return None
    argpos, collection = keys[0][:2]
    tails = [k[2:] for k in keys]
    if own:
        return (collection, argpos, tails)
    common = tails[0][:-1]
    for tail in tails[1:]:
        n = 0
        while n < min(len(common), len(tail) - 1) and common[n] == tail[n]:
            n += 1
        common = common[:n]
    if not common:
        return None
    return (collection, argpos, tuple(common))


def _dict_at(tree: Any, keys: Sequence[Any], create: bool = False) -> dict[Any, Any] | None:
    """The dict at `keys` under `tree` (made, empty, where missing when `create`)."""
    for key in keys:
        if not isinstance(tree, dict) or (key not in tree and not create):
            return None
        tree = tree.setdefault(key, {})
    return tree if isinstance(tree, dict) else None


def _put(tree: dict[Any, Any], keys: Sequence[Any], value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


class _Plan:
    def __init__(self, targets: list[_Target]) -> None:
        self.targets = {t.location: t for t in targets}
        self.prefixes = {t.location[:i] for t in targets for i in range(len(t.location))}
        self.extra: dict[str, Any] = {}


def _replay_root(mox: Mox, targets: list[_Target], placed: _Placement | None) -> Mox:
    plan = _Plan(targets)
    new_keys = [k for t in targets for k in t.keys]
    new_aval = {
        k: array_aval(v)
        for t in targets
        for k, v in zip(t.keys, t.replacement.block.invars[: len(t.keys)], strict=True)
    }
    trailing = [k for k in new_keys if placed is None or k not in placed.keys]
    n_old = len(mox.block.invars)
    avals = [_sds(v.aval) for v in mox.block.invars]
    fields: dict[str, Any] = {}
    if placed is None:
        source: list[Any] = list(range(n_old))  # what each new root input is
    else:
        source, fields = _new_inputs(mox, placed)
        avals = [
            _sds(new_aval[x] if isinstance(x, str) else mox.block.invars[x].aval) for x in source
        ]
    n_in = len(source)

    def flat(*xs: Any) -> list[Any]:
        old: list[Any] = [_REMOVED] * n_old
        plan.extra = dict(zip(trailing, xs[n_in:], strict=True))
        for x, value in zip(source, xs[:n_in], strict=True):
            if isinstance(x, str):
                plan.extra[x] = value
            else:
                old[x] = value
        return replay_block(mox.block, old, plan, ())

    avals += [_sds(new_aval[k]) for k in trailing]
    with intercepting():
        closed = jax.make_jaxpr(flat)(*avals)
    extra = mox.extra_params + tuple(
        (k, jax.ShapeDtypeStruct(new_aval[k].shape, new_aval[k].dtype)) for k in trailing
    )
    return dataclasses.replace(mox, block=convert_closed(closed), extra_params=extra, **fields)


def _new_inputs(mox: Mox, placed: _Placement) -> tuple[list[Any], dict[str, Any]]:
    """The new root inputs (old input indices, new parameters' keys) and the new root's
    `in_tree` and `static_leaves` after the params tree was rewritten."""
    assert mox.in_tree is not None
    leaves, in_tree = jax.tree_util.tree_flatten(tuple(placed.example))
    statics = dict(mox.static_leaves)
    n_args = mox.in_tree.num_leaves
    invar_of: dict[int, int] = {}
    for p in range(n_args + len(mox.block.invars)):
        if p not in statics:
            invar_of[p] = len(invar_of)
    source: list[Any] = []
    static_leaves: list[tuple[int, object]] = []
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, str):
            source.append(leaf)
        elif leaf in statics:
            static_leaves.append((position, statics[leaf]))
        else:
            source.append(invar_of[leaf])
    n_new = len(leaves)
    for p, value in mox.static_leaves:  # keyword arguments' static leaves follow
        if p >= n_args:
            static_leaves.append((p - n_args + n_new, value))
    first_kw = n_args - sum(p < n_args for p in statics)  # keyword, then extra inputs
    source += list(range(first_kw, len(mox.block.invars)))
    return source, {"in_tree": in_tree, "static_leaves": tuple(static_leaves)}


def _sds(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def replay_block(
    block: Block,
    args: Sequence[Any],
    plan: _Plan | None,
    location: Location,
    prefix: str | None = None,
) -> list[Any]:
    """Evaluate `block` inside a trace, re-emitting module calls as module regions and
    replacing the nodes `plan` targets. Module names get `prefix` (a replacement's modules
    take the path of the module they replace)."""
    env: dict[Atom, Any] = dict(zip(block.constvars, block.consts, strict=True))
    env.update(zip(block.invars, args, strict=True))

    def read(atom: Any) -> Any:
        return atom.val if isinstance(atom, Literal) else env[atom]

    for index, node in enumerate(block.nodes):
        loc = (*location, index)
        ins = [read(a) for a in node.invars]
        if plan is not None and loc in plan.targets:
            target = plan.targets[loc]
            if any(v is _REMOVED for v in ins[target.n_skip :]):
                raise MoxError(_removed_use(node, loc))
            outs = _apply(plan, plan.targets[loc], ins)
        elif isinstance(node, ModuleCall):
            outs = _replay_module(node, ins, plan, loc, prefix)
        elif any(v is _REMOVED for v in ins):
            raise MoxError(_removed_use(node, loc))
        elif plan is not None and loc in plan.prefixes:
            outs = _rebuild_equation(node, ins, plan, loc)
        else:
            outs = eval_equation(node, ins)
        for var, value in zip(node.outvars, outs, strict=True):
            env[var] = value
    return [read(a) for a in block.outvars]


def _removed_use(node: Node, location: Location) -> str:
    return (
        f"{describe(node, location)} reads weights that `sub` moved out of the params tree "
        "(the replaced module's, shared with this node); pass the replacement's weights in "
        "the trailing dict instead: `sub(..., make_mox(...)(...), mox)` with a MoX."
    )


def _apply(plan: _Plan, target: _Target, ins: list[Any]) -> list[Any]:
    extra = [plan.extra[k] for k in target.keys]
    prefix = target.prefix
    if prefix is None and isinstance(target.node, ModuleCall):
        prefix = target.node.name
    return replay_block(target.replacement.block, [*extra, *ins[target.n_skip :]], None, (), prefix)


def _replay_module(
    node: ModuleCall, ins: list[Any], plan: _Plan | None, loc: Location, prefix: str | None
) -> list[Any]:
    def fn(state: list[Any], args: list[Any]) -> tuple[list[Any], list[Any]]:
        outs = replay_block(node.body, [*state, *args], plan, loc, prefix)
        return outs[: node.n_state_out], outs[node.n_state_out :]

    info = node.info
    if prefix is not None:
        name = "/".join(part for part in (prefix, info.name) if part)
        info = ModuleInfo(info.type, name, info.attrs)
    state = ins[: node.n_state]
    kept = [j for j, v in enumerate(state) if v is not _REMOVED]
    if len(kept) == len(state):
        new_state, out = call_region(info, fn, state, ins[node.n_state :])
        return [*new_state, *out]

    def without_removed(kept_state: list[Any], args: list[Any]) -> tuple[Any, Any]:
        full = list(state)
        for j, value in zip(kept, kept_state, strict=True):
            full[j] = value
        return fn(full, args)

    # the module's state leaves that `sub` moved out of the params tree are no longer its
    new_state, out = call_region(
        info, without_removed, [state[j] for j in kept], ins[node.n_state :]
    )
    if any(v is _REMOVED for v in new_state):
        raise MoxError(_removed_use(node, loc))
    return [*new_state, *out]


def _rebuild_equation(node: Node, ins: list[Any], plan: _Plan, loc: Location) -> list[Any]:
    """An equation with a target inside one of its regions, rebuilt around new regions."""
    assert isinstance(node, Equation)
    params: dict[str, Any] = dict(node.params)
    if node.primitive.name == JIT_NAME:
        ((_, _, region, _),) = node.regions

        def jit_body(*xs: Any) -> list[Any]:
            return replay_block(region, xs, plan, (*loc, ("region", 0)))

        jit_body.__name__ = jit_body.__qualname__ = str(params.get("name", "jit"))
        return jax.jit(jit_body, inline=params.get("inline", False))(*ins)
    traced: dict[tuple[str, int | None], jex.ClosedJaxpr] = {}
    open_params: dict[tuple[str, int | None], bool] = {}
    for r, (key, index, region, _) in enumerate(node.regions):

        def body(*xs: Any, _region: Block = region, _r: int = r) -> list[Any]:
            return replay_block(_region, xs, plan, (*loc, ("region", _r)))

        traced[key, index] = jax.make_jaxpr(body)(*[_sds(v.aval) for v in region.invars])
        old = params[key] if index is None else params[key][index]
        open_params[key, index] = isinstance(old, jex.Jaxpr)
    return bind_with_regions(
        node.primitive, params, ins, traced, open_params, lambda: describe(node, loc)
    )
