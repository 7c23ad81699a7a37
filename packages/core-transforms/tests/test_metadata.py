"""Variable metadata (here logical sharding axes) through the lifted transforms."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from bryo_graph import Object, Param, Variable, get_partition_spec, state, update
from bryo_transforms import grad, jit


class MLP(Object):
    def __init__(self, seed: int = 0, hidden: int = 8):
        key = jax.random.key(seed)
        self.w1 = Param(jax.random.normal(key, (4, hidden)), sharding=("embed", "mlp"))
        self.b1 = Param(jnp.zeros(hidden), sharding=("mlp",))
        self.w2 = Param(jax.random.normal(key, (hidden, 4)), sharding=("mlp", "embed"))
        self.count = Variable(jnp.array(0))

    def __call__(self, x):
        self.count.value += 1
        h = x @ self.w1
        return jax.nn.relu(h + jnp.broadcast_to(self.b1, h.shape)) @ self.w2


def test_metadata_kept_through_jit_and_grad():
    model = MLP()
    x = jnp.ones((2, 4))

    @jit
    def forward(model, x):
        return model(x)

    forward(model, x)
    assert model.w1.out_sharding == ("embed", "mlp") and int(model.count.value) == 1
    grads = grad(lambda m, x: m(x).sum())(model, x)
    assert grads["w1"].out_sharding == ("embed", "mlp")
    specs = get_partition_spec(grads)
    assert specs["b1"].value == P("mlp")


def test_update_with_grads_keeps_tree_structure():
    model = MLP()
    grads = grad(lambda m: m(jnp.ones((1, 4))).sum())(model)
    params = state(model, Param)
    new = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    update(model, new)
    assert model.b1.out_sharding == ("mlp",)


# Logical specs and rules -------------------------------------------------------------------
