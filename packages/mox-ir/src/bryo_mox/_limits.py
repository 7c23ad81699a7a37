"""Budgets of one load: what a file may make the loader allocate, checked beforehand.

A MoX file is untrusted input. `Limits` holds the budgets a load runs under (file bytes,
nesting depth, node count, and the bytes of the arrays a file declares: constants,
array literals, array-valued params); `loading(size, limits)` makes a `Budget` for one
file the active one while the serializer and the document builder read it, so that
every array a file declares is counted against one total and refused, with the place in
the file, before it is allocated. The default array budget grows with the file's size,
because honest files carry their arrays' bytes (base64 holds 3 bytes in 4 characters;
decimal text of old files at least 2 characters per element).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from ._errors import MoxLimitError

#: Documents nested deeper than this are refused when read.
MAX_DEPTH = 200
#: Default array budget: this many bytes per byte of file, plus `ARRAY_BYTES_FLOOR`.
ARRAY_BYTES_PER_FILE_BYTE = 8
ARRAY_BYTES_FLOOR = 1 << 20
#: The largest array (in bytes) a type may describe at all: numpy's index range.
MAX_ARRAY_BYTES = 1 << 62
#: `read_file` reads files of unknown size (pipes, devices) this many bytes at a time.
READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Limits:
    """The budgets of a load; pass `limits=Limits(...)` to `bryo_mox.loads` to change them.

    Attributes:
        max_bytes: the largest file accepted.
        max_depth: how deeply nodes (module calls, equations, regions) may nest.
        max_nodes: how many elements (XML) or values (YSON) a file may hold; bounds the
            memory of the parsed tree.
        array_bytes: total bytes of the arrays a file may declare; `None` for
            `ARRAY_BYTES_PER_FILE_BYTE` per byte of file plus `ARRAY_BYTES_FLOOR`.
        max_traces: how many distinct equations (by primitive, params and input types)
            a load may rebuild by tracing them with JAX; bounds the time and memory of a
            file whose equations all differ (a model's file has a few dozen: a
            transformer's of any depth 46).
        max_trace_ports: how many inputs and outputs the equations a load traces may
            have together; bounds the time and memory of tracing and lowering them (about
            50 µs a port: an equation of 500,000 inputs took 8 s and 550 MB to trace). A
            transformer's file of any depth traces 117.
        max_types: how many distinct type strings (`f32[2,3]`) a file may use; bounds
            the abstract values made for them (a transformer's file of any depth has 23).
        max_literals: how many distinct scalar literal values (by value and type) a file
            may use; bounds the arrays made for them (a transformer's file has 9).
    """

    max_bytes: int = 256 * (1 << 20)
    max_depth: int = MAX_DEPTH
    max_nodes: int = 2_000_000
    array_bytes: int | None = None
    max_traces: int = 5_000
    max_trace_ports: int = 20_000
    max_types: int = 100_000
    max_literals: int = 100_000

    def array_budget(self, file_bytes: int) -> int:
        """The array budget of a file of `file_bytes` bytes."""
        if self.array_bytes is not None:
            return self.array_bytes
        return ARRAY_BYTES_PER_FILE_BYTE * file_bytes + ARRAY_BYTES_FLOOR


class Budget:
    """What is left of the budgets while one file is read."""

    def __init__(self, limits: Limits, file_bytes: int) -> None:
        self.limits = limits
        self.file_bytes = file_bytes
        self.array_bytes_left = limits.array_budget(file_bytes)
        self.traces = 0
        self.trace_ports = 0
        self.types = 0
        self.literals = 0

    def check_size(self, **where: Any) -> None:
        """Refuse a file larger than `max_bytes`."""
        if self.file_bytes > self.limits.max_bytes:
            raise MoxLimitError(
                f"the file is {self.file_bytes} bytes, over the limit of "
                f"{self.limits.max_bytes}; pass `limits=Limits(max_bytes=...)` to read it.",
                **where,
            )

    def check_nodes(self, count: int, **where: Any) -> None:
        """Refuse a file with more than `max_nodes` elements or values."""
        if count > self.limits.max_nodes:
            raise MoxLimitError(
                f"the file holds more than {self.limits.max_nodes} nodes (at least {count}); "
                "pass `limits=Limits(max_nodes=...)` to read it.",
                **where,
            )

    def check_depth(self, depth: int, **where: Any) -> None:
        """Refuse nesting deeper than `max_depth`."""
        if depth > self.limits.max_depth:
            raise MoxLimitError(
                f"the document nests deeper than {self.limits.max_depth} levels; refusing "
                "to read it (`limits=Limits(max_depth=...)` raises the limit).",
                **where,
            )

    def spend_trace(self, what: str, ports: int = 0, **where: Any) -> None:
        """Count one equation of `ports` inputs and outputs traced to rebuild it,
        refusing past `max_traces` equations or `max_trace_ports` ports."""
        self.traces += 1
        if self.traces > self.limits.max_traces:
            raise MoxLimitError(
                f"{what} would be distinct equation number {self.traces} to rebuild, over "
                f"the limit of {self.limits.max_traces} (a model's file has a few dozen); "
                "pass `limits=Limits(max_traces=...)` to read it.",
                **where,
            )
        self.trace_ports += ports
        if self.trace_ports > self.limits.max_trace_ports:
            raise MoxLimitError(
                f"{what} has {ports} inputs and outputs to trace, which would bring those "
                f"of the equations the file rebuilds to {self.trace_ports}, over the limit "
                f"of {self.limits.max_trace_ports} (a model's file traces a few hundred); "
                "pass `limits=Limits(max_trace_ports=...)` to read it.",
                **where,
            )

    def count_type(self, text: str) -> None:
        """Count one distinct type string, refusing past `max_types`."""
        self.types += 1
        if self.types > self.limits.max_types:
            raise MoxLimitError(
                f"the type {text!r:.60} would be distinct type number {self.types} of the "
                f"file, over the limit of {self.limits.max_types} (a model's file has a "
                "few dozen); pass `limits=Limits(max_types=...)` to read it."
            )

    def count_literal(self, value: Any, type_text: str) -> None:
        """Count one distinct scalar literal value, refusing past `max_literals`."""
        self.literals += 1
        if self.literals > self.limits.max_literals:
            raise MoxLimitError(
                f"the literal {value!r:.40} of type {type_text} would be distinct literal "
                f"number {self.literals} of the file, over the limit of "
                f"{self.limits.max_literals} (a model's file has a few dozen); pass "
                "`limits=Limits(max_literals=...)` to read it."
            )

    def spend_array(self, nbytes: int, what: str, **where: Any) -> None:
        """Count an array of `nbytes` bytes against the budget, before it is allocated."""
        if nbytes > self.array_bytes_left:
            budget = self.limits.array_budget(self.file_bytes)
            raise MoxLimitError(
                f"{what} declares {nbytes} bytes of array data, over the file's array budget "
                f"of {budget} bytes ({budget - self.array_bytes_left} already declared); pass "
                "`limits=Limits(array_bytes=...)` to read it.",
                **where,
            )
        self.array_bytes_left -= nbytes


_active: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "bryo_mox_load_budget", default=None
)


@contextlib.contextmanager
def loading(file_bytes: int, limits: Limits | None = None) -> Iterator[Budget]:
    """Make a fresh budget for a file of `file_bytes` bytes the active one."""
    budget = Budget(limits or Limits(), file_bytes)
    token = _active.set(budget)
    try:
        yield budget
    finally:
        _active.reset(token)


def current_budget(file_bytes: int = 0) -> Budget:
    """The active budget, or a fresh default one for a file of `file_bytes` bytes."""
    budget = _active.get()
    return budget if budget is not None else Budget(Limits(), file_bytes)


def array_nbytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of an array of `shape`; `MoxLimitError` past what numpy can index."""
    nbytes = math.prod(shape) * itemsize
    if nbytes >= MAX_ARRAY_BYTES or any(d < 0 for d in shape):
        raise MoxLimitError(f"an array of shape {shape} is larger than any array can be.")
    return nbytes


def read_file(path: str | os.PathLike[str], limits: Limits | None = None) -> bytes:
    """The bytes of the file at `path`, refused as soon as they pass `max_bytes`.

    A regular file's size is checked before anything is read; anything else (a pipe,
    `/dev/zero`) is read `READ_CHUNK_BYTES` at a time and refused at the first chunk
    past the limit, so a file never makes the loader hold more than `max_bytes`.

    Raises:
        MoxLimitError: the file is larger than `limits.max_bytes`.
        OSError: the file cannot be opened or read.
    """
    max_bytes = (limits or Limits()).max_bytes
    with open(path, "rb") as file:
        info = os.fstat(file.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            _over(path, max_bytes, f"is {info.st_size} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := file.read(min(READ_CHUNK_BYTES, max_bytes - total + 1)):
            total += len(chunk)
            if total > max_bytes:
                _over(path, max_bytes, f"holds more than {max_bytes} bytes (read {total})")
            chunks.append(chunk)
    return b"".join(chunks)


def _over(path: str | os.PathLike[str], max_bytes: int, what: str) -> NoReturn:
    raise MoxLimitError(
        f"the file {os.fspath(path)!r} {what}, over the limit of {max_bytes}; pass "
        "`limits=Limits(max_bytes=...)` to read it."
    )
