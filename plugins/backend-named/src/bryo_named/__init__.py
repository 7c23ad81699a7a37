"""bryo_named: named axes for JAX, in the style of Haliax.

An `Axis` is a name and a size; a `NamedArray` is a JAX array with one `Axis` per
dimension, registered as a pytree. Operations find axes by name: `x + y` lines axes up by
name, `sum(x, "Features")` reduces by name, `dot(x, w, axis="In")` contracts by name, and
`x["Time", 3]` indexes by name. A missing or repeated axis is an `AxisError` naming it.
The package's plugin teaches bryo_scan to scan, fold, map and stack over named axes, so
`bryo_scan.scan(f, "Time")(init, xs)` scans NamedArrays along "Time".
"""

from bryo_scan import tree_checkpoint_name as tree_checkpoint_name

from . import _methods as _methods  # NamedArray.sum, .dot, ... (attached there)
from . import nn as nn
from . import random as random
from ._axis import Axis as Axis
from ._axis import AxisError as AxisError
from ._axis import AxisSelection as AxisSelection
from ._axis import AxisSelector as AxisSelector
from ._axis import AxisSpec as AxisSpec
from ._axis import Shape as Shape
from ._axis import axis_name as axis_name
from ._axis import axis_sizes as axis_sizes
from ._axis import axis_spec_to_shape_dict as axis_spec_to_shape_dict
from ._axis import axis_spec_to_tuple as axis_spec_to_tuple
from ._axis import make_axes as make_axes
from ._named_array import NamedArray as NamedArray
from ._named_array import broadcast_axes as broadcast_axes
from ._named_array import named as named
from ._ops import abs as abs
from ._ops import absolute as absolute
from ._ops import add as add
from ._ops import all as all
from ._ops import allclose as allclose
from ._ops import angle as angle
from ._ops import any as any
from ._ops import arange as arange
from ._ops import arccos as arccos
from ._ops import arccosh as arccosh
from ._ops import arcsin as arcsin
from ._ops import arcsinh as arcsinh
from ._ops import arctan as arctan
from ._ops import arctanh as arctanh
from ._ops import argmax as argmax
from ._ops import argmin as argmin
from ._ops import argsort as argsort
from ._ops import around as around
from ._ops import array_equal as array_equal
from ._ops import array_equiv as array_equiv
from ._ops import broadcast_axis as broadcast_axis
from ._ops import broadcast_to as broadcast_to
from ._ops import cbrt as cbrt
from ._ops import ceil as ceil
from ._ops import clip as clip
from ._ops import concatenate as concatenate
from ._ops import cos as cos
from ._ops import cosh as cosh
from ._ops import cumprod as cumprod
from ._ops import cumsum as cumsum
from ._ops import divide as divide
from ._ops import dot as dot
from ._ops import equal as equal
from ._ops import exp as exp
from ._ops import expm1 as expm1
from ._ops import flatten as flatten
from ._ops import flatten_axes as flatten_axes
from ._ops import floor as floor
from ._ops import full as full
from ._ops import full_like as full_like
from ._ops import gelu as gelu
from ._ops import greater as greater
from ._ops import greater_equal as greater_equal
from ._ops import is_jax_or_hax_array_like as is_jax_or_hax_array_like
from ._ops import is_named_array as is_named_array
from ._ops import isclose as isclose
from ._ops import isfinite as isfinite
from ._ops import isinf as isinf
from ._ops import isnan as isnan
from ._ops import less as less
from ._ops import less_equal as less_equal
from ._ops import log as log
from ._ops import log1p as log1p
from ._ops import log2 as log2
from ._ops import log10 as log10
from ._ops import log_softmax as log_softmax
from ._ops import logical_and as logical_and
from ._ops import logical_not as logical_not
from ._ops import logical_or as logical_or
from ._ops import logsumexp as logsumexp
from ._ops import max as max
from ._ops import maximum as maximum
from ._ops import mean as mean
from ._ops import min as min
from ._ops import minimum as minimum
from ._ops import multiply as multiply
from ._ops import negative as negative
from ._ops import not_equal as not_equal
from ._ops import ones as ones
from ._ops import ones_like as ones_like
from ._ops import pad as pad
from ._ops import power as power
from ._ops import prod as prod
from ._ops import ravel as ravel
from ._ops import reciprocal as reciprocal
from ._ops import relu as relu
from ._ops import rename as rename
from ._ops import repeat as repeat
from ._ops import roll as roll
from ._ops import round as round
from ._ops import rsqrt as rsqrt
from ._ops import searchsorted as searchsorted
from ._ops import sigmoid as sigmoid
from ._ops import sign as sign
from ._ops import silu as silu
from ._ops import sin as sin
from ._ops import sinh as sinh
from ._ops import softmax as softmax
from ._ops import softplus as softplus
from ._ops import split as split
from ._ops import sqrt as sqrt
from ._ops import square as square
from ._ops import stack as stack
from ._ops import std as std
from ._ops import subtract as subtract
from ._ops import sum as sum
from ._ops import take as take
from ._ops import tan as tan
from ._ops import tanh as tanh
from ._ops import tile as tile
from ._ops import trace as trace
from ._ops import tril as tril
from ._ops import triu as triu
from ._ops import trunc as trunc
from ._ops import unflatten_axis as unflatten_axis
from ._ops import updated_slice as updated_slice
from ._ops import var as var
from ._ops import where as where
from ._ops import zeros as zeros
from ._ops import zeros_like as zeros_like
from ._rearrange import rearrange as rearrange
from ._sharding import infer_resource_partitions as infer_resource_partitions
from ._sharding import pspec_for_axis as pspec_for_axis
from ._sharding import shard as shard
from ._vmap import vmap as vmap

__version__ = "0.1.0"
