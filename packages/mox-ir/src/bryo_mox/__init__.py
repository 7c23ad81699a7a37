"""bryo_mox: MoX, module expressions over jaxprs.

`make_mox(f)(*args)` traces `f` into a tree of `module_call` nodes (reported by backend
plugins) whose leaves are jaxpr equations; `eval_mox` evaluates it under any JAX
transformation; `query` selects nodes with XPath 1.0; `sub` rewrites them; `dumps`/`loads`
serialize through serializer plugins (XML, YSON). See `docs/mox.md`.
"""

from bryo_plugins import add_hookspecs as _add_hookspecs

from . import document as document
from . import hookspecs as _hookspecs
from . import interception as interception
from ._caches import clear_caches as clear_caches
from ._dialect import tokenize_xpath as tokenize_xpath
from ._errors import MoxError as MoxError
from ._errors import MoxLimitError as MoxLimitError
from ._errors import MoxSerializationError as MoxSerializationError
from ._errors import MoxTypeError as MoxTypeError
from ._eval import eval_mox as eval_mox
from ._hooks import CallHandler as CallHandler
from ._hooks import Interceptor as Interceptor
from ._hooks import Serializer as Serializer
from ._ir import Block as Block
from ._ir import Equation as Equation
from ._ir import Expr as Expr
from ._ir import ModuleCall as ModuleCall
from ._ir import ModuleInfo as ModuleInfo
from ._ir import Mox as Mox
from ._ir import Node as Node
from ._ir import Region as Region
from ._limits import Limits as Limits
from ._pretty import pformat as pformat
from ._serialize import dump as dump
from ._serialize import dumps as dumps
from ._serialize import load as load
from ._serialize import loads as loads
from ._sub import sub as sub
from ._symbols import Literal as Literal
from ._symbols import Symbol as Symbol
from ._symbols import Var as Var
from ._trace import make_mox as make_mox
from ._view import XPath as XPath
from ._view import query as query
from ._yax import dump_xml as dump_xml
from ._yax import dump_yson as dump_yson
from ._yax import map_mox as map_mox

_add_hookspecs(_hookspecs)

__version__ = "0.1.0"
