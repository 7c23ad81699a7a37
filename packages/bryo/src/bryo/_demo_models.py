"""The demo's built-in models: the same network as NNX-style modules and as Equinox modules.

An input projection, a `Stacked` trunk of residual MLP blocks (scanned over a `Layers`
axis), a LayerNorm, dropout and a linear head. Each backend is a small adapter with the
same four functions, so `bryo demo` runs one code path for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from bryo_graph import Variable
from bryo_named import Axis
from bryo_scan import Stacked

DROPOUT_RATE = 0.1


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The model's sizes (`bryo demo --width/--layers`)."""

    in_features: int
    width: int
    layers: int
    out_features: int


Batch = jax.Array | np.ndarray
"""A batch of inputs: a device array, or a host copy (the demo traces MoX on one)."""


class Backend(Protocol):
    """What `bryo demo` needs of a module style."""

    name: str

    def build(self, sizes: Sizes, key: jax.Array) -> Any:
        """A freshly initialised model."""
        ...

    def forward(self, model: Any, x: Batch, *, train: bool, key: jax.Array | None) -> jax.Array:
        """The model on a batch `x` of shape `(batch, in_features)`."""
        ...

    def apply_linear(self, linear: Any, x: jax.Array) -> jax.Array:
        """One of the model's Linear layers on a batch (used to build LoRA adapters)."""
        ...

    def supports_model_parallel(self) -> bool:
        """Whether the model's Variables carry logical sharding axes."""
        ...


class NNXBackend:
    """NNX-style modules: implicit dropout rngs, batched layers."""

    name = "nnx"

    def build(self, sizes: Sizes, key: jax.Array) -> Any:
        from bryo import nnx

        class Block(nnx.Module):
            def __init__(self, width: int, *, key: jax.Array) -> None:
                rngs = nnx.Rngs(params=key)
                self.up = nnx.Linear(width, 2 * width, rngs=rngs)
                self.down = nnx.Linear(2 * width, width, rngs=rngs)
                _annotate(self.up.kernel, ("embed", "mlp"))
                _annotate(self.down.kernel, ("mlp", "embed"))

            def __call__(self, x: jax.Array) -> jax.Array:
                return x + self.down(nnx.relu(self.up(x)))

        class Model(nnx.Module):
            def __init__(self, sizes: Sizes, rngs: nnx.Rngs) -> None:
                layers = Axis("Layers", sizes.layers)
                self.embed = nnx.Linear(sizes.in_features, sizes.width, rngs=rngs)
                self.trunk = Stacked.init(layers, Block)(
                    sizes.width, key=jax.random.split(rngs.params(), sizes.layers)
                )
                self.norm = nnx.LayerNorm(sizes.width, rngs=rngs)
                self.drop = nnx.Dropout(DROPOUT_RATE, rngs=rngs)
                self.head = nnx.Linear(sizes.width, sizes.out_features, rngs=rngs)

            def __call__(self, x: jax.Array, *, train: bool = False) -> jax.Array:
                h = self.trunk.fold(nnx.relu(self.embed(x)))
                return self.head(self.drop(self.norm(h), deterministic=not train))

        params_key, dropout_key = jax.random.split(key)
        return Model(sizes, nnx.Rngs(params=params_key, dropout=dropout_key))

    def forward(self, model: Any, x: Batch, *, train: bool, key: jax.Array | None) -> jax.Array:
        return model(x, train=train)

    def apply_linear(self, linear: Any, x: jax.Array) -> jax.Array:
        return linear(x)

    def supports_model_parallel(self) -> bool:
        return True


class EquinoxBackend:
    """Equinox modules: per-example layers mapped over the batch, explicit dropout keys."""

    name = "equinox"

    def build(self, sizes: Sizes, key: jax.Array) -> Any:
        import equinox as eqx

        class Block(eqx.Module):
            up: eqx.nn.Linear
            down: eqx.nn.Linear

            def __init__(self, width: int, *, key: jax.Array) -> None:
                up_key, down_key = jax.random.split(key)
                self.up = eqx.nn.Linear(width, 2 * width, key=up_key)
                self.down = eqx.nn.Linear(2 * width, width, key=down_key)

            def __call__(self, x: jax.Array) -> jax.Array:
                return x + self.down(jax.nn.relu(self.up(x)))

        class Model(eqx.Module):
            embed: eqx.nn.Linear
            trunk: Stacked
            norm: eqx.nn.LayerNorm
            drop: eqx.nn.Dropout
            head: eqx.nn.Linear

            def __init__(self, sizes: Sizes, key: jax.Array) -> None:
                keys = jax.random.split(key, 3)
                layers = Axis("Layers", sizes.layers)
                self.embed = eqx.nn.Linear(sizes.in_features, sizes.width, key=keys[0])
                self.trunk = Stacked.init(layers, Block)(
                    sizes.width, key=jax.random.split(keys[1], sizes.layers)
                )
                self.norm = eqx.nn.LayerNorm(sizes.width)
                self.drop = eqx.nn.Dropout(DROPOUT_RATE)
                self.head = eqx.nn.Linear(sizes.width, sizes.out_features, key=keys[2])

            def __call__(self, x: jax.Array, *, key: jax.Array | None, train: bool) -> jax.Array:
                h = self.trunk.fold(jax.nn.relu(self.embed(x)))
                return self.head(self.drop(self.norm(h), key=key, inference=not train))

        return Model(sizes, key)

    def forward(self, model: Any, x: Batch, *, train: bool, key: jax.Array | None) -> jax.Array:
        if train:
            keys = jax.random.split(key, x.shape[0])  # type: ignore[arg-type]  # the training step passes a key with train=True (_demo.py)
            return jax.vmap(lambda xi, ki: model(xi, key=ki, train=True))(x, keys)
        return jax.vmap(lambda xi: model(xi, key=None, train=False))(x)

    def apply_linear(self, linear: Any, x: jax.Array) -> jax.Array:
        return linear(x) if x.ndim == 1 else jax.vmap(linear)(x)

    def supports_model_parallel(self) -> bool:
        return False


def _annotate(variable: Variable, axes: tuple[str, ...]) -> None:
    """Give a Variable logical sharding axes, read by `bryo.nnx`'s mesh helpers."""
    variable.sharding = axes


BACKENDS: dict[str, Callable[[], Backend]] = {"nnx": NNXBackend, "equinox": EquinoxBackend}


def teacher(sizes: Sizes, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """Synthetic regression data: a fixed random two-layer network plus a little noise."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = jax.random.normal(k1, (n, sizes.in_features))
    w1 = jax.random.normal(k2, (sizes.in_features, 32)) / jnp.sqrt(sizes.in_features)
    w2 = jax.random.normal(k3, (32, sizes.out_features)) / jnp.sqrt(32.0)
    y = jnp.tanh(x @ w1) @ w2 + 0.01 * jax.random.normal(k4, (n, sizes.out_features))
    return x, y
