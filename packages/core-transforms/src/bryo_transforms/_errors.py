"""The error types of the lifted transforms."""

from __future__ import annotations


class TransformError(ValueError):
    """A lifted transform was set up wrongly; the message names the argument and path."""


class ConcurrentUpdateError(TransformError):
    """Another thread's lifted call wrote a Variable of the same model while this call
    ran; this call's updates were not written (the other thread's are kept)."""


def concurrent_update(name: str, where: str) -> ConcurrentUpdateError:
    """The error of a call (of transform `name`) whose write-back would overwrite `where`
    (a Variable another call wrote since this one read it)."""
    return ConcurrentUpdateError(
        f"`{name}`: another call updated {where} while this call ran on the same model "
        "(another thread's, or a lifted call on the caller's model from inside this one); "
        "this call's updates were not written (the other call's are kept). Lifted "
        "transforms on one model from several threads must take turns: hold a lock of "
        "yours around each call, or give each thread its own model (`nnx.clone(model)`)."
    )
