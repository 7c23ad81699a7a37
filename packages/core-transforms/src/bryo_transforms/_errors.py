"""The one error type of the lifted transforms."""

from __future__ import annotations


class TransformError(ValueError):
    """A lifted transform was set up wrongly; the message names the argument and path."""
