"""bryo_pytree: paths, prefix broadcasting and pytree dataclasses, on `jax.tree_util`.

Paths are plain tuples of keys (`('layers', 0, 'kernel')`) converted from jax key paths,
prefix trees broadcast the way `vmap`'s `in_axes` do, and `pytree_dataclass` registers
classes whose unflatten never calls `__init__`. `is_array` (with `is_array_like` and
`is_shaped`) is the one test for arrays, `safe_equal` the one equality that never
raises and `forward_operators` the one way wrappers of arrays (a `Variable`, a
`NamedArray`) forward Python's operators, for every bryo package; `run_frames` walks
nested structures of any depth without recursing and `BoundedCache` keeps the most
recently used traces (building blocks of bryo's packages).
bryo's plugin system lives in `bryo_plugins`; `bryo_pytree.hookimpl` and
`bryo_pytree.hookspec` remain as deprecated aliases of its markers, so that plugins
written for bryo 0.1's first layout keep loading.
"""

from ._arrays import is_array as is_array
from ._arrays import is_array_like as is_array_like
from ._arrays import is_shaped as is_shaped
from ._cache import BoundedCache as BoundedCache
from ._dataclass import field as field
from ._dataclass import pytree_dataclass as pytree_dataclass
from ._dataclass import static_field as static_field
from ._display import describe_leaf as describe_leaf
from ._display import tree_display as tree_display
from ._equality import safe_equal as safe_equal
from ._frames import run_frames as run_frames
from ._hashable import ByIdentity as ByIdentity
from ._hashable import ByValue as ByValue
from ._hashable import hashable as hashable
from ._hashable import unwrap_hashable as unwrap_hashable
from ._operators import ARITHMETIC_OPERATORS as ARITHMETIC_OPERATORS
from ._operators import COMPARISON_OPERATORS as COMPARISON_OPERATORS
from ._operators import CONVERSION_OPERATORS as CONVERSION_OPERATORS
from ._operators import UNARY_OPERATORS as UNARY_OPERATORS
from ._operators import forward_operators as forward_operators
from ._paths import Key as Key
from ._paths import Path as Path
from ._paths import PyTreeDef as PyTreeDef
from ._paths import flatten_to_paths as flatten_to_paths
from ._paths import flatten_with_treedef as flatten_with_treedef
from ._paths import key_to_plain as key_to_plain
from ._paths import keypath_to_path as keypath_to_path
from ._paths import path_str as path_str
from ._paths import path_to_keypath as path_to_keypath
from ._paths import unflatten_paths as unflatten_paths
from ._prefix import PrefixError as PrefixError
from ._prefix import broadcast_prefix as broadcast_prefix
from ._prefix import tree_map_with_prefix as tree_map_with_prefix

__version__ = "0.1.0"

# Plugins written against bryo 0.1's first layout import their markers from here.
_MOVED_TO_BRYO_PLUGINS = frozenset({"hookimpl", "hookspec"})


def __getattr__(name: str) -> object:
    if name in _MOVED_TO_BRYO_PLUGINS:
        import warnings

        import bryo_plugins

        warnings.warn(
            f"`bryo_pytree.{name}` moved to `bryo_plugins.{name}`; import it from there "
            "(the alias will be removed in bryo 0.2).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(bryo_plugins, name)
    raise AttributeError(f"module 'bryo_pytree' has no attribute {name!r}")
