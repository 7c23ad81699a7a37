"""Low-rank adaptation: `LoRA` (`x @ lora_a @ lora_b`, optionally added to a base module's
output), `LoRALinear` (a `Linear` with a LoRA beside it) and `LoRAParam`.

The low-rank factors are `LoRAParam`s (a `Param` subclass) by default, so a filter tells
them apart from the base weights: `nnx.Optimizer(model, tx, wrt=nnx.LoRAParam)` trains the
adapters alone. `lora_b` starts at zero, so a fresh adapter leaves the output unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bryo_graph import Param, Variable

from . import dtypes, initializers
from ._common import NO_METADATA, Metadata, OutSharding, RngsArg, init_param
from ._linear import Linear
from ._module import Module

default_a_initializer = initializers.default_a_initializer
default_b_initializer = initializers.default_b_initializer


class LoRAParam(Param):
    """A low-rank adapter's parameter (a `Param`, told apart by filters)."""

    __slots__ = ()


class LoRA(Module):
    """`x @ lora_a @ lora_b` (+ `base_module(x)`): a rank-`lora_rank` update of a layer.

    >>> lora = LoRA(3, 2, 4, rngs=Rngs(0))        # doctest: +SKIP
    >>> lora.lora_a.shape, lora.lora_b.shape       # doctest: +SKIP
    ((3, 2), (2, 4))

    Args:
        in_features: the size of the input's last axis.
        lora_rank: the rank of the update.
        out_features: the size of the output's last axis.
        base_module: a module called on the same input (with the call's keyword
            arguments), its output added.
        dtype, param_dtype: computation and parameter dtypes.
        a_initializer, b_initializer: the factors' initializers (He-uniform and zeros).
        lora_param_type: the Variable type of the factors (default `LoRAParam`).
        promote_dtype: casts `(x, lora_a, lora_b)` to the computation dtype.
        rngs: the `Rngs` whose `params` stream initialises the factors.
        a_metadata, b_metadata: metadata of `lora_a` / `lora_b`.
    """

    def __init__(
        self,
        in_features: int,
        lora_rank: int,
        out_features: int,
        *,
        base_module: Module | None = None,
        dtype: jnp.dtype | None = None,
        param_dtype: jnp.dtype = jnp.float32,
        a_initializer: initializers.Initializer = default_a_initializer,
        b_initializer: initializers.Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg,
        a_metadata: Metadata = NO_METADATA,
        b_metadata: Metadata = NO_METADATA,
    ) -> None:
        if base_module is not None and not callable(base_module):
            raise TypeError(
                f"LoRA: `base_module` must be callable; got {type(base_module).__name__}."
            )
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.lora_param_type = lora_param_type
        self.base_module = base_module
        self.promote_dtype = promote_dtype
        factors = (
            (a_initializer, (in_features, lora_rank), a_metadata),
            (b_initializer, (lora_rank, out_features), b_metadata),
        )
        self.lora_a, self.lora_b = (  # drawn in this order from `params`
            init_param(init, rngs, "LoRA", shape, param_dtype, metadata, lora_param_type)
            for init, shape, metadata in factors
        )

    def __call__(self, x: jax.Array, **kwargs: object) -> jax.Array:
        """The low-rank product, plus `base_module(x, **kwargs)` when there is one."""
        x, lora_a, lora_b = self.promote_dtype(
            (x, self.lora_a[...], self.lora_b[...]), dtype=self.dtype
        )
        out = x @ lora_a @ lora_b
        if self.base_module is not None:
            out += self.base_module(x, **kwargs)
        return out


class LoRALinear(Linear):
    """A `Linear` whose output gets a low-rank update: `x @ kernel + bias + lora(x)`.

    Its state holds `Linear`'s (`kernel`, `bias`) plus `lora` (a `LoRA`), so weights of a
    trained `Linear` load into it unchanged.

    Args:
        in_features, out_features: as `Linear`.
        lora_rank: the rank of the update.
        lora_dtype, lora_param_dtype, lora_promote_dtype: the `LoRA`'s `dtype`,
            `param_dtype` and `promote_dtype`.
        a_initializer, b_initializer, lora_param_type, a_metadata, b_metadata: as `LoRA`.
        rngs: initialises the `Linear` first, then the `LoRA`.
        **kwargs: `Linear`'s other keywords (`use_bias`, `dtype`, `kernel_init`, ...).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        lora_rank: int,
        lora_dtype: jnp.dtype | None = None,
        lora_param_dtype: jnp.dtype = jnp.float32,
        a_initializer: initializers.Initializer = default_a_initializer,
        b_initializer: initializers.Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        lora_promote_dtype: dtypes.PromoteDtypeFn = dtypes.promote_dtype,
        rngs: RngsArg,
        a_metadata: Metadata = NO_METADATA,
        b_metadata: Metadata = NO_METADATA,
        **kwargs: object,
    ) -> None:
        super().__init__(in_features, out_features, rngs=rngs, **kwargs)  # type: ignore[arg-type]  # **kwargs are Linear's other keywords, passed on
        self.lora = LoRA(
            in_features,
            lora_rank,
            out_features,
            dtype=lora_dtype,
            param_dtype=lora_param_dtype,
            a_initializer=a_initializer,
            b_initializer=b_initializer,
            lora_param_type=lora_param_type,
            promote_dtype=lora_promote_dtype,
            rngs=rngs,
            a_metadata=a_metadata,
            b_metadata=b_metadata,
        )

    def __call__(self, x: jax.Array, out_sharding: OutSharding | None = None) -> jax.Array:
        y = super().__call__(x, out_sharding=out_sharding)
        return y + self.lora(x)
