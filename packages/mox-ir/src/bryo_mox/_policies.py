"""Text form of `jax.checkpoint` policies: the `policy` param of a `remat` equation.

A model that scans its layers with a checkpoint policy (a Haliax or bryo `Stacked` with
`gradient_checkpointing="nested"` or `save_block_internals`, `eqx.filter_checkpoint` or
`jax.checkpoint` with a `policy=`) traces into `remat` equations holding one of
`jax.checkpoint_policies`. The text names it, `checkpoint_policy('nothing_saveable')`, or,
for a policy made from checkpoint names, names the factory and the names:
`checkpoint_policy('save_only_these_names', 'carry', 'inputs')` (where JAX makes those
policies as dataclasses, from 0.8 on; before, they are closures with no text form).
Reading one calls the same attribute of `jax.checkpoint_policies`, and no other.
"""

from __future__ import annotations

import dataclasses
import functools

import jax

#: The policies `jax.checkpoint_policies` holds as values, read back by name.
_PLAIN = (
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
)
#: The factories of policies made from checkpoint names, and the field that holds them.
_BY_NAMES = {"save_only_these_names": "saveable_names", "save_any_names_but_these": "names"}


@functools.cache
def _made_type(factory: str) -> type | None:
    """The dataclass `jax.checkpoint_policies.<factory>` makes, or None where it makes a
    closure (JAX before 0.8), which no text can name."""
    made = getattr(jax.checkpoint_policies, factory)("name")
    return type(made) if dataclasses.is_dataclass(made) else None


def encode_policy(value: object) -> str | None:
    """`value`'s text if it is a checkpoint policy this module can name, else None."""
    policies = jax.checkpoint_policies
    for name in _PLAIN:
        plain = getattr(policies, name, None)
        if value is plain or (
            dataclasses.is_dataclass(value) and type(value) is type(plain) and value == plain
        ):
            return f"checkpoint_policy({name!r})"
    for factory, field in _BY_NAMES.items():
        if _made_type(factory) is type(value):
            names = sorted(getattr(value, field))
            if all(isinstance(name, str) for name in names):
                return f"checkpoint_policy({', '.join(map(repr, [factory, *names]))})"
    return None


def decode_policy(name: object, *names: object) -> object:
    """The policy `checkpoint_policy(name, *names)` writes (see `encode_policy`)."""
    policies = jax.checkpoint_policies
    if name in _PLAIN and not names:
        return getattr(policies, name)  # type: ignore[arg-type]  # `name` is one of _PLAIN
    if name in _BY_NAMES and all(isinstance(n, str) for n in names):
        return getattr(policies, name)(*names)  # type: ignore[arg-type]  # a key of _BY_NAMES
    raise ValueError(
        f"checkpoint_policy{(name, *names)!r} names no checkpoint policy MoX reads: one of "
        f"{', '.join(_PLAIN)} (no names), or {', '.join(_BY_NAMES)} with names (strings)"
    )
