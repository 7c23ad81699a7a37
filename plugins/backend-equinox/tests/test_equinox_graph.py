"""split/merge/state/graphdef/clone/update on `equinox.Module` models, against plain Equinox."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_equinox import FrozenList, filter_spec, updated
from bryo_filters import PathContains
from bryo_graph import (
    GraphDef,
    GraphError,
    Param,
    State,
    VariableState,
    clone,
    graphdef,
    iter_graph,
    merge,
    pop,
    split,
    state,
    update,
)

KEY = jax.random.key(0)
X = jnp.linspace(-1.0, 1.0, 3)


def leaves_equal(a, b) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return ta == tb and all(
        np.array_equal(x, y) if eqx.is_array(x) else x is y or x == y
        for x, y in zip(la, lb, strict=True)
    )


class Tower(eqx.Module):
    """Lists, dicts and tuples of layers, a static field, a non-array field."""

    blocks: list
    heads: dict
    scale: float
    name: str = eqx.field(static=True)

    def __init__(self, key, name="tower"):
        k1, k2, k3 = jax.random.split(key, 3)
        self.blocks = [eqx.nn.Linear(3, 3, key=k1), (eqx.nn.Linear(3, 3, key=k2),)]
        self.heads = {"out": eqx.nn.Linear(3, 2, key=k3), "id": eqx.nn.Identity()}
        self.scale = 0.5
        self.name = name

    def __call__(self, x):
        x = jnp.tanh(self.blocks[0](x))
        x = jnp.tanh(self.blocks[1][0](x))
        return self.heads["out"](self.heads["id"](x)) * self.scale


MLP = eqx.nn.MLP(3, 2, 4, 2, key=KEY)
TOWER = Tower(KEY)


@pytest.mark.parametrize("model", [MLP, TOWER], ids=["mlp", "tower"])
def test_merge_of_split_is_the_same_model(model):
    graphdef_, state_ = split(model)
    rebuilt = merge(graphdef_, state_)
    assert type(rebuilt) is type(model) and rebuilt is not model
    assert leaves_equal(rebuilt, model)
    assert jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(model)
    np.testing.assert_array_equal(rebuilt(X), model(X))


def test_paths_are_field_names_and_arrays_are_params():
    flat = state(MLP).flat_state()
    assert list(flat) == [
        (name, i, w) for name in ["layers"] for i in range(3) for w in ("weight", "bias")
    ]
    assert all(isinstance(v, VariableState) and v.type is Param for v in flat.values())
    assert set(state(TOWER).flat_state()) == {
        ("blocks", 0, "weight"),
        ("blocks", 0, "bias"),
        ("blocks", 1, 0, "weight"),
        ("blocks", 1, 0, "bias"),
        ("heads", "out", "weight"),
        ("heads", "out", "bias"),
    }


def test_containers_keep_their_types():
    rebuilt = clone(TOWER)
    assert type(rebuilt.blocks) is list and type(rebuilt.blocks[1]) is tuple
    assert type(rebuilt.heads) is dict and list(rebuilt.heads) == ["id", "out"]
    assert rebuilt.name == "tower" and rebuilt.scale == 0.5


def test_static_fields_live_in_the_graphdef():
    other = Tower(KEY, name="other")
    assert graphdef(TOWER) != graphdef(other)
    assert graphdef(TOWER) == graphdef(Tower(jax.random.key(1)))
    assert state(TOWER) != state(Tower(jax.random.key(1)))
    assert merge(graphdef(other), state(TOWER)).name == "other"
    assert isinstance(hash(graphdef(TOWER)), int)


def test_split_by_filters_matches_partition():
    _, biases, rest = split(MLP, PathContains("bias"), ...)
    assert all(path[-1] == "bias" for path in biases.flat_state())
    assert all(path[-1] == "weight" for path in rest.flat_state())
    _, params = split(MLP, Param)
    dynamic, _ = eqx.partition(MLP, eqx.is_array)
    assert [v.value for v in params.flat_state().values()] == jax.tree_util.tree_leaves(dynamic)


def test_clone_is_a_copy():
    copied = clone(TOWER)
    assert copied is not TOWER and copied.blocks[0] is not TOWER.blocks[0]
    assert leaves_equal(copied, TOWER)


def test_flattening_an_unchanged_model_is_cached():
    assert graphdef(TOWER) is graphdef(TOWER)
    assert isinstance(dict(iter_graph(TOWER))[("blocks",)], FrozenList)


def test_shared_submodules_stay_shared():
    shared = eqx.nn.Linear(2, 2, key=KEY)
    pair = eqx.nn.Sequential([shared, shared])
    graphdef_, state_ = split(pair)
    assert len(state_.flat_state()) == 2
    rebuilt = merge(graphdef_, state_)
    assert rebuilt.layers[0] is rebuilt.layers[1]


def test_update_refuses_equinox_models_and_changes_nothing():
    before = jax.tree_util.tree_leaves(TOWER)
    new = jax.tree_util.tree_map(lambda v: v + 1, state(TOWER))
    with pytest.raises(GraphError, match=r"immutable.*merge"):
        update(TOWER, new)
    with pytest.raises(GraphError, match=r"blocks\[0\]\.weight"):
        update(TOWER, new.filter(PathContains("blocks")))
    with pytest.raises(GraphError, match="cannot remove"):
        pop(TOWER, Param)
    assert all(a is b for a, b in zip(before, jax.tree_util.tree_leaves(TOWER), strict=True))


def test_updated_returns_a_new_model():
    params = state(MLP)
    doubled = jax.tree_util.tree_map(lambda v: 2 * v, params)
    model = updated(MLP, doubled.filter(PathContains(0)))
    np.testing.assert_array_equal(model.layers[0].weight, 2 * MLP.layers[0].weight)
    assert model.layers[1].weight is MLP.layers[1].weight
    with pytest.raises(GraphError, match=r"`updated` got paths.*nope"):
        updated(MLP, State({"nope": VariableState(Param, 1.0)}))


def test_works_under_jit_grad_and_vmap():
    graphdef_, params = split(MLP)

    @jax.jit
    def loss(params, x):
        return jnp.sum(merge(graphdef_, params)(x) ** 2)

    expected = eqx.filter_grad(lambda m, x: jnp.sum(m(x) ** 2))(MLP, X)
    grads = jax.grad(loss)(params, X)
    # Paired by path: a State that went through a JAX transform comes back in sorted path
    # order (as JAX's dicts do), not in the model's field order.
    expected_flat = split(expected)[1].flat_state()
    got_flat = grads.flat_state()
    assert set(got_flat) == set(expected_flat)
    for path, leaf in got_flat.items():
        np.testing.assert_allclose(leaf.value, expected_flat[path].value, rtol=1e-6)
    batched = jax.vmap(lambda x: merge(graphdef_, params)(x))(jnp.stack([X, X]))
    np.testing.assert_allclose(batched[1], MLP(X), rtol=1e-6)


def test_unusual_modules_round_trip():
    class Odd(eqx.Module):
        table: list = eqx.field(static=True)  # unhashable static: kept by identity
        weight: jax.Array

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        odd = Odd([1, 2], jnp.ones(2))
    rebuilt = clone(odd)
    assert rebuilt.table is odd.table and np.array_equal(rebuilt.weight, odd.weight)
    assert isinstance(hash(graphdef(odd)), int)

    jitted = eqx.filter_jit(lambda x: x * 2)  # a module carrying `__name__`, `__doc__`...
    again = clone(jitted)
    assert again.__wrapped__ is jitted.__wrapped__ and float(again(1.0)) == 2.0


# Hypothesis: random nests of containers and layers round-trip exactly. ------------------


class Holder(eqx.Module):
    content: object
    tag: int = eqx.field(static=True, default=0)


def _layer(seed):
    return eqx.nn.Linear(2, 2, key=jax.random.key(seed))


_arrays = st.integers(0, 3).map(lambda n: np.arange(n, dtype=np.float32))
_leaves = st.one_of(_arrays, st.integers(0, 5), st.none(), st.integers(0, 3).map(_layer))
_nests = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
        st.builds(Holder, inner, st.integers(0, 2)),
    ),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None)
@given(_nests)
def test_random_models_round_trip(content):
    model = Holder(content)
    graphdef_, state_ = split(model)
    assert isinstance(graphdef_, GraphDef)
    rebuilt = merge(graphdef_, state_)
    assert leaves_equal(rebuilt, model)
    assert jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(model)
    n_arrays = sum(eqx.is_array(leaf) for leaf in jax.tree_util.tree_leaves(model))
    assert len(state_.flat_state()) <= n_arrays  # fewer when layers are shared
    spec = filter_spec(model, ...)
    assert jax.tree_util.tree_leaves(spec) == [
        eqx.is_array(leaf) for leaf in jax.tree_util.tree_leaves(model)
    ]


def test_other_pytrees_inside_modules_are_seen_as_jax_sees_them():
    class Holds(eqx.Module):
        fn: jax.tree_util.Partial

    model = Holds(jax.tree_util.Partial(lambda scale, x: scale * x, jnp.full(2, 3.0)))
    graphdef_, state_ = split(model)
    assert [v.value for v in state_.flat_state().values()] == jax.tree_util.tree_leaves(model)
    rebuilt = merge(graphdef_, jax.tree_util.tree_map(lambda v: v * 2, state_))
    np.testing.assert_array_equal(rebuilt.fn(1.0), jnp.full(2, 6.0))
