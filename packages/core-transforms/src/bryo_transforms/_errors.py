"""The error types of the lifted transforms."""

from __future__ import annotations


class TransformError(ValueError):
    """A lifted transform was set up wrongly; the message names the argument and path."""


class ConcurrentUpdateError(TransformError):
    """Another thread's lifted call wrote a Variable of the same model while this call
    ran; this call's updates were not written (the other thread's are kept)."""
