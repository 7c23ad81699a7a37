"""`from bryo import hax`: Haliax's names over bryo's named-axis backend and core-scan.

A facade only (seed 003): NamedArrays and their operations come from `bryo_named`,
`scan`/`fold`/`map` and the checkpoint policies from `bryo_scan`, `hax.nn.Stacked` and
friends from `bryo_scan` too. Code written for `import haliax as hax` runs with the import
line changed, including Haliax's module paths: `hax.nn.scan` (`Stacked`, `BlockSeq`),
`hax.jax_utils` (`tree_checkpoint_name`), `hax.util` (`is_named_array`), `hax.state_dict`
(torch-style state dicts and safetensors files) and `hax.axis`
(`axis_spec_to_shape_dict`, ...) are modules of their own here too.
"""

from bryo_named import Axis as Axis
from bryo_named import AxisError as AxisError
from bryo_named import AxisSelection as AxisSelection
from bryo_named import AxisSelector as AxisSelector
from bryo_named import AxisSpec as AxisSpec
from bryo_named import NamedArray as NamedArray
from bryo_named import Shape as Shape
from bryo_named import abs as abs
from bryo_named import absolute as absolute
from bryo_named import add as add
from bryo_named import all as all
from bryo_named import allclose as allclose
from bryo_named import angle as angle
from bryo_named import any as any
from bryo_named import arange as arange
from bryo_named import arccos as arccos
from bryo_named import arccosh as arccosh
from bryo_named import arcsin as arcsin
from bryo_named import arcsinh as arcsinh
from bryo_named import arctan as arctan
from bryo_named import arctanh as arctanh
from bryo_named import argmax as argmax
from bryo_named import argmin as argmin
from bryo_named import argsort as argsort
from bryo_named import around as around
from bryo_named import array_equal as array_equal
from bryo_named import array_equiv as array_equiv
from bryo_named import axis_sizes as axis_sizes
from bryo_named import bincount as bincount
from bryo_named import broadcast_axes as broadcast_axes
from bryo_named import broadcast_axis as broadcast_axis
from bryo_named import broadcast_to as broadcast_to
from bryo_named import cbrt as cbrt
from bryo_named import ceil as ceil
from bryo_named import clip as clip
from bryo_named import concatenate as concatenate
from bryo_named import cos as cos
from bryo_named import cosh as cosh
from bryo_named import cumprod as cumprod
from bryo_named import cumsum as cumsum
from bryo_named import dblock as dblock
from bryo_named import divide as divide
from bryo_named import dot as dot
from bryo_named import ds as ds
from bryo_named import dslice as dslice
from bryo_named import equal as equal
from bryo_named import exp as exp
from bryo_named import expm1 as expm1
from bryo_named import flatten as flatten
from bryo_named import flatten_axes as flatten_axes
from bryo_named import floor as floor
from bryo_named import full as full
from bryo_named import full_like as full_like
from bryo_named import gelu as gelu
from bryo_named import greater as greater
from bryo_named import greater_equal as greater_equal
from bryo_named import index as index
from bryo_named import infer_resource_partitions as infer_resource_partitions
from bryo_named import is_jax_or_hax_array_like as is_jax_or_hax_array_like
from bryo_named import is_named_array as is_named_array
from bryo_named import isclose as isclose
from bryo_named import isfinite as isfinite
from bryo_named import isinf as isinf
from bryo_named import isnan as isnan
from bryo_named import less as less
from bryo_named import less_equal as less_equal
from bryo_named import log as log
from bryo_named import log1p as log1p
from bryo_named import log2 as log2
from bryo_named import log10 as log10
from bryo_named import log_softmax as log_softmax
from bryo_named import logical_and as logical_and
from bryo_named import logical_not as logical_not
from bryo_named import logical_or as logical_or
from bryo_named import logsumexp as logsumexp
from bryo_named import make_axes as make_axes
from bryo_named import max as max
from bryo_named import maximum as maximum
from bryo_named import mean as mean
from bryo_named import min as min
from bryo_named import minimum as minimum
from bryo_named import multiply as multiply
from bryo_named import named as named
from bryo_named import named_jit as named_jit
from bryo_named import negative as negative
from bryo_named import nonzero as nonzero
from bryo_named import not_equal as not_equal
from bryo_named import ones as ones
from bryo_named import ones_like as ones_like
from bryo_named import pad as pad
from bryo_named import power as power
from bryo_named import prod as prod
from bryo_named import pspec_for_axis as pspec_for_axis
from bryo_named import random as random
from bryo_named import ravel as ravel
from bryo_named import rearrange as rearrange
from bryo_named import reciprocal as reciprocal
from bryo_named import relu as relu
from bryo_named import rename as rename
from bryo_named import repeat as repeat
from bryo_named import roll as roll
from bryo_named import round as round
from bryo_named import rsqrt as rsqrt
from bryo_named import searchsorted as searchsorted
from bryo_named import shard as shard
from bryo_named import sigmoid as sigmoid
from bryo_named import sign as sign
from bryo_named import silu as silu
from bryo_named import sin as sin
from bryo_named import sinh as sinh
from bryo_named import softmax as softmax
from bryo_named import softplus as softplus
from bryo_named import split as split
from bryo_named import sqrt as sqrt
from bryo_named import square as square
from bryo_named import stack as stack
from bryo_named import std as std
from bryo_named import subtract as subtract
from bryo_named import sum as sum
from bryo_named import take as take
from bryo_named import tan as tan
from bryo_named import tanh as tanh
from bryo_named import tile as tile
from bryo_named import trace as trace
from bryo_named import tree_checkpoint_name as tree_checkpoint_name
from bryo_named import tril as tril
from bryo_named import triu as triu
from bryo_named import trunc as trunc
from bryo_named import unflatten_axis as unflatten_axis
from bryo_named import unique as unique
from bryo_named import unique_all as unique_all
from bryo_named import unique_counts as unique_counts
from bryo_named import unique_inverse as unique_inverse
from bryo_named import unique_values as unique_values
from bryo_named import updated_slice as updated_slice
from bryo_named import var as var
from bryo_named import vmap as vmap
from bryo_named import where as where
from bryo_named import zeros as zeros
from bryo_named import zeros_like as zeros_like
from bryo_scan import OffloadUnavailableError as OffloadUnavailableError
from bryo_scan import ScanAxisError as ScanAxisError
from bryo_scan import ScanCheckpointPolicy as ScanCheckpointPolicy
from bryo_scan import ScanOutputError as ScanOutputError
from bryo_scan import fold as fold
from bryo_scan import map as map
from bryo_scan import scan as scan

from . import axis as axis
from . import jax_utils as jax_utils
from . import nn as nn
from . import util as util
from ._missing import missing_name as _missing_name


def __getattr__(name: str) -> object:
    if name == "state_dict":  # imported on first use: it needs Equinox
        import importlib

        return importlib.import_module(f"{__name__}.state_dict")
    raise _missing_name(__name__, name)
