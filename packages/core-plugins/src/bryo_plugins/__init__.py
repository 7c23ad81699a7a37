"""bryo_plugins: bryo's one plugin system, and nothing else.

The lowest bryo package; it needs pluggy only and never imports JAX. It owns:

- the one `pluggy.PluginManager("bryo")` (`get_plugin_manager`) and the `hookspec` /
  `hookimpl` markers every package and plugin uses;
- how owners declare hooks (`add_hookspecs`) and register their own built-in plugins
  (`add_builtin`), and how entry points are loaded lazily, per hook family;
- how core code asks hooks (`answers`, `first_answer`, `hook_table`, `TypeTable`, and
  `PerEpoch`, the one cache of values made from hook answers): one
  plugin at a time, each answer validated, a failing plugin named, disabled and listed by
  `plugin_failures()`, conflicts warned with one precedence; and how core code names a
  plugin whose function (a `NodeType`'s `unflatten`) fails later (`callback_error`);
- the `CallRouter` backends wrap their module calls with, so that tools such as
  `make_mox` can intercept them, and `standing_in`, with which a transform says which
  module of the model a rebuilt copy it calls stands for;
- `probe_plugins`, which loads every plugin and asks each hook once (`bryo plugins`).

See `docs/plugins.md`.
"""

from ._call_router import CallRouter as CallRouter
from ._call_router import original_call as original_call
from ._call_router import standing_in as standing_in
from ._call_router import stood_in_for as stood_in_for
from ._callbacks import callback_error as callback_error
from ._calls import Answer as Answer
from ._calls import PerPlugin as PerPlugin
from ._calls import answers as answers
from ._calls import callable_answer as callable_answer
from ._calls import first_answer as first_answer
from ._calls import first_answer_about as first_answer_about
from ._calls import first_answer_for as first_answer_for
from ._calls import module_roots as module_roots
from ._describe import HookInfo as HookInfo
from ._describe import PluginInfo as PluginInfo
from ._describe import describe_hooks as describe_hooks
from ._describe import describe_plugins as describe_plugins
from ._entry_points import PluginEntry as PluginEntry
from ._failures import PluginCallbackError as PluginCallbackError
from ._failures import PluginConflictWarning as PluginConflictWarning
from ._failures import PluginError as PluginError
from ._failures import PluginFailure as PluginFailure
from ._failures import PluginResultError as PluginResultError
from ._hook_tables import PerEpoch as PerEpoch
from ._hook_tables import Stamped as Stamped
from ._hook_tables import TypeTable as TypeTable
from ._hook_tables import hook_table as hook_table
from ._hook_tables import merge_answers as merge_answers
from ._hook_tables import type_mapping as type_mapping
from ._manager import BryoPluginManager as BryoPluginManager
from ._manager import PluginSource as PluginSource
from ._manager import add_builtin as add_builtin
from ._manager import add_hookspecs as add_hookspecs
from ._manager import check_pending as check_pending
from ._manager import get_plugin_manager as get_plugin_manager
from ._manager import hookspec_sources as hookspec_sources
from ._manager import new_plugin_manager as new_plugin_manager
from ._manager import plugin_failures as plugin_failures
from ._manager import use_plugin_manager as use_plugin_manager
from ._markers import AUTOLOAD_ENV as AUTOLOAD_ENV
from ._markers import BLOCK_ENV as BLOCK_ENV
from ._markers import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._markers import hookimpl as hookimpl
from ._markers import hookspec as hookspec
from ._probe import Probe as Probe
from ._probe import add_probe_arguments as add_probe_arguments
from ._probe import probe_plugins as probe_plugins

__version__ = "0.1.0"
