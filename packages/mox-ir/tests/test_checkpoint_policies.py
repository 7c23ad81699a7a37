"""A `remat` equation's checkpoint policy survives dumps/loads (a Haliax `Stacked` with
`gradient_checkpointing="nested"`, a policy saving named block internals)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_mox import MoxError, MoxSerializationError, dumps, eval_mox, loads, make_mox, query

POLICIES = jax.checkpoint_policies
# JAX makes named policies as dataclasses from 0.8 on; before, closures with no text form
NAMED_ARE_DATA = dataclasses.is_dataclass(POLICIES.save_only_these_names("h"))


def _block(x):
    # (no checkpoint_name: its primitive does not load on jax 0.7.2)
    return jnp.cos(jnp.sin(x) * 2.0) * x


def _policies():
    plain = [
        POLICIES.nothing_saveable,
        POLICIES.everything_saveable,
        POLICIES.dots_saveable,
        POLICIES.dots_with_no_batch_dims_saveable,
    ]
    if not NAMED_ARE_DATA:
        return plain
    return [
        *plain,
        POLICIES.save_only_these_names("h", "carry"),
        POLICIES.save_any_names_but_these("h"),
    ]


@pytest.mark.parametrize("fmt", ["xml", "yson"])
@pytest.mark.parametrize("policy", _policies(), ids=repr)
def test_a_remat_policy_round_trips(policy, fmt):
    f = jax.checkpoint(_block, policy=policy)
    x = jnp.linspace(0.0, 1.0, 3)
    mox = make_mox(f)(x)
    loaded = loads(dumps(mox, format=fmt), format=fmt)
    (remat,) = query("//remat2", loaded)
    assert remat.params["policy"] == policy  # the very policy, or an equal dataclass
    np.testing.assert_allclose(eval_mox(loaded, x), f(x), rtol=1e-6)
    grad = jax.grad(lambda x: jnp.sum(eval_mox(loaded, x)))(x)
    np.testing.assert_allclose(grad, jax.grad(lambda x: jnp.sum(f(x)))(x), rtol=1e-6)


def test_an_offloading_policy_still_says_it_has_no_text_form():
    policy = POLICIES.save_and_offload_only_these_names(
        names_which_can_be_saved=["h"],
        names_which_can_be_offloaded=[],
        offload_src="device",
        offload_dst="pinned_host",
    )
    mox = make_mox(jax.checkpoint(_block, policy=policy))(jnp.ones(3))
    with pytest.raises(MoxSerializationError, match="`policy` of equation `remat2`"):
        dumps(mox)


@pytest.mark.parametrize(
    "text",
    [
        "checkpoint_policy('save_from_both_policies')",
        "checkpoint_policy('nothing_saveable', 'h')",
        "checkpoint_policy('save_only_these_names', 1)",
        "checkpoint_policy('__import__')",
    ],
)
def test_a_file_naming_another_policy_is_refused(text):
    xml = dumps(make_mox(jax.checkpoint(_block, policy=POLICIES.nothing_saveable))(jnp.ones(3)))
    bad = xml.replace("checkpoint_policy(&apos;nothing_saveable&apos;)", text).replace(
        "checkpoint_policy('nothing_saveable')", text
    )
    assert bad != xml
    with pytest.raises(MoxError, match="checkpoint_policy"):
        loads(bad)
