"""bryo_pytree: paths, prefix broadcasting, pytree dataclasses, and bryo's plugin system.

The lowest bryo package. Everything here is built on `jax.tree_util`: paths are plain
tuples of keys (`('layers', 0, 'kernel')`) converted from jax key paths, prefix trees
broadcast the way `vmap`'s `in_axes` do, and `pytree_dataclass` registers classes whose
unflatten never calls `__init__`. It also owns the one `pluggy.PluginManager("bryo")`
that every other package extends (see `docs/plugins.md`).
"""

from ._dataclass import field as field
from ._dataclass import pytree_dataclass as pytree_dataclass
from ._dataclass import static_field as static_field
from ._display import describe_leaf as describe_leaf
from ._display import tree_display as tree_display
from ._paths import Key as Key
from ._paths import Path as Path
from ._paths import flatten_to_paths as flatten_to_paths
from ._paths import flatten_with_treedef as flatten_with_treedef
from ._paths import key_to_plain as key_to_plain
from ._paths import keypath_to_path as keypath_to_path
from ._paths import path_str as path_str
from ._paths import path_to_keypath as path_to_keypath
from ._paths import unflatten_paths as unflatten_paths
from ._plugins import AUTOLOAD_ENV as AUTOLOAD_ENV
from ._plugins import BLOCK_ENV as BLOCK_ENV
from ._plugins import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._plugins import BryoPluginManager as BryoPluginManager
from ._plugins import PluginError as PluginError
from ._plugins import PluginFailure as PluginFailure
from ._plugins import PluginInfo as PluginInfo
from ._plugins import add_hookspecs as add_hookspecs
from ._plugins import describe_plugins as describe_plugins
from ._plugins import get_plugin_manager as get_plugin_manager
from ._plugins import hookimpl as hookimpl
from ._plugins import hookspec as hookspec
from ._plugins import new_plugin_manager as new_plugin_manager
from ._plugins import plugin_failures as plugin_failures
from ._plugins import use_plugin_manager as use_plugin_manager
from ._prefix import PrefixError as PrefixError
from ._prefix import broadcast_prefix as broadcast_prefix
from ._prefix import tree_map_with_prefix as tree_map_with_prefix
from ._routing import CallRouter as CallRouter
from ._routing import original_call as original_call
from ._tables import ByIdentity as ByIdentity
from ._tables import TypeTable as TypeTable
from ._tables import hashable as hashable
from ._tables import merge_mappings as merge_mappings
from ._tables import unwrap_hashable as unwrap_hashable

__version__ = "0.1.0"
