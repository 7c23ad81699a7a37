"""bryo_plugins: bryo's one plugin system, and nothing else.

The lowest bryo package; it needs pluggy only and never imports JAX. It owns the one
`pluggy.PluginManager("bryo")` (`get_plugin_manager`), the `hookspec`/`hookimpl` markers
every package and plugin uses, the `TypeTable` core packages build from hook results, and
the `CallRouter` backends wrap their module calls with so that tools such as `make_mox`
can intercept them. See `docs/plugins.md`.
"""

from ._call_router import CallRouter as CallRouter
from ._call_router import original_call as original_call
from ._hook_tables import TypeTable as TypeTable
from ._hook_tables import merge_mappings as merge_mappings
from ._manager import AUTOLOAD_ENV as AUTOLOAD_ENV
from ._manager import BLOCK_ENV as BLOCK_ENV
from ._manager import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._manager import BryoPluginManager as BryoPluginManager
from ._manager import PluginError as PluginError
from ._manager import PluginFailure as PluginFailure
from ._manager import PluginInfo as PluginInfo
from ._manager import add_hookspecs as add_hookspecs
from ._manager import describe_plugins as describe_plugins
from ._manager import get_plugin_manager as get_plugin_manager
from ._manager import hookimpl as hookimpl
from ._manager import hookspec as hookspec
from ._manager import new_plugin_manager as new_plugin_manager
from ._manager import plugin_failures as plugin_failures
from ._manager import use_plugin_manager as use_plugin_manager

__version__ = "0.1.0"
