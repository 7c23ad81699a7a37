"""bryo_graph: Variables, State, GraphDef, and split/merge/state/update on any module style.

A model is a graph of nodes (modules of any registered backend, dicts, lists, tuples)
holding `Variable`s. `split(model, *filters)` separates its structure, a hashable
`GraphDef`, from its state, one `State` per filter; `merge` puts them back together,
shared references and cycles included; `update` writes a State into a live model. Node
types come from backends through the `bryo_graph_node_types` hook: the core itself
knows only dicts, lists and tuples, plus `Object`, the base of mutable NNX-style nodes,
and registers them as its built-in plugin `core-graph` when it is imported. The lifted
transforms over graphs (`jit`, `vmap`, `grad`, `scan`, ...) live in `bryo_transforms`,
built on `flat_graph` and the GraphDef entries exported here.
"""

from bryo_plugins import add_builtin as _add_builtin
from bryo_plugins import add_hookspecs as _add_hookspecs

from . import _plugin as _builtin_plugin
from . import extract as extract
from . import graph as graph
from . import hookspecs as _hookspecs
from . import traversals as traversals
from ._axis_filter import AxisLike as AxisLike
from ._axis_filter import WithAxis as WithAxis
from ._axis_rules import ShardingError as ShardingError
from ._axis_rules import add_sharding_axis as add_sharding_axis
from ._axis_rules import get_partition_spec as get_partition_spec
from ._axis_rules import logical_axes as logical_axes
from ._axis_rules import logical_to_mesh as logical_to_mesh
from ._caches import register_cache as register_cache
from ._compat import current_trace as current_trace
from ._compat import is_array_ref as is_array_ref
from ._eager_sharding import logical_axis_rules as logical_axis_rules
from ._eager_sharding import use_eager_sharding as use_eager_sharding
from ._eager_sharding import using_eager_sharding as using_eager_sharding
from ._entries import Entry as Entry
from ._entries import LeafEntry as LeafEntry
from ._entries import NodeEntry as NodeEntry
from ._entries import RefEntry as RefEntry
from ._entries import StaticEntry as StaticEntry
from ._entries import VariableEntry as VariableEntry
from ._errors import GraphError as GraphError
from ._errors import TraceContextError as TraceContextError
from ._fields import Data as Data
from ._fields import Static as Static
from ._fields import data as data
from ._fields import has_data as has_data
from ._fields import is_data as is_data
from ._fields import register_data_type as register_data_type
from ._fields import static as static
from ._graph import FlatGraph as FlatGraph
from ._graph import GraphDef as GraphDef
from ._graph import LeafSource as LeafSource
from ._graph import clear_caches as clear_caches
from ._graph import clone as clone
from ._graph import flat_graph as flat_graph
from ._graph import flatten_state as flatten_state
from ._graph import graphdef as graphdef
from ._graph import iter_graph as iter_graph
from ._graph import merge as merge
from ._graph import pop as pop
from ._graph import split as split
from ._graph import state as state
from ._graph import unpack as unpack
from ._graph import update as update
from ._graph import variables as variables
from ._graph_state import GraphState as GraphState
from ._helpers import PureState as PureState
from ._helpers import as_pure as as_pure
from ._helpers import cached_partial as cached_partial
from ._helpers import call as call
from ._helpers import dataclass as dataclass
from ._helpers import find_duplicates as find_duplicates
from ._helpers import iter_children as iter_children
from ._helpers import map as map
from ._helpers import map_state as map_state
from ._helpers import pure as pure
from ._helpers import recursive_map as recursive_map
from ._helpers import set_metadata as set_metadata
from ._helpers import vars_as as vars_as
from ._helpers import with_vars as with_vars
from ._modes import set_graph_mode as set_graph_mode
from ._modes import set_graph_updates as set_graph_updates
from ._nodes import NodeType as NodeType
from ._nodes import is_graph_node as is_graph_node
from ._nodes import node_type_of as node_type_of
from ._nodes import node_types as node_types
from ._object import Dict as Dict
from ._object import GraphObject as GraphObject
from ._object import List as List
from ._object import Object as Object
from ._object import Pytree as Pytree
from ._object import check_pytree as check_pytree
from ._object import in_its_trace as in_its_trace
from ._object import object_attributes as object_attributes
from ._object import object_node_type as object_node_type
from ._placement import get_named_sharding as get_named_sharding
from ._placement import make_mesh as make_mesh
from ._placement import shard as shard
from ._placement import sharded_init as sharded_init
from ._ref_maps import IndexMap as IndexMap
from ._ref_maps import RefMap as RefMap
from ._ref_maps import flatten as flatten
from ._ref_maps import unflatten as unflatten
from ._repr import SizeBytes as SizeBytes
from ._repr import format_bytes as format_bytes
from ._repr import render as render
from ._repr import variable_size as variable_size
from ._spmd import PARTITION_NAME as PARTITION_NAME
from ._spmd import add_axis as add_axis
from ._spmd import as_abstract as as_abstract
from ._spmd import get_abstract_model as get_abstract_model
from ._spmd import remove_axis as remove_axis
from ._spmd import with_partitioning as with_partitioning
from ._state import FlatState as FlatState
from ._state import State as State
from ._state import filter_state as filter_state
from ._state import from_flat_state as from_flat_state
from ._state import replace_by_pure_dict as replace_by_pure_dict
from ._state import restore_int_paths as restore_int_paths
from ._state import split_state as split_state
from ._state import to_flat_state as to_flat_state
from ._state import to_pure_dict as to_pure_dict
from ._to_tree import NodeStates as NodeStates
from ._to_tree import clear_non_graph_nodes as clear_non_graph_nodes
from ._to_tree import from_tree as from_tree
from ._to_tree import to_tree as to_tree
from ._tracking import structure_changed as structure_changed
from ._tree_mode import TreeDef as TreeDef
from ._tree_mode import TreeNodeDef as TreeNodeDef
from ._tree_mode import check_tree as check_tree
from ._update_context import ArrayRefOutput as ArrayRefOutput
from ._update_context import MergeContext as MergeContext
from ._update_context import NoUpdate as NoUpdate
from ._update_context import SplitContext as SplitContext
from ._update_context import UpdateContext as UpdateContext
from ._update_context import current_update_context as current_update_context
from ._update_context import merge_context as merge_context
from ._update_context import split_context as split_context
from ._update_context import update_context as update_context
from ._var_defaults import VarDefaults as VarDefaults
from ._var_defaults import var_defaults as var_defaults
from ._variable_names import register_variable_name as register_variable_name
from ._variable_names import variable_name_from_type as variable_name_from_type
from ._variable_names import variable_type_from_name as variable_type_from_name
from ._variables import BatchStat as BatchStat
from ._variables import Cache as Cache
from ._variables import HijaxVariable as HijaxVariable
from ._variables import Intermediate as Intermediate
from ._variables import Param as Param
from ._variables import Variable as Variable
from ._variables import VariableMeta as VariableMeta
from ._variables import VariableMetadata as VariableMetadata
from ._variables import VariableState as VariableState
from ._variables import made_in_another_trace as made_in_another_trace
from ._variables import raw_value_getter as raw_value_getter
from ._variables import with_metadata as with_metadata

_add_hookspecs(_hookspecs)
_add_builtin(_builtin_plugin, name="core-graph", distribution="bryo-core-graph")

__version__ = "0.1.0"
