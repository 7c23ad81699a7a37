"""What goes wrong with plugins, as values: errors for misbuilt plugins, failure records,
conflict warnings.

A plugin that fails to import, raises inside a hook, or answers a hook with something its
specification does not allow becomes a `PluginFailure`: named with its distribution,
warned about once, listed by `plugin_failures()` and `bryo plugins --strict`. The
failing plugin is disabled; the rest of bryo keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._markers import BLOCK_ENV


class PluginError(RuntimeError):
    """A plugin is misbuilt: it implements a hook no package declares, or it asks for the
    plugin manager while that manager is still loading it; or a plugin that failed is
    needed (`BryoPluginManager.check_failed`: a class or format only it would know)."""


class PluginCallbackError(PluginError):
    """A function a plugin handed bryo (a `NodeType`'s `unflatten`, an interceptor) raised,
    or returned something its contract does not allow, while bryo used it.

    The message names the plugin, its distribution and hook, the function, where in the
    user's model it was called and how to fix it; the original exception is its
    `__cause__`. An error the function raised keeps its type too (see `callback_error`):
    `except ValueError` still catches a backend's own `ValueError`.
    """

    def __str__(self) -> str:  # (KeyError, a possible second base, would quote it)
        return str(self.args[0]) if self.args else ""


class PluginResultError(TypeError):
    """A hook implementation returned something its hook specification does not allow.

    Raised by the validators core packages apply to hook results; bryo turns it into a
    `PluginFailure` naming the plugin, and disables that plugin.
    """


class PluginConflictWarning(UserWarning):
    """Two plugins claim the same key of a hook table; the message names both and the
    winner."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that failed: while being loaded (`hook` is None), or inside `hook`.

    Attributes:
        name: the plugin's name (its entry-point name, or the name it was registered as).
        distribution: the distribution that ships it, when known.
        error: the exception itself (a `PluginResultError` for a result the hook's
            specification does not allow).
        hook: the hook that raised or returned garbage; None for a failure to load.
    """

    name: str
    distribution: str | None
    error: BaseException
    hook: str | None = None

    def __str__(self) -> str:
        source = f" (distribution {self.distribution})" if self.distribution else ""
        error = f"{type(self.error).__name__}: {str(self.error).rstrip('.')}"
        if self.hook is None:
            return (
                f"bryo plugin {self.name!r}{source} failed to load: {error}. The rest of bryo "
                f"keeps working; set {BLOCK_ENV}={self.name} to skip it."
            )
        return (
            f"bryo plugin {self.name!r}{source} failed in hook `{self.hook}`: {error}. The "
            "plugin is disabled for the rest of the process and the rest of bryo keeps "
            f"working; fix the plugin, or set {BLOCK_ENV}={self.name} to skip it."
        )
