"""`tabulate`: a table of a model's module calls with their shapes and state sizes.

`tabulate(model, x)` runs `model(x)` abstractly (`jax.eval_shape`: nothing is computed,
the model is not changed) while recording every call of a module method (`__call__` and
public methods such as `block.forward`) in the model. Each call is one row: the module's
path and type, the shapes of its inputs and outputs, and one column per kind of Variable
(`Param`, `BatchStat`, `RngState`, ...): the module's own Variables with their shapes,
and the count and bytes of everything under it. A total row and the total size close it.

    >>> print(tabulate(model, jnp.ones((1, 32))))       # doctest: +SKIP
    Model Summary
    ┏━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┓
    ┃ path   ┃ type   ┃ inputs        ┃ outputs       ┃ Param                   ┃
    ...
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, cast

import jax
import jax.numpy as jnp
import numpy as np

from bryo_graph import SizeBytes, Variable, iter_graph, merge, split, variable_size
from bryo_pytree import Path, is_shaped

from ._compat import cost_flops
from ._module import Module


@dataclasses.dataclass
class CallInfo:
    """One recorded call: a row of the table (what `row_filter` sees).

    Attributes:
        path: the module's path in the model, with the method name unless `__call__`.
        type: the module's class.
        module_path: the module's path in the model.
        inputs, outputs: the arguments and result, described (`float32[1,8]`).
        flops, vjp_flops: the call's estimated FLOPs forward and backward, when computed.
    """

    path: Path
    type: type
    module_path: Path
    inputs: str
    outputs: str = ""
    flops: int | None = None
    vjp_flops: int | None = None


# Recording -------------------------------------------------------------------------------


class _Shaped(Protocol):
    """What `is_shaped` checks a value for: an array's `shape` and `dtype`."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...


def _describe(value: object) -> str:
    """A short description: arrays as `dtype[shape]`, modules as `Type(...)`."""
    if is_shaped(value):
        shaped = cast(_Shaped, value)
        return f"{shaped.dtype}[{','.join(map(str, shaped.shape))}]"
    if isinstance(value, Module):
        return f"{type(value).__name__}(...)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return repr(value)


def _describe_call(args: tuple, kwargs: dict) -> str:
    if len(args) == 1 and not kwargs:
        return _describe(args[0])
    lines = [f"- {_describe(a)}" for a in args]
    lines += [f"{k}: {_describe(v)}" for k, v in kwargs.items()]
    return "\n".join(lines)


def _describe_output(out: object) -> str:
    if isinstance(out, tuple) and out:
        return "\n".join(f"- {_describe(v)}" for v in out)
    return _describe(out)


class _Recorder:
    """The calls of one `tabulate` run, recorded by the patched methods."""

    def __init__(self, paths: dict[int, Path], flops: bool, vjp_flops: bool) -> None:
        self.paths = paths
        self.flops, self.vjp_flops = flops, vjp_flops
        self.rows: list[CallInfo] = []
        self.seen: set[tuple] = set()
        self.running: list[tuple[int, str]] = []
        self.copies: list[Module] = []  # kept alive: their ids are keys of `originals`
        self.originals: dict[int, int] = {}  # id of a copy's module -> id of the caller's

    def identity(self, module: Module) -> int:
        """The id of the caller's module that `module` is (or is a copy of)."""
        return self.originals.get(id(module), id(module))

    def add_copy(self, copy: Module, original: Module) -> None:
        """Record the calls of `copy` (`original` rebuilt inside a trace) as the calls of
        `original`'s modules, a shared one staying one module (as outside the trace)."""
        self.copies.append(copy)
        known = {path: node for path, node in iter_graph(original) if isinstance(node, Module)}
        for sub_path, node in iter_graph(copy):
            if isinstance(node, Module) and sub_path in known:
                self.originals[id(node)] = self.identity(known[sub_path])

    def call(self, method: Callable, name: str, obj: Module, args: tuple, kwargs: dict) -> Any:
        identity = self.identity(obj)
        module_path = self.paths.get(identity)
        if module_path is None or (self.running and self.running[-1] == (identity, name)):
            return method(obj, *args, **kwargs)  # a module made inside, or a super() call
        inputs = _describe_call(args, kwargs)
        row = None
        if (identity, name, inputs) not in self.seen:  # a shared module's repeated call: once
            self.seen.add((identity, name, inputs))
            path = module_path if name == "__call__" else (*module_path, name)
            row = CallInfo(path, type(obj), module_path, inputs)
            self.rows.append(row)
        self.running.append((identity, name))
        try:
            if row is not None and (self.flops or self.vjp_flops):
                out = self._measured_call(row, method, obj, args, kwargs)
            else:
                out = method(obj, *args, **kwargs)
        finally:
            self.running.pop()
        if row is not None:
            row.outputs = _describe_output(out)
        return out

    def _measured_call(
        self, row: CallInfo, method: Callable, obj: Module, args: tuple, kwargs: dict
    ) -> Any:
        """Call through a `jax.jit` of the call, lowered first for its FLOPs: the method's
        body is traced once (inner calls recorded then), the call itself hits the cache."""
        graphdef, state = split(((obj, *args), kwargs))

        def pure(state: Any) -> Any:
            (module, *call_args), call_kwargs = merge(graphdef, state)
            self.add_copy(module, obj)
            return method(module, *call_args, **call_kwargs)

        jitted = jax.jit(pure)
        abstract = jax.tree.map(_abstract, state)
        if self.flops:
            row.flops = cost_flops(jitted.lower(abstract))
        if self.vjp_flops:
            token = _ACTIVE.set(None)  # the backward trace's inner calls are not rows
            try:
                row.vjp_flops = cost_flops(jax.jit(functools.partial(_vjp, pure)).lower(abstract))
            finally:
                _ACTIVE.reset(token)
        return jitted(state)


def _abstract(x: object) -> object:
    """`x`'s abstract value, weak type included, so the traced call reuses the lowering."""
    if not hasattr(x, "shape"):
        return x
    shaped = cast(_Shaped, x)  # a state leaf with a shape is an array
    return jax.ShapeDtypeStruct(
        shaped.shape, shaped.dtype, weak_type=getattr(x, "weak_type", False)
    )


def _vjp(f: Callable[[Any], Any], state: Any) -> Any:
    """A forward and backward pass of `f`, seeded with its own output (as Flax measures)."""
    out, f_vjp = jax.vjp(f, state)
    return f_vjp(jax.tree.map(_cotangent, out))


def _cotangent(x: jax.Array) -> jax.Array | np.ndarray:
    if jnp.issubdtype(x.dtype, np.inexact):
        return x
    return np.zeros(x.shape, jax.dtypes.float0)


_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar(
    "bryo_nnx_tabulate", default=None
)
_PATCH_LOCK = threading.Lock()
_PATCHED: dict[tuple[type, str], tuple[Callable, int]] = {}  # (class, name) -> (original, users)


def _recorded_methods(cls: type) -> dict[str, Callable]:
    """The methods of `cls` (its own) that a table shows: `__call__` and public ones."""
    return {
        name: fn
        for name, fn in vars(cls).items()
        if inspect.isfunction(fn) and (name == "__call__" or not name.startswith("_"))
    }


def _recording(method: Callable, name: str) -> Callable:
    @functools.wraps(method)
    def recorded(obj: Module, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None:
            return method(obj, *args, **kwargs)
        return recorder.call(method, name, obj, args, kwargs)

    return recorded


def _method_owners(classes: set[type]) -> list[tuple[type, str]]:
    """`(class, name)` of every method the instances of `classes` can call, inherited ones
    included, on the class that defines it (the base `Module`'s own methods excepted)."""
    owners = {
        (owner, name)
        for cls in classes
        for owner in cls.__mro__
        if issubclass(owner, Module) and owner is not Module
        for name in _recorded_methods(owner)
    }
    return sorted(owners, key=lambda key: (key[0].__qualname__, key[1]))


@contextlib.contextmanager
def _patched(classes: set[type]) -> Iterator[None]:
    """Route the methods of `classes` through the active recorder inside the block.

    Other threads' calls (no recorder active) go straight through; nested or concurrent
    tabulations share the patch, which the last one out removes.
    """
    keys = _method_owners(classes)
    with _PATCH_LOCK:
        for cls, name in keys:
            original, users = _PATCHED.get((cls, name), (vars(cls)[name], 0))
            if users == 0:
                setattr(cls, name, _recording(original, name))
            _PATCHED[(cls, name)] = (original, users + 1)
    try:
        yield
    finally:
        with _PATCH_LOCK:
            for cls, name in keys:
                original, users = _PATCHED.pop((cls, name))
                if users > 1:
                    _PATCHED[(cls, name)] = (original, users - 1)
                else:
                    setattr(cls, name, original)


def _module_paths(root: object) -> dict[int, Path]:
    return {id(node): path for path, node in iter_graph(root) if isinstance(node, Module)}


def _record(
    obj: Module, method: str, args: tuple, kwargs: dict, flops: bool, vjp_flops: bool
) -> list[CallInfo]:
    """Run `obj.method(*args, **kwargs)` abstractly and return the calls it made."""
    classes = {type(node) for _, node in iter_graph(obj) if isinstance(node, Module)}
    graphdef, state = split((obj, args, kwargs))
    rows: list[CallInfo] = []

    def run(state: Any) -> Any:
        model, call_args, call_kwargs = merge(graphdef, state)
        recorder = _Recorder(_module_paths(model), flops, vjp_flops)
        token = _ACTIVE.set(recorder)
        try:
            out = getattr(model, method)(*call_args, **call_kwargs)
        finally:
            _ACTIVE.reset(token)
        rows.extend(recorder.rows)
        return split((out,))[1]

    with _patched(classes):
        jax.eval_shape(run, state)
    return rows


# State columns ---------------------------------------------------------------------------


@dataclasses.dataclass
class _StateColumns:
    """Per module path: its own Variables (attributes) by kind, and the sizes of every
    Variable under it."""

    kinds: list[type]
    own: dict[Path, dict[type, list[tuple[str, Variable]]]]
    sizes: dict[Path, dict[type, SizeBytes]]

    @classmethod
    def of(cls, root: object) -> _StateColumns:
        modules = [p for p, n in iter_graph(root) if isinstance(n, Module)]
        own: dict = {}
        sizes: dict = {}
        kinds: set[type] = set()
        for path, node in iter_graph(root):
            if not isinstance(node, Variable):
                continue
            kind = node.stats_type or type(node)  # RngKey and RngCount: RngState
            kinds.add(kind)
            size = variable_size(node)
            if path[:-1] in modules:  # a module's own attribute (not inside a stream or list)
                own.setdefault(path[:-1], {}).setdefault(kind, []).append((path[-1], node))
            for m in modules:
                if path[: len(m)] == m and size.size:
                    by_kind = sizes.setdefault(m, {})
                    by_kind[kind] = by_kind[kind] + size if kind in by_kind else size
        return cls(sorted(kinds, key=lambda k: k.__name__), own, sizes)

    def cell(self, module_path: Path, kind: type) -> str:
        lines = [_variable_line(name, v) for name, v in self.own.get(module_path, {}).get(kind, [])]
        size = str(self.sizes.get(module_path, {}).get(kind, ""))
        return "\n".join([*lines, "", size] if lines else [size])

    def total(self, kind: type) -> str:
        return str(self.sizes.get((), {}).get(kind, ""))


def _variable_line(name: str, variable: Variable) -> str:
    value = variable.value
    text = f"{name}: {_describe(value)}" if hasattr(value, "shape") else f"{name}: {value!r}"
    metadata = ", ".join(f"{k}={v!r}" for k, v in variable.metadata.items())
    return f"{text} ({metadata})" if metadata else text


# Rendering -------------------------------------------------------------------------------


def _render(title: str, header: list[str], rows: list[list[str]], footer: list[str]) -> str:
    """A box-drawn table: header, rows separated by rules, footer."""
    cells = [header, *rows, footer]
    widths = [
        max(len(line) for row in cells for line in row[i].split("\n")) for i in range(len(header))
    ]

    def rule(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def lines(row: list[str], edge: str, align_last_right: int | None = None) -> list[str]:
        split_cells = [c.split("\n") for c in row]
        height = max(len(c) for c in split_cells)
        out = []
        for i in range(height):
            parts = []
            for j, (c, w) in enumerate(zip(split_cells, widths, strict=True)):
                text = c[i] if i < len(c) else ""
                parts.append(text.rjust(w) if j == align_last_right else text.ljust(w))
            out.append(edge + edge.join(f" {p} " for p in parts) + edge)
        return out

    width = sum(widths) + 3 * len(widths) + 1
    out = [f"{title} Summary".center(width).rstrip()]
    out.append(rule("┏", "━", "┳", "┓"))
    out += lines(header, "┃")
    out.append(rule("┡", "━", "╇", "┩"))
    for i, row in enumerate(rows):
        if i:
            out.append(rule("├", "─", "┼", "┤"))
        out += lines(row, "│")
    out.append(rule("├", "─", "┼", "┤"))
    out += lines(footer, "│", align_last_right=footer.index("Total"))
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out)


def _every_row(row: CallInfo) -> bool:
    return True


def tabulate(
    obj: Module,
    *input_args: Any,
    depth: int | None = None,
    method: str = "__call__",
    row_filter: Callable[[CallInfo], bool] = _every_row,
    table_kwargs: Mapping[str, Any] | None = None,
    column_kwargs: Mapping[str, Any] | None = None,
    console_kwargs: Mapping[str, Any] | None = None,
    compute_flops: bool = False,
    compute_vjp_flops: bool = False,
    **input_kwargs: Any,
) -> str:
    """A table of `obj.method(*input_args, **input_kwargs)`'s module calls (see module doc).

    Args:
        obj: the model (a Module).
        *input_args: the call's positional arguments (arrays or `ShapeDtypeStruct`s).
        depth: show only calls at most this deep in the model (0: the model's own call).
        method: the method to call (default `__call__`).
        row_filter: keep only the rows (`CallInfo`) for which it returns True.
        table_kwargs: Flax's option for its `rich` renderer; accepted so Flax code runs,
            without effect (the table is plain text).
        column_kwargs: likewise.
        console_kwargs: likewise.
        compute_flops: add a column with each call's estimated FLOPs, from XLA's cost
            analysis.
        compute_vjp_flops: add a column with each call's forward plus backward FLOPs.
        **input_kwargs: the call's keyword arguments.

    Returns:
        The table, as text.
    """
    del table_kwargs, column_kwargs, console_kwargs
    if not isinstance(obj, Module):
        raise TypeError(f"`tabulate` summarizes a Module; got {type(obj).__name__}.")
    if not callable(getattr(obj, method, None)):
        raise AttributeError(f"`tabulate`: {type(obj).__name__} has no method {method!r}.")
    calls = _record(obj, method, input_args, input_kwargs, compute_flops, compute_vjp_flops)
    calls = [c for c in calls if row_filter(c) and (depth is None or len(c.path) <= depth)]
    state = _StateColumns.of(obj)
    header = ["path", "type", "inputs", "outputs"]
    header += ["flops"] * compute_flops + ["vjp_flops"] * compute_vjp_flops
    header += [kind.__name__ for kind in state.kinds]
    rows = []
    for call in calls:
        row = ["/".join(map(str, call.path)), call.type.__name__, call.inputs, call.outputs]
        row += [str(call.flops)] * compute_flops + [str(call.vjp_flops)] * compute_vjp_flops
        row += [state.cell(call.module_path, kind) for kind in state.kinds]
        rows.append(row)
    footer = ["", "", "", "Total", *[""] * (compute_flops + compute_vjp_flops)]
    footer += [state.total(kind) for kind in state.kinds]
    total = sum(state.sizes.get((), {}).values(), SizeBytes(0, 0))
    table = _render(type(obj).__name__, header, rows, footer)
    counted = str(total) if total.size else ""
    caption = f"Total Parameters: {counted}".center(len(table.splitlines()[1])).rstrip()
    return f"{table}\n\n{caption}\n"
