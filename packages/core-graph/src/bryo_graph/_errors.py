"""The error of graph operations, below every module that raises it."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph operation cannot be done as asked; the message names the paths involved."""
