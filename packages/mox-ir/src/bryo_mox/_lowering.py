"""The param names of a loaded equation, checked on load by lowering it once.

A primitive's abstract evaluation often takes `**params` and ignores a name it does not
know (`lt`'s does), so `jax.make_jaxpr` binds an equation whose param was misspelt in a
file (`<lt bogus="1">`) and the file loads; the first `eval_mox` then fails inside jax
(`TypeError: _compare_lower_hlo() got an unexpected keyword argument 'bogus'`). jax has
no public list of a primitive's params, but its lowering rule takes them as keywords. So
the loader lowers (no compiling) each distinct (primitive, param names) it has not
lowered before in this process, all of a file's new ones in one `jax.jit(...).lower`,
and refuses the file when a lowering rule does not take a name. A process remembers the
pairs it lowered (`LOWERED`, bounded), so loading a model again costs nothing here.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import jax
from jax.extend import core as jex

from bryo_pytree import BoundedCache

from ._errors import MoxSerializationError
from .document import NOWHERE, Source

#: `(primitive name, frozenset of param names)` whose lowering took those names (or did
#: not get far enough to read them: a primitive without a lowering on this platform)
LOWERED: BoundedCache[bool] = BoundedCache(4096)

#: How Python says a function was called with a keyword it does not take, or without one
#: it requires: the only lowering errors refused here (others are not about the names).
_NAME_ERRORS = re.compile(
    r"unexpected keyword argument '(?P<unexpected>[^']*)'"
    r"|missing \d+ required keyword-only arguments?: (?P<missing>.*)"
)


class Pending(NamedTuple):
    """An equation whose param names were not lowered yet: its traced jaxpr (the
    equation alone on its inputs), and where it is in the file."""

    tag: str
    names: frozenset[str]
    closed: jex.ClosedJaxpr
    source: Source | None


def names_key(tag: str, names: frozenset[str]) -> Hashable:
    return (tag, names)


def _lower(closed_jaxprs: Sequence[jex.ClosedJaxpr]) -> None:
    """Lower (not compile) the jaxprs side by side, as one function."""
    avals = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
        for closed in closed_jaxprs
        for a in closed.in_avals
    ]
    functions = [jex.jaxpr_as_fun(closed) for closed in closed_jaxprs]
    counts = [len(closed.in_avals) for closed in closed_jaxprs]

    def side_by_side(*xs: Any) -> list[Any]:
        outs, start = [], 0
        for fn, count in zip(functions, counts, strict=True):
            outs.extend(fn(*xs[start : start + count]))
            start += count
        return outs

    jax.jit(side_by_side).lower(*avals)


def _name_error(pending: Pending) -> MoxSerializationError | None:
    """The load error for `pending` when its lowering rule refuses a param name, else None."""
    try:
        _lower([pending.closed])
    except TypeError as error:
        found = _NAME_ERRORS.search(str(error))
        if found is None:
            return None
        if found["unexpected"] is not None:
            what = (
                f"param `{found['unexpected']}`, which jax's `{pending.tag}` does not take. "
                "The name is misspelt, or the file was not written by bryo for this jax"
            )
        else:
            what = (
                f"no param {found['missing']}, which jax's `{pending.tag}` requires. "
                "A name is misspelt or missing, or the file was not written by bryo for "
                "this jax"
            )
        params = ", ".join(sorted(pending.names)) or "none"
        return (pending.source or NOWHERE).error(
            f"equation `{pending.tag}` has {what} (jax said: {type(error).__name__}: "
            f"{error}). Correct the param's name (the equation's params: {params}), or "
            "write it again from the traced MoX."
        )
    except Exception:  # not about the names (no lowering on this platform, say)
        return None
    return None


def check_param_names(pending: Sequence[Pending]) -> None:
    """Lower the equations of `pending` (their names not lowered before in this process);
    remember their names when jax takes them.

    Raises:
        MoxSerializationError: located at the first equation (in `pending`'s order) with
            a param its primitive's lowering does not take, or without one it requires.
    """
    if not pending:
        return
    try:
        _lower([p.closed for p in pending])
    except Exception:  # find the culprit, one equation at a time
        for one in pending:
            error = _name_error(one)
            if error is not None:
                raise error from None
            LOWERED.put(names_key(one.tag, one.names), True)
        return
    for one in pending:
        LOWERED.put(names_key(one.tag, one.names), True)
