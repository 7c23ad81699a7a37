"""Stage 3 of a lifted call: inside the transform, fresh arguments from traced values.

The pure function that the JAX transform sees gets flat lists of (traced) values. It
rebuilds new graphs from the call's `Signature` and those values, and the arguments
around them from their layouts, then calls the user's function on them. `Inner` records
what was built, so that `collect` can tell afterwards what the function changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from bryo_graph import State, VariableState, unflatten

from ._plan import Signature, index_objects


class Inner:
    """The objects a pure function built from a signature: roots and values by index.

    Attributes:
        sig: the call's Signature.
        built: GraphDef index -> the node or Variable built for it.
        roots: the graph roots built, in order.
        in_values: the State leaves' values the roots were built from.
    """

    __slots__ = ("built", "in_values", "roots", "sig")

    def __init__(self, sig: Signature, built: dict[int, object], roots: tuple, in_values: list):
        self.sig = sig
        self.built = built
        self.roots = roots
        self.in_values = in_values


def rebuild(sig: Signature, leaf_values: Sequence[object], arrays: Sequence[object]) -> tuple:
    """`(args, kwargs, inner)`: fresh arguments built from `sig` and the (traced) values."""
    flat = {
        path: value if meta is None else VariableState(meta.type, value, **meta.metadata)
        for path, meta, value in zip(sig.paths, sig.metas, leaf_values, strict=True)
    }
    pair = unflatten(sig.graphdef, State.from_flat_path(flat))
    built = index_objects(sig.graphdef, pair)
    roots, _ = pair
    roots_it, arrays_it = iter(roots), iter(arrays)
    args = tuple(layout.rebuild(roots_it, arrays_it) for layout in sig.layouts)
    kwargs = {name: layout.rebuild(roots_it, arrays_it) for name, layout in sig.kw_layouts}
    return args, kwargs, Inner(sig, built, roots, list(leaf_values))


def join_leaves(sig: Signature, var_values: Sequence, raw_values: Sequence) -> list:
    """Interleave Variable values and raw leaves back into State order."""
    var_it, raw_it = iter(var_values), iter(raw_values)
    return [next(raw_it) if meta is None else next(var_it) for meta in sig.metas]
