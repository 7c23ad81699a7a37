"""bryo_nnx: the NNX-style backend — mutable `Module`s holding `Variable`s.

Modules are ordinary Python objects; their Variables, submodules (alone, or in lists and
dicts) and static attributes form a graph that bryo's graph functions split into a
GraphDef and States and merge back. `bryo.nnx` is the facade that gathers this backend
and the core packages under Flax NNX's names.
"""

from ._module import Module as Module

__version__ = "0.1.0"
