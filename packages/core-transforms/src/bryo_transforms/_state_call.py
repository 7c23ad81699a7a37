"""Calls that keep their graphs' structure: every State leaf in, every State leaf out.

Control flow (`cond`, `switch`, `while_loop`, `fori_loop`) and `checkify` need a function
whose outputs have the same structure whatever it does: every branch of `jax.lax.cond`
and every step of a loop must return the same pytree. `StateCall` plans one call (the
arguments' layouts, their graph roots flattened together as the other transforms do)
and, inside the JAX primitive, rebuilds the arguments, runs the user's function and
returns the value of *every* State leaf of the argument graphs, after checking that the
function kept their structure and their Variables (new attributes, replaced Variables or
changed metadata are errors naming the place: create them before the call). Back
outside, `write` stores the values into the caller's Variables and raw leaves. A raw
leaf of an immutable node (an Equinox module's array) cannot be written: it is left as it
was when the function kept it (the same value came back), and a loop whose carry holds
nothing but immutable nodes comes back rebuilt from its final values, as `jax.lax` loops
give back an Equinox model.

Graph nodes a branch returns must be among its arguments' graphs; they come back as the
caller's own objects. A loop's carry keeps its layout, its graphs being the same objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from bryo_graph import check_tree, flat_graph
from bryo_pytree import is_array_like

from ._collect import Static
from ._errors import TransformError
from ._layout import is_graph_leaf, scan_args
from ._plan import CallPlan, build_plan, meta_of
from ._rebuild import Inner, rebuild


def _is_plain_pytree(node: object) -> bool:
    """Whether `node` is a JAX pytree of immutable graph nodes holding no Variables (an
    Equinox model): what a branch returns of it needs no writing back."""
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(node)):
        return False
    flat = flat_graph(node)
    return not flat.nodes and all(source.variable is None for source in flat.sources)


class _Root:
    """A graph node returned by a branch: the GraphDef index of the argument node it is."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Root) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("root", self.index))


class StateCall:
    """One call of a structure-keeping transform named `name` on `args`/`kwargs`.

    Attributes:
        name: the transform, as error messages name it (`'cond'`, `'while_loop'`).
        plan: the `CallPlan` of the arguments' graph roots.
        arrays: the arguments' array leaves (traced alongside the State leaves).
    """

    def __init__(self, name: str, args: tuple, kwargs: dict | None = None, *, tree: bool = False):
        kwargs = kwargs or {}
        if tree:
            check_tree((args, kwargs), name=name)
        self.name = name
        self.key, roots, self.arrays = scan_args(args, kwargs)
        self.plan: CallPlan = build_plan(self.key, roots)
        # Raw leaves of immutable nodes, and those a trace of the function replaced.
        self.fixed = frozenset(
            k
            for k, s in enumerate(self.plan.sources)
            if s.variable is None and (s.parent_type is None or s.parent_type.set_key is None)
        )
        self.fixed_changed: set[int] = set()

    @property
    def all_fixed(self) -> bool:
        """Whether every State leaf is a raw leaf of an immutable node (an Equinox model)."""
        return len(self.fixed) == len(self.plan.sources)

    def leaves(self) -> list:
        """The current value of every State leaf of the arguments' graphs."""
        return self.plan.leaf_values()

    def rebuild(self, leaves: Sequence, arrays: Sequence) -> tuple[tuple, dict, Inner]:
        """Inside the primitive: `(args, kwargs, inner)` built from traced values."""
        return rebuild(self.plan.sig, leaves, arrays)

    def leaves_after(self, inner: Inner, roots: Sequence[object] | None = None) -> list:
        """The State leaves of `roots` (default: the rebuilt arguments' roots) after the
        user's function, checked to be the rebuilt graphs with new values only; notes the
        raw leaves of immutable nodes that are not the values they were built from."""
        sig = self.plan.sig
        roots = inner.roots if roots is None else tuple(roots)
        post = flat_graph((tuple(roots), ()))
        if post.graphdef != sig.graphdef:
            raise TransformError(
                f"`{self.name}` needs its function to keep the structure of the graphs it is "
                "given (same nodes, attributes and Variables); it changed. Create new "
                f"attributes and Variables before calling `{self.name}`, and return the "
                "modules you were given."
            )
        expected = {k: inner.built[index] for index, k in sig.leaf_of_variable.items()}
        for k, (source, meta) in enumerate(zip(post.sources, sig.metas, strict=True)):
            variable = source.variable
            if variable is None:
                continue
            if variable is not expected.get(k):
                raise TransformError(
                    f"`{self.name}`: {sig.describe_leaf(k)} is a new Variable after the "
                    f"function; inside `{self.name}` assign values (`v[...] = x`), not new "
                    "Variables."
                )
            if meta_of(variable) != meta:
                raise TransformError(
                    f"`{self.name}`: the metadata of {sig.describe_leaf(k)} changed inside "
                    f"the function; set metadata before calling `{self.name}`."
                )
        values = [s.variable.raw_value if s.variable is not None else s.value for s in post.sources]
        self.fixed_changed.update(k for k in self.fixed if values[k] is not inner.in_values[k])
        return values

    def write(self, leaves: Sequence) -> None:
        """Outside: store the final value of every State leaf into the caller's graphs."""
        written = [k for k in range(len(leaves)) if k not in self.fixed or k in self.fixed_changed]
        with self.plan.writing(written, self.name):
            for k in written:
                self.plan.write(k, leaves[k])

    # Branch outputs --------------------------------------------------------------------

    def wrap_output(self, inner: Inner, out: object) -> object:
        """`out` with its graph nodes (which must be argument nodes) made static; a node
        that is a plain immutable pytree (an Equinox model, no Variables in it) leaves as
        `jax.lax.cond` gives it, its arrays traced and the rest static."""
        if not any(is_graph_leaf(leaf) for leaf in jax.tree.leaves(out, is_leaf=is_graph_leaf)):
            return out
        index_of = {id(obj): index for index, obj in inner.built.items()}

        def wrap(leaf: object) -> object:
            if not is_graph_leaf(leaf):
                return leaf
            if _is_plain_pytree(leaf):
                return jax.tree.map(lambda v: v if is_array_like(v) else Static(v), leaf)
            index = index_of.get(id(leaf))
            if index is None:
                raise TransformError(
                    f"`{self.name}` returned a {type(leaf).__name__} that is not one of its "
                    "arguments' graph nodes; create new modules outside, or return arrays."
                )
            return Static(_Root(index))

        return jax.tree.map(wrap, out, is_leaf=is_graph_leaf)

    def unwrap_output(self, out: object) -> object:
        """The caller's objects in place of the static markers of `wrap_output`."""
        objects = self.plan.objects

        def unwrap(leaf: object) -> object:
            if not isinstance(leaf, Static):
                return leaf
            value = leaf.value
            return objects[value.index] if isinstance(value, _Root) else value

        return jax.tree.map(unwrap, out, is_leaf=lambda x: isinstance(x, Static))

    def branch(self, f: Callable[..., Any]) -> Callable[[list, list], tuple]:
        """`f` as a function `(leaves, arrays) -> (leaves, output)` of the call's values."""

        def run(leaves: list, arrays: list) -> tuple:
            args, kwargs, inner = self.rebuild(leaves, arrays)
            out = f(*args, **kwargs)
            return self.leaves_after(inner), self.wrap_output(inner, out)

        return run
