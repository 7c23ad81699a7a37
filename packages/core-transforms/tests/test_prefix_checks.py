"""Every lifted transform checks its prefixes when it is built: no Variable in a prefix,
no live model as a graph-mode prefix, and no `StateAxes`/`StateSharding`/`DiffState` in
simple mode (Flax NNX raises the same ValueErrors)."""

import jax.numpy as jnp
import pytest

from bryo_filters import PathContains
from bryo_graph import Dict, Object, Param, Variable
from bryo_transforms import (
    Carry,
    DiffState,
    StateAxes,
    StateSharding,
    grad,
    jit,
    pmap,
    prefix,
    scan,
    vmap,
)


def identity(x):
    return x


@pytest.mark.parametrize("mode", [{}, {"graph_updates": False}, {"graph": False}])
@pytest.mark.parametrize(
    "build",
    [
        lambda v, mode: vmap(identity, in_axes=(v,), **mode),
        lambda v, mode: vmap(identity, out_axes=[v], **mode),
        lambda v, mode: pmap(identity, in_axes=(v,), **mode),
        lambda v, mode: scan(identity, in_axes=(Carry, v), **mode),
        lambda v, mode: jit(identity, in_shardings=(v,), **mode),
    ],
)
def test_a_variable_is_no_prefix(build, mode):
    with pytest.raises(ValueError, match=r"Variable at `\w+`\[\d\].*Variables prefixes are not"):
        build(Variable(0), mode)


@pytest.mark.parametrize(
    "build",
    [
        lambda m: vmap(identity, in_axes=m),
        lambda m: pmap(identity, out_axes=m),
        lambda m: scan(identity, in_axes=(Carry, m)),
        lambda m: grad(identity, argnums=m),
        lambda m: jit(identity, in_shardings=m),
    ],
)
def test_a_live_model_is_no_graph_mode_prefix(build):
    with pytest.raises(ValueError, match=r"Found a Dict at .*Graph nodes are not allowed"):
        build(Dict(a=Param(1)))


@pytest.mark.parametrize("mode", [{"graph_updates": False}, {"graph": False}])
@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (lambda mode: vmap(identity, in_axes=StateAxes({...: 0}), **mode), "StateAxes"),
        (lambda mode: pmap(identity, out_axes=(StateAxes({...: 0}),), **mode), "StateAxes"),
        (lambda mode: grad(identity, argnums=DiffState(0, PathContains("a")), **mode), "DiffState"),
        (lambda mode: jit(identity, in_shardings=StateSharding({...: 0}), **mode), "StateSharding"),
    ],
)
def test_mappings_need_graph_mode_with_updates(build, kind, mode):
    with pytest.raises(ValueError, match=f"cannot contain `{kind}` objects when `graph=False`"):
        build(mode)


def test_a_module_shaped_prefix_and_the_mappings_are_taken_in_graph_mode():
    class Model(Object):
        def __init__(self):
            self.w = Param(jnp.ones(3))

    vmap(identity, in_axes=(prefix(Model(), {...: 0}),))  # values in place of Variables
    vmap(identity, in_axes=(StateAxes({...: 0}),))
    grad(identity, argnums=DiffState(0, ...))
