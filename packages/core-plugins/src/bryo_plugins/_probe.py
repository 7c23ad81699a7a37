"""Checking every plugin at once: what `bryo plugins` runs, and `--strict` fails on.

Plugins load lazily and hooks are asked only when core code needs them, so a broken plugin
may go unnoticed until a user meets it. `probe_plugins` loads every plugin of every family,
makes every table bryo builds from hook answers (each answer checked by its owner's
validator, as in real use), and calls every hook once on every plugin: hooks taking
arguments are asked about a `Probe`, a value no plugin can know, and must answer None.
"""

from __future__ import annotations

import pluggy

from ._calls import Validate, ask, call_order
from ._failures import PluginFailure, PluginResultError
from ._hook_tables import refresh_caches
from ._manager import BryoPluginManager, get_plugin_manager


class Probe:
    """A value no plugin can know, passed to hooks by `probe_plugins`.

    A hook asked about it must answer None, as it should for any input it does not
    understand.

    Args:
        argument: the hook argument it stands for (shown in reports).
    """

    __slots__ = ("argument",)

    def __init__(self, argument: str) -> None:
        self.argument = argument

    def __repr__(self) -> str:
        return f"<bryo probe for `{self.argument}`>"


_registered: dict[str, dict[str, object]] = {}


def add_probe_arguments(hook_name: str, **arguments: object) -> None:
    """Give `probe_plugins` real values for arguments of `hook_name` that a `Probe` cannot
    stand for (a facade the host hands each plugin); the owner calls it with its hookspecs.

    >>> add_probe_arguments("bryo_widget_renderers", registry={})  # doctest: +SKIP
    """
    _registered[hook_name] = dict(arguments)


def _answers_nothing(answer: object) -> object:
    raise PluginResultError(
        f"answered {answer!r} about a probe, a value no plugin can know; return None for "
        "input the plugin does not understand"
    )


def _anything(answer: object) -> object:
    return answer


def probe_plugins(pm: BryoPluginManager | None = None, **arguments: object) -> list[PluginFailure]:
    """Load every plugin and ask each hook once; the failures this found.

    Failing plugins are disabled and recorded in `pm.failures`, as in real use.

    Args:
        pm: the manager to check; bryo's current one by default.
        **arguments: real values for hook arguments a probe cannot stand for, by name,
            over those the hooks' owners gave `add_probe_arguments` (the `bryo` command
            gives each plugin of `bryo_cli_commands` its own `commands` facade).

    Returns:
        The failures added to `pm.failures`: plugins that failed to load, raised in a
        hook, or answered something the hook's owner (or the probe) does not allow.

    >>> from bryo_plugins import new_plugin_manager
    >>> probe_plugins(new_plugin_manager(load=False, builtins=False))
    []
    """
    pm = get_plugin_manager() if pm is None else pm
    before = len(pm.failures)
    pm.load_all()
    refresh_caches(pm)
    for name, caller in sorted(vars(pm.hook).items()):
        if not isinstance(caller, pluggy.HookCaller) or caller.spec is None:
            continue
        names = caller.spec.argnames
        given = {**_registered.get(name, {}), **arguments}
        probed = [arg for arg in names if arg not in given]
        values = {arg: given[arg] if arg in given else Probe(arg) for arg in names}
        validate: Validate[object] = _answers_nothing if probed else _anything
        # Not `answers`: a hook argument named `family` or `keys` would clash with its options.
        for impl in call_order(pm, name):
            ask(pm, impl, name, validate, values)
    return pm.failures[before:]
