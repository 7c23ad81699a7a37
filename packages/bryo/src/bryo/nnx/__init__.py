"""`from bryo import nnx`: Flax NNX's names over bryo's packages (seeds 000 and 002).

A facade only: every name lives in a core package or the NNX-style backend. Code written
for `from flax import nnx` runs with the import line changed.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from bryo_filters import All as All
from bryo_filters import Any as Any
from bryo_filters import Everything as Everything
from bryo_filters import Not as Not
from bryo_filters import Nothing as Nothing
from bryo_filters import OfType as OfType
from bryo_filters import PathContains as PathContains
from bryo_filters import PathIn as PathIn
from bryo_filters import WithTag as WithTag
from bryo_graph import BatchStat as BatchStat
from bryo_graph import Cache as Cache
from bryo_graph import GraphDef as GraphDef
from bryo_graph import GraphObject as Object
from bryo_graph import GraphState as GraphState
from bryo_graph import Intermediate as Intermediate
from bryo_graph import Param as Param
from bryo_graph import Pytree as Pytree
from bryo_graph import ShardingError as ShardingError
from bryo_graph import State as State
from bryo_graph import TraceContextError as TraceContextError
from bryo_graph import Variable as Variable
from bryo_graph import VariableState as VariableState
from bryo_graph import clone as clone
from bryo_graph import data as data
from bryo_graph import get_named_sharding as get_named_sharding
from bryo_graph import get_partition_spec as get_partition_spec
from bryo_graph import graph as graph
from bryo_graph import graphdef as graphdef
from bryo_graph import has_data as has_data
from bryo_graph import is_data as is_data
from bryo_graph import iter_graph as iter_graph
from bryo_graph import logical_to_mesh as logical_to_mesh
from bryo_graph import merge as merge
from bryo_graph import pop as pop
from bryo_graph import register_data_type as register_data_type
from bryo_graph import set_graph_mode as set_graph_mode
from bryo_graph import set_graph_updates as set_graph_updates
from bryo_graph import shard as shard
from bryo_graph import sharded_init as sharded_init
from bryo_graph import split as split
from bryo_graph import state as state
from bryo_graph import static as static
from bryo_graph import unpack as unpack
from bryo_graph import update as update
from bryo_graph import variables as variables
from bryo_nnx import BatchNorm as BatchNorm
from bryo_nnx import Conv as Conv
from bryo_nnx import ConvTranspose as ConvTranspose
from bryo_nnx import Dropout as Dropout
from bryo_nnx import Embed as Embed
from bryo_nnx import LayerNorm as LayerNorm
from bryo_nnx import Linear as Linear
from bryo_nnx import LinearGeneral as LinearGeneral
from bryo_nnx import Module as Module
from bryo_nnx import MultiHeadAttention as MultiHeadAttention
from bryo_nnx import RMSNorm as RMSNorm
from bryo_nnx import avg_pool as avg_pool
from bryo_nnx import celu as celu
from bryo_nnx import combine_masks as combine_masks
from bryo_nnx import display as display
from bryo_nnx import dot_product_attention as dot_product_attention
from bryo_nnx import dot_product_attention_weights as dot_product_attention_weights
from bryo_nnx import elu as elu
from bryo_nnx import gelu as gelu
from bryo_nnx import glu as glu
from bryo_nnx import hard_sigmoid as hard_sigmoid
from bryo_nnx import hard_silu as hard_silu
from bryo_nnx import hard_swish as hard_swish
from bryo_nnx import hard_tanh as hard_tanh
from bryo_nnx import identity as identity
from bryo_nnx import leaky_relu as leaky_relu
from bryo_nnx import log_sigmoid as log_sigmoid
from bryo_nnx import log_softmax as log_softmax
from bryo_nnx import logsumexp as logsumexp
from bryo_nnx import make_attention_mask as make_attention_mask
from bryo_nnx import make_causal_mask as make_causal_mask
from bryo_nnx import max_pool as max_pool
from bryo_nnx import min_pool as min_pool
from bryo_nnx import mish as mish
from bryo_nnx import one_hot as one_hot
from bryo_nnx import pool as pool
from bryo_nnx import relu as relu
from bryo_nnx import relu6 as relu6
from bryo_nnx import selu as selu
from bryo_nnx import sigmoid as sigmoid
from bryo_nnx import silu as silu
from bryo_nnx import soft_sign as soft_sign
from bryo_nnx import softmax as softmax
from bryo_nnx import softplus as softplus
from bryo_nnx import standardize as standardize
from bryo_nnx import swish as swish
from bryo_nnx import tanh as tanh
from bryo_rngs import RngCount as RngCount
from bryo_rngs import RngKey as RngKey
from bryo_rngs import Rngs as Rngs
from bryo_rngs import RngState as RngState
from bryo_rngs import RngStream as RngStream
from bryo_rngs import RngTraceError as RngTraceError
from bryo_rngs import fork_rngs as fork_rngs
from bryo_rngs import reseed as reseed
from bryo_rngs import restore_rngs as restore_rngs
from bryo_rngs import split_rngs as split_rngs
from bryo_rngs import split_rngs_in_place as split_rngs_in_place
from bryo_transforms import Carry as Carry
from bryo_transforms import StateAxes as StateAxes
from bryo_transforms import grad as grad
from bryo_transforms import jit as jit
from bryo_transforms import remat as remat
from bryo_transforms import scan as scan
from bryo_transforms import value_and_grad as value_and_grad
from bryo_transforms import vmap as vmap

from .._mesh_spec import parse_mesh_spec as parse_mesh_spec

# isort: split
# Layers and training helpers (issue 13; owner: layers). Keep other additions out of this block.
from bryo_graph import Dict as Dict
from bryo_graph import List as List
from bryo_nnx import RNN as RNN
from bryo_nnx import Bidirectional as Bidirectional
from bryo_nnx import CallInfo as CallInfo
from bryo_nnx import Einsum as Einsum
from bryo_nnx import GroupNorm as GroupNorm
from bryo_nnx import GRUCell as GRUCell
from bryo_nnx import InstanceNorm as InstanceNorm
from bryo_nnx import LoRA as LoRA
from bryo_nnx import LoRALinear as LoRALinear
from bryo_nnx import LoRAParam as LoRAParam
from bryo_nnx import LSTMCell as LSTMCell
from bryo_nnx import OptimizedLSTMCell as OptimizedLSTMCell
from bryo_nnx import PReLU as PReLU
from bryo_nnx import RNNCellBase as RNNCellBase
from bryo_nnx import Sequential as Sequential
from bryo_nnx import SimpleCell as SimpleCell
from bryo_nnx import SpectralNorm as SpectralNorm
from bryo_nnx import WeightNorm as WeightNorm
from bryo_nnx import tabulate as tabulate
from bryo_nnx.initializers import Initializer as Initializer
from bryo_training import Metric as Metric
from bryo_training import ModelAndOptimizer as ModelAndOptimizer
from bryo_training import MultiMetric as MultiMetric
from bryo_training import OptArray as OptArray
from bryo_training import Optimizer as Optimizer
from bryo_training import OptState as OptState
from bryo_training import OptVariable as OptVariable
from bryo_training import TrainState as TrainState

from . import nn as nn
from . import training as training
from .nn import initializers as initializers
from .training import metrics as metrics
from .training import optimizer as optimizer

# isort: split
# Control flow, transforms and module helpers (issue 13.3; owner: nnxapi).
from typing import TypeVar as _TypeVar

from bryo_graph import State as _State
from bryo_graph import dataclass as dataclass
from bryo_graph import iter_children as iter_children
from bryo_graph import map as map
from bryo_graph import map_state as map_state
from bryo_graph import recursive_map as recursive_map
from bryo_nnx import Perturbation as Perturbation
from bryo_nnx import capture as capture
from bryo_nnx import iter_module_children as iter_module_children
from bryo_nnx import iter_modules as iter_modules
from bryo_nnx import view as view
from bryo_nnx import view_info as view_info
from bryo_nnx import with_attributes as with_attributes
from bryo_rngs import with_rngs as with_rngs
from bryo_transforms import DiffState as DiffState
from bryo_transforms import StateSharding as StateSharding
from bryo_transforms import checkify as checkify
from bryo_transforms import cond as cond
from bryo_transforms import custom_vjp as custom_vjp
from bryo_transforms import eval_shape as eval_shape
from bryo_transforms import fori_loop as fori_loop
from bryo_transforms import jit_partial as jit_partial
from bryo_transforms import jvp as jvp
from bryo_transforms import make_jaxpr as make_jaxpr
from bryo_transforms import pmap as pmap
from bryo_transforms import prefix as prefix
from bryo_transforms import shard_map as shard_map
from bryo_transforms import switch as switch
from bryo_transforms import transform_metadata as transform_metadata
from bryo_transforms import vjp as vjp
from bryo_transforms import while_loop as while_loop

from . import compat as compat

# isort: split
# Variable metadata, sharding metadata and State helpers (issue 13; owner: vars).
from bryo_graph import PARTITION_NAME as PARTITION_NAME
from bryo_graph import VariableMetadata as VariableMetadata
from bryo_graph import as_abstract as as_abstract
from bryo_graph import as_pure as as_pure
from bryo_graph import filter_state as filter_state
from bryo_graph import from_flat_state as from_flat_state
from bryo_graph import get_abstract_model as get_abstract_model
from bryo_graph import logical_axis_rules as logical_axis_rules
from bryo_graph import replace_by_pure_dict as replace_by_pure_dict
from bryo_graph import restore_int_paths as restore_int_paths
from bryo_graph import set_metadata as set_metadata
from bryo_graph import split_state as split_state
from bryo_graph import to_flat_state as to_flat_state
from bryo_graph import to_pure_dict as to_pure_dict
from bryo_graph import use_eager_sharding as use_eager_sharding
from bryo_graph import using_eager_sharding as using_eager_sharding
from bryo_graph import with_metadata as with_metadata
from bryo_graph import with_partitioning as with_partitioning
from bryo_training import EMA as EMA

# isort: split
# Graph utilities, pytree markers and Variable names of Flax NNX 0.12 (issue 12; owner: core).
from bryo_graph import Data as Data
from bryo_graph import FlatState as FlatState
from bryo_graph import PureState as PureState
from bryo_graph import Static as Static
from bryo_graph import cached_partial as cached_partial
from bryo_graph import call as call
from bryo_graph import check_pytree as check_pytree
from bryo_graph import find_duplicates as find_duplicates
from bryo_graph import flatten as flatten
from bryo_graph import pure as pure
from bryo_graph import register_variable_name as register_variable_name
from bryo_graph import unflatten as unflatten
from bryo_graph import variable_name_from_type as variable_name_from_type
from bryo_graph import variable_type_from_name as variable_type_from_name

# isort: split
# Update contexts: split/merge across a function boundary (issue 13; owner: upctx).
from bryo_graph import MergeContext as MergeContext
from bryo_graph import SplitContext as SplitContext
from bryo_graph import UpdateContext as UpdateContext
from bryo_graph import current_update_context as current_update_context
from bryo_graph import merge_context as merge_context
from bryo_graph import split_context as split_context
from bryo_graph import update_context as update_context

from . import extract as extract
from .extract import NodeStates as NodeStates
from .extract import from_tree as from_tree
from .extract import to_tree as to_tree

# isort: split
# Array-ref backed Variables (issue 13; owner: vars).
from bryo_graph import var_defaults as var_defaults
from bryo_graph import vars_as as vars_as
from bryo_graph import with_vars as with_vars

from . import graphlib as graphlib
from . import spmd as spmd
from . import statelib as statelib
from . import variablelib as variablelib

# isort: split
# Flax NNX's module layout, for code importing from it (`from flax.nnx import rnglib`,
# `nnx.nn.linear.default_kernel_init`, `nnx.traversals.flatten_mapping`; issue 36).
from . import filterlib as filterlib
from . import helpers as helpers
from . import module as module
from . import pytreelib as pytreelib
from . import rnglib as rnglib
from . import summary as summary
from . import transforms as transforms
from . import traversals as traversals
from .spmd import abstract_with_sharding as abstract_with_sharding

merge_state = _State.merge
A = _TypeVar("A")
M = _TypeVar("M", bound=Module)

# isort: split
# Linen interop (owner: bridge): `nnx.bridge` imports Flax, so only when first used.
if _TYPE_CHECKING:
    from . import bridge as bridge


def __getattr__(name: str) -> object:
    if name == "bridge":
        import importlib

        return importlib.import_module(f"{__name__}.bridge")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
