"""Errors for the functions plugins hand bryo, named where bryo calls them.

A hook answers once, and bryo checks that answer where it reads it (`_calls`). The
functions inside an answer (a `NodeType`'s `flatten` and `unflatten`, a `BlockSplitter`,
an interceptor) are called later, deep inside `split`, `merge` or `make_mox`, on the
user's data: when one raises or returns what its contract does not allow, the raw error
would name neither the plugin nor the place. `callback_error` makes the error that does;
its owner raises it `from` the original, at a point where the failure is already
exceptional (an `except` clause costs nothing until it catches).
"""

from __future__ import annotations

import functools

from ._failures import PluginCallbackError
from ._manager import BryoPluginManager, get_plugin_manager
from ._markers import BLOCK_ENV


def callback_error(
    function: object,
    *,
    role: str,
    plugin: str | None,
    hook: str,
    contract: str,
    error: BaseException | None = None,
    returned: str | None = None,
    did: str | None = None,
    where: str = "",
    unchanged: str = "",
    category: type[Exception] | None = None,
    pm: BryoPluginManager | None = None,
) -> PluginCallbackError:
    """The error for a plugin's `function` that raised `error` or answered `returned`.

    Args:
        function: the plugin's function, named by its module and qualified name.
        role: what the function is, for the message (`"the `unflatten` of
            NodeType(acme.Linear)"`).
        plugin: the name of the plugin whose hook answer held it (None when unknown).
        hook: that hook (`"bryo_graph_node_types"`).
        contract: what the function must do, the fix (`"`unflatten(cls, aux, children)`
            must return the rebuilt node"`).
        error: the exception it raised; None when it returned something wrong.
        returned: what is wrong with what it returned (`"None"`), when it did not raise.
        did: what else it did wrong, in place of `returned` (`"passed `info` of type
            str"`).
        where: where bryo called it (`"while rebuilding the node at hidden"`).
        unchanged: what the failure left as it was (`"Your model is unchanged."`).
        category: for a wrong answer, the owner's error class the error is also an
            instance of (`GraphError`), as an error raised is of the raised one's.
        pm: the manager the plugin is registered with; bryo's current one by default.

    Returns:
        A `PluginCallbackError` to raise `from error`. When `error` is given the error
        is also an instance of `error`'s class, so
        that code catching the plugin's own error (a backend's `ValueError` telling the
        user what to change) still catches it; a wrong answer's is one of `category`.
    """
    pm = get_plugin_manager() if pm is None else pm
    dist = pm.distribution_of(plugin) if plugin is not None else None
    source = (
        f"from plugin {plugin!r}{f' (distribution {dist})' if dist else ''}, hook `{hook}`"
        if plugin is not None
        else f"from a plugin's `{hook}`"
    )
    name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
    if error is not None:
        happened = f"raised {type(error).__name__}: {str(error).rstrip('.')}"
        if not str(error):
            happened = f"raised {type(error).__name__}"
    else:
        happened = did if did is not None else f"returned {returned}"
    blame = f"that plugin ({dist or plugin})" if plugin is not None else "that plugin"
    if error is not None:
        fix = (
            f"If the error says what to change in your code, do that; otherwise it is a bug "
            f"in {blame}: fix or report it"
        )
    else:
        fix = f"It is a bug in {blame}: fix or report it"
    block = f", or set {BLOCK_ENV}={plugin} to go on without it" if plugin is not None else ""
    where = f" {where}" if where else ""
    message = (
        f"{role[:1].upper()}{role[1:]} ({name}), {source}, {happened}{where}. "
        f"{contract.rstrip('.')}. {f'{unchanged} ' if unchanged else ''}{fix}{block}."
    )
    base = type(error) if error is not None else category
    if base is None:
        return PluginCallbackError(message)
    return _error_class(base)(message)  # (built-in exceptions' constructors come first)


@functools.lru_cache(maxsize=64)  # bounded: one class per exception type plugins raise
def _error_class(base: type[BaseException]) -> type[PluginCallbackError]:
    """`PluginCallbackError` that is also a `base` (a `ValueError`, a `GraphError`)."""
    if not issubclass(base, Exception) or issubclass(base, PluginCallbackError):
        return PluginCallbackError
    cls = type(f"PluginCallbackError[{base.__name__}]", (PluginCallbackError, base), {})
    cls.__module__ = PluginCallbackError.__module__
    return cls
