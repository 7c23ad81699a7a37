"""`pytree_dataclass`: static fields in the treedef, and an unflatten that skips `__init__`.

Seed 004 ("Custom PyTrees and Initialization"): `vmap` rebuilds trees with `object()`
leaves and `jacobian` with whole trees as leaves, so an `__init__` that validates its
input breaks. These classes validate hard, and every transformation still works.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import GetAttrKey, tree_flatten_with_path, tree_leaves, tree_structure

from bryo_pytree import field, flatten_to_paths, pytree_dataclass, static_field

INIT_CALLS: list[str] = []


@pytree_dataclass
class Strict:
    """Seed 004's `MyTree`, hardened: `__init__` converts and validates, and counts calls."""

    a: jax.Array

    def __init__(self, a):
        INIT_CALLS.append("Strict")
        a = jnp.asarray(a)  # fails on `object()` and on a `Strict`, as in the seed
        if a.ndim != 1:
            raise ValueError(f"`a` must be a vector, got shape {a.shape}")
        object.__setattr__(self, "a", a)


@pytree_dataclass
class Affine:
    weight: jax.Array
    bias: jax.Array
    activation: str = static_field(default="relu")
    scale: float = field(static=True, default=1.0)

    def __post_init__(self):
        INIT_CALLS.append("Affine")
        if not isinstance(self.weight, jax.Array):
            raise TypeError("`weight` must be a jax.Array")

    def __call__(self, x):
        h = x @ self.weight
        y = self.scale * (h + jnp.broadcast_to(self.bias, h.shape))
        return jax.nn.relu(y) if self.activation == "relu" else y


@pytest.fixture
def no_init_calls():
    """Yields; afterwards asserts that nothing called `__init__` / `__post_init__`."""
    INIT_CALLS.clear()
    yield
    assert INIT_CALLS == [], "unflatten called __init__"


def make_affine(activation="relu"):
    weight = jnp.arange(6.0).reshape(3, 2) / 6
    return Affine(weight, jnp.array([0.5, -1.0]), activation=activation)


# --- structure -------------------------------------------------------------------------


def test_static_fields_live_in_the_treedef():
    model = make_affine()
    assert len(tree_leaves(model)) == 2
    assert tree_structure(model) != tree_structure(make_affine(activation="linear"))
    assert tree_structure(model) == tree_structure(
        Affine(jnp.zeros((3, 2)), jnp.zeros(2), activation="relu")
    )
    rebuilt = tree_structure(model).unflatten([1, 2])
    assert (rebuilt.weight, rebuilt.bias, rebuilt.activation, rebuilt.scale) == (
        1,
        2,
        "relu",
        1.0,
    )


def test_children_are_named_by_attribute():
    keys = [kp for kp, _ in tree_flatten_with_path(make_affine())[0]]
    assert keys == [(GetAttrKey("weight"),), (GetAttrKey("bias"),)]
    assert list(flatten_to_paths({"layer": make_affine()})) == [
        ("layer", "weight"),
        ("layer", "bias"),
    ]


def test_it_is_a_frozen_dataclass_by_default():
    model = make_affine()
    assert dataclasses.is_dataclass(model)
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.bias = jnp.zeros(2)
    assert dataclasses.replace(model, activation="linear").activation == "linear"


def test_frozen_false_allows_assignment():
    @pytree_dataclass(frozen=False)
    class Box:
        value: object
        tag: str = static_field(default="box")

    box = Box(1)
    box.value = 2
    assert tree_leaves(box) == [2]
    assert tree_structure(box).unflatten([3]).tag == "box"


def test_static_field_keeps_its_metadata_and_factory():
    @pytree_dataclass
    class Config:
        value: object
        names: tuple = static_field(default_factory=tuple, metadata={"doc": "names"})

    [names] = [f for f in dataclasses.fields(Config) if f.name == "names"]
    assert names.metadata["doc"] == "names"
    assert Config(1).names == ()


def test_unflatten_skips_init_and_post_init(no_init_calls):
    treedef = tree_structure(make_affine())
    strict_def = tree_structure(Strict(jnp.ones(3)))
    INIT_CALLS.clear()
    placeholder = object()
    rebuilt = treedef.unflatten([placeholder, placeholder])  # would fail `__post_init__`
    assert rebuilt.weight is placeholder and rebuilt.activation == "relu"
    assert strict_def.unflatten([placeholder]).a is placeholder  # would fail `__init__`


def test_init_really_validates():
    with pytest.raises(ValueError, match="`a` must be a vector"):
        Strict(jnp.ones((2, 2)))
    with pytest.raises(TypeError):
        Strict(object())


# --- transformations -------------------------------------------------------------------


def loss(model, x):
    return jnp.sum(model(x) ** 2)


jit_loss = jax.jit(loss)  # shared by the tests: compiled once per structure


def test_jit(no_init_calls):
    model, x = make_affine(), jnp.ones((4, 3))
    INIT_CALLS.clear()
    np.testing.assert_allclose(jit_loss(model, x), loss(model, x), rtol=1e-6)
    identity = jax.jit(lambda m: m)(model)
    assert isinstance(identity, Affine) and identity.activation == "relu"


def test_jit_retraces_on_a_static_field():
    traces = []

    @jax.jit
    def apply(model, x):
        traces.append(model.activation)
        return model(x)

    x = jnp.ones((1, 3))
    INIT_CALLS.clear()
    apply(make_affine("relu"), x)
    apply(make_affine("relu"), x)
    apply(make_affine("linear"), x)
    assert traces == ["relu", "linear"]


def test_vmap_over_a_strict_tree(no_init_calls):
    tree = Strict(jnp.arange(5.0))  # seed 004: `jax.vmap(lambda x: x)(tree)` errors there
    INIT_CALLS.clear()
    out = jax.vmap(lambda t: t)(tree)
    assert isinstance(out, Strict)
    np.testing.assert_array_equal(out.a, jnp.arange(5.0))


def test_vmap_over_a_batch_of_models(no_init_calls):
    batch = Affine(jnp.ones((2, 3, 2)), jnp.zeros((2, 2)))
    INIT_CALLS.clear()
    out = jax.vmap(lambda m, x: m(x), in_axes=(0, None))(batch, jnp.ones((1, 3)))
    assert out.shape == (2, 1, 2)
    stacked = jax.vmap(lambda m: m)(batch)
    assert stacked.activation == "relu" and stacked.weight.shape == (2, 3, 2)


def test_grad_returns_the_same_class(no_init_calls):
    model, x = make_affine(), jnp.ones((4, 3))
    INIT_CALLS.clear()
    grads = jax.jit(jax.grad(loss))(model, x)
    assert isinstance(grads, Affine)
    assert grads.activation == "relu" and grads.weight.shape == (3, 2)
    eps = 1e-3
    bumped = dataclasses.replace(model, bias=model.bias.at[0].add(eps))
    INIT_CALLS.clear()
    numeric = (jit_loss(bumped, x) - jit_loss(model, x)) / eps
    np.testing.assert_allclose(grads.bias[0], numeric, rtol=2e-2)


def test_jacobian_of_a_tree_to_tree_function(no_init_calls):
    tree = Strict(jnp.arange(3.0))  # seed 004: `jax.jacobian(lambda x: x)(tree)` errors there
    INIT_CALLS.clear()
    jac = jax.jacobian(lambda t: t)(tree)
    assert isinstance(jac, Strict) and isinstance(jac.a, Strict)  # a tree of trees
    np.testing.assert_array_equal(jac.a.a, jnp.eye(3))


def test_grad_under_jit_and_vmap_together(no_init_calls):
    batch = Affine(jnp.ones((3, 3, 2)), jnp.zeros((3, 2)), activation="linear")
    x = jnp.ones((2, 3))
    INIT_CALLS.clear()
    per_model = jax.jit(jax.vmap(jax.grad(loss), in_axes=(0, None)))(batch, x)
    assert isinstance(per_model, Affine)
    assert per_model.weight.shape == (3, 3, 2)
