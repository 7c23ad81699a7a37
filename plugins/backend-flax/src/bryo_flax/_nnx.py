"""Flax NNX modules in MoX and in core-scan, through `flax.nnx.split`/`merge`.

MoX: while `make_mox` traces, the `__call__` of every existing `flax.nnx.Module` subclass
is wrapped (`CallRouter.patching`), so each call is described to the handler: the
module's class, its path in the calling module (`"blocks/0/linear"`), its static
attributes (`in_features`, `out_features`, ...), its State (parameters, batch statistics,
rng keys and counts), and a pure version of the call on a module merged from a State.
`write_back` updates the module with the Variables the call changed, and only those.

core-scan: `split_block` turns a Flax NNX block into its State and a rebuild, so
`Stacked`/`BlockSeq` stack and scan Flax NNX blocks, pytrees or not (`pytree=False`),
with shared Variables kept shared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
from flax import errors, nnx

from bryo_plugins import CallRouter

from ._compat import UPDATE_CHECKS_TRACE, in_current_trace

Handler = Callable[..., Any]


_CLOSED_OVER = (
    "Flax NNX module {path} ({cls}) changed its state ({paths}) while traced, but it was "
    "created outside the traced function, and Flax forbids mutating such a module inside "
    "a trace. Pass the module as an argument (`make_mox(lambda model, x: model(x))(model, "
    "x)`), or split it and merge it inside (`graphdef, state = nnx.split(model)`, then "
    "`make_mox(lambda s, x: nnx.merge(graphdef, s)(x))(state, x)`), or put it in eval "
    "mode (`model.eval()`) if it should not change."
)
_OTHER_TRACE = "Cannot mutate {kind} from a different trace level"  # flax 0.12.8's words


@contextlib.contextmanager
def intercept(handler: Handler) -> Iterator[None]:
    """Route every Flax NNX module call to `handler` inside the block.

    See the `bryo_mox_interceptor` hook for the handler's contract.
    """
    with _router.patching(nnx.Module), _router.active(handler):
        yield


def _walk(module: object) -> Iterator[tuple[tuple[Any, ...], object]]:
    return nnx.iter_graph(module)


def attributes(module: nnx.Module) -> dict[str, object]:
    """A module's attributes MoX records: numbers, strings, None and tuples of them."""
    from bryo_mox.interception import static_attributes

    return static_attributes(vars(module).items())


def _arrays(state: nnx.State) -> dict[tuple[Any, ...], list[Any]]:
    """`{path: the Variable's leaves}` of a State."""
    return {path: jax.tree_util.tree_leaves(v) for path, v in nnx.to_flat_state(state)}


def _changed(before: dict[tuple[Any, ...], list[Any]], after: nnx.State) -> set[tuple[Any, ...]]:
    """Paths of the Variables whose arrays a call replaced (or created)."""
    changed = set()
    for path, leaves in _arrays(after).items():
        old = before.get(path)
        if (
            old is None
            or len(old) != len(leaves)
            or any(a is not b for a, b in zip(old, leaves, strict=True))
        ):
            changed.add(path)
    return changed


def _route(
    handler: Handler,
    call: Callable[..., Any],
    module: nnx.Module,
    parent: tuple[object, str] | None,
    args: tuple,
    kwargs: dict,
) -> Any:
    from bryo_mox import MoxError  # only while make_mox traces
    from bryo_mox.interception import module_info, module_path

    name = module_path(module, parent, _walk)
    info = module_info(module, name, attributes(module))
    graphdef, state = nnx.split(module)
    changed: set[tuple[Any, ...]] = set()
    written: list[bool] = []

    def pure(new_state: nnx.State, *call_args: Any, **call_kwargs: Any) -> tuple[Any, Any]:
        before = _arrays(new_state)
        rebuilt = nnx.merge(graphdef, new_state, copy=True)  # the call must not touch new_state
        with _router.running(rebuilt, name):
            out = call(rebuilt, *call_args, **call_kwargs)
        after = nnx.state(rebuilt)
        changed.update(_changed(before, after))
        return after, out

    def write_back(new_state: nnx.State) -> None:
        restoring = new_state is state  # make_mox's restore, after tracing
        if not changed or (restoring and not written):
            return
        updates = [(p, v) for p, v in nnx.to_flat_state(new_state) if p in changed]
        try:
            if not UPDATE_CHECKS_TRACE:  # flax 0.12.0's update would write the tracers
                _check_same_trace(module, changed)
            nnx.update(module, nnx.from_flat_state(updates))
        except errors.TraceContextError as error:
            if restoring:
                return  # the module lived in the finished trace: nothing left to restore
            cls = type(module)
            raise MoxError(
                _CLOSED_OVER.format(
                    path=repr(name) if name else "called at the top level",
                    cls=f"{cls.__module__}.{cls.__qualname__}",
                    paths=", ".join(sorted("/".join(map(str, p)) for p in changed)),
                )
            ) from error
        written.append(True)

    return handler(info, state, pure, write_back, args, kwargs)


def _check_same_trace(module: nnx.Module, paths: set[tuple[Any, ...]]) -> None:
    """Raise Flax's `TraceContextError`, as flax 0.12.8's `nnx.update` does, if a
    Variable of `module` at one of `paths` belongs to another trace than the current one
    (a module created outside a traced function, mutated inside it)."""
    for path, node in _walk(module):
        if path in paths and isinstance(node, nnx.Variable) and not in_current_trace(node):
            raise errors.TraceContextError(_OTHER_TRACE.format(kind=type(node).__name__))


_router = CallRouter("bryo_flax_nnx_mox", _route)


def split_block(block: nnx.Module) -> tuple[nnx.State, Callable[[nnx.State], nnx.Module]]:
    """A Flax NNX block as its State, and how to rebuild a block from such a State
    (stacked or sliced): the `bryo_scan_block_splitters` hook."""
    graphdef, state = nnx.split(block)
    return state, lambda tree: nnx.merge(graphdef, tree)
