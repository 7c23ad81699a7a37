"""The exceptions MoX raises; each message names the node and says how to fix the input."""

from __future__ import annotations


class MoxError(ValueError):
    """Bad input to a MoX function: the message names the argument or node at fault."""


class MoxTypeError(MoxError, TypeError):
    """A substitution whose inputs or outputs do not fit the node it replaces."""


class MoxSerializationError(MoxError):
    """A MoX that cannot be written, or a file that cannot be read back into one.

    Attributes:
        line: 1-based line of the problem in the input text, when known.
        position: 1-based column (or byte offset for formats without lines), when known.
        path: where the problem is in the file's tree, for formats without lines worth
            naming (YSON: `/3/@inputs/1` is the second input of the fourth child).
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        position: int | None = None,
        path: str | None = None,
    ):
        where = []
        if line is not None:
            where.append(f"line {line}")
        if position is not None:
            where.append(f"position {position}")
        if path is not None:
            where.append(f"path {path}")
        super().__init__(f"{message} (at {', '.join(where)})" if where else message)
        self.message = message
        self.line = line
        self.position = position
        self.path = path


class MoxLimitError(MoxSerializationError):
    """A file over one of the loader's budgets (size, nesting, node count, array bytes).

    Raised before the memory is allocated; `bryo_mox.document.Limits` sets the budgets.
    """
