"""`from bryo import mox as yax`: YAX's names over bryo's MoX package (seed 001).

A facade only: tracing, evaluation, XPath queries, rewriting and serialization live in
`bryo_mox`; the XML and YSON formats come from the serializer plugins.
"""

from bryo_mox import Block as Block
from bryo_mox import CallHandler as CallHandler
from bryo_mox import Equation as Equation
from bryo_mox import Expr as Expr
from bryo_mox import Interceptor as Interceptor
from bryo_mox import Literal as Literal
from bryo_mox import ModuleCall as ModuleCall
from bryo_mox import ModuleInfo as ModuleInfo
from bryo_mox import Mox as Mox
from bryo_mox import MoxError as MoxError
from bryo_mox import MoxSerializationError as MoxSerializationError
from bryo_mox import MoxTypeError as MoxTypeError
from bryo_mox import Node as Node
from bryo_mox import Region as Region
from bryo_mox import Serializer as Serializer
from bryo_mox import Symbol as Symbol
from bryo_mox import Var as Var
from bryo_mox import XPath as XPath
from bryo_mox import document as document
from bryo_mox import dump as dump
from bryo_mox import dump_xml as dump_xml
from bryo_mox import dump_yson as dump_yson
from bryo_mox import dumps as dumps
from bryo_mox import eval_mox as eval_mox
from bryo_mox import load as load
from bryo_mox import loads as loads
from bryo_mox import make_mox as make_mox
from bryo_mox import map_mox as map_mox
from bryo_mox import pformat as pformat
from bryo_mox import query as query
from bryo_mox import sub as sub
from bryo_mox import tokenize_xpath as tokenize_xpath
