"""Flax Linen models in MoX: one `module_call` per method call, with type, scope path and
fields; variables and rng streams as inputs; mutable collections as new state."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

yax = pytest.importorskip("bryo_mox")

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


class ResBlock(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs + nn.relu(nn.Dense(4)(xs))


class Net(nn.Module):
    depth: int = 2

    @nn.compact
    def __call__(self, xs):
        for _ in range(self.depth):
            xs = ResBlock()(xs)
        return nn.Dense(3, use_bias=False, name="head")(xs)


def calls(mox, xpath="//module_call"):
    return [(node.info.short_type, node.name) for node in yax.query(xpath, mox)]


def trace(model, *args, **kwargs):
    variables = model.init(jax.random.key(0), *args)
    return variables, yax.make_mox(model.apply)(variables, *args, **kwargs)


def assert_tree_close(actual, expected):
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_every_module_call_is_a_node_named_by_its_scope_path():
    _, mox = trace(Net(), X)
    assert calls(mox) == [
        ("Net", ""),
        ("ResBlock", "ResBlock_0"),
        ("Dense", "ResBlock_0/Dense_0"),
        ("ResBlock", "ResBlock_1"),
        ("Dense", "ResBlock_1/Dense_0"),
        ("Dense", "head"),
    ]
    (head,) = yax.query('//module_call[@name="head"]', mox)
    assert head.type == "flax.linen.linear.Dense"
    assert head.attrs["features"] == 3 and head.attrs["use_bias"] is False
    assert "method" not in head.attrs and "name" not in head.attrs
    assert calls(mox, "//module_call[@features=4]") == [
        ("Dense", "ResBlock_0/Dense_0"),
        ("Dense", "ResBlock_1/Dense_0"),
    ]
    (net,) = yax.query('//module_call[@type="Net"]', mox)
    assert net.attrs == {"depth": 2}


def test_variables_are_inputs_of_their_node():
    variables, mox = trace(Net(), X)
    (dense,) = yax.query('//module_call[@name="ResBlock_0/Dense_0"]', mox)
    assert dense.n_state == 2  # bias, kernel: the Dense's own variables
    assert [v.aval.shape for v in dense.invars] == [(4,), (4, 4), (2, 4)]
    (block,) = yax.query('//module_call[@name="ResBlock_0"]', mox)
    assert block.n_state == 2  # a block's variables are its submodules'
    # the root takes exactly what `apply` takes: the variables' leaves, then the input
    assert len(mox.invars) == len(jax.tree.leaves(variables)) + 1


def test_eval_matches_apply_eagerly_jitted_and_under_grad():
    model = Net()
    variables, mox = trace(model, X)
    expected = model.apply(variables, X)
    assert_tree_close(yax.eval_mox(mox, variables, X), expected)
    jitted = jax.jit(lambda v, x: yax.eval_mox(mox, v, x))
    assert_tree_close(jitted(variables, X), expected)
    loss = lambda f: lambda v: jnp.sum(f(v, X) ** 2)
    assert_tree_close(
        jax.grad(loss(lambda v, x: yax.eval_mox(mox, v, x)))(variables),
        jax.grad(loss(model.apply))(variables),
    )


class Stats(nn.Module):
    @nn.compact
    def __call__(self, xs, train: bool = True):
        xs = nn.Dense(4)(xs)
        xs = nn.BatchNorm(use_running_average=not train)(xs)
        return nn.Dropout(0.5)(xs, deterministic=not train)


def stats_variables():
    return Stats().init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)


def test_mutable_collections_come_out_as_new_state_and_rngs_stay_inputs():
    model, variables = Stats(), stats_variables()
    kwargs = {"mutable": ["batch_stats"], "train": True}
    mox = yax.make_mox(model.apply)(variables, X, rngs={"dropout": jax.random.key(2)}, **kwargs)
    assert mox.traced_kwargs == ("rngs",)
    assert dict(mox.static_kwargs) == {"mutable": ["batch_stats"], "train": True}
    (norm,) = yax.query('//module_call[@type="BatchNorm"]', mox)
    assert norm.n_state_out == 2  # the new mean and var
    (dropout,) = yax.query('//module_call[@type="Dropout"]', mox)
    assert dropout.attrs["rate"] == 0.5 and dropout.attrs["rng_collection"] == "dropout"
    assert any(jnp.issubdtype(v.aval.dtype, jax.dtypes.prng_key) for v in dropout.invars)
    outputs = {}
    for seed in (2, 3):
        rngs = {"dropout": jax.random.key(seed)}
        outputs[seed] = yax.eval_mox(mox, variables, X, rngs=rngs, **kwargs)
        assert_tree_close(outputs[seed], model.apply(variables, X, rngs=rngs, **kwargs))
    assert not np.allclose(outputs[2][0], outputs[3][0])  # another key, another mask


def test_a_static_train_flag_stays_static():
    model, variables = Stats(), stats_variables()
    mox = yax.make_mox(model.apply)(variables, X, train=False)
    assert not yax.query('//module_call[@type="Dropout"]//random_bits', mox)
    assert_tree_close(
        yax.eval_mox(mox, variables, X, train=False), model.apply(variables, X, train=False)
    )
    with pytest.raises(yax.MoxError, match="`train=True` differs from the traced `train=False`"):
        yax.eval_mox(mox, variables, X, train=True)


class Encoder(nn.Module):
    def setup(self):
        self.dense = nn.Dense(4)
        self.scale = self.param("scale", nn.initializers.ones, (4,))

    def encode(self, xs):
        y = self.dense(xs)
        return y * jnp.broadcast_to(self.scale, y.shape)

    def __call__(self, xs):
        return self.encode(xs) + self.dense(xs)  # `dense` is called twice: shared


def test_setup_modules_methods_and_shared_calls():
    model = Encoder()
    variables, mox = trace(model, X)
    assert calls(mox) == [
        ("Encoder", ""),
        ("Encoder", ""),
        ("Dense", "dense"),
        ("Dense", "dense"),
    ]
    (encode,) = yax.query('//module_call[@method="encode"]', mox)
    assert encode.n_state == 3  # the module's variables: dense's bias and kernel, scale
    assert_tree_close(yax.eval_mox(mox, variables, X), model.apply(variables, X))
    # apply(method=...) traces that method as the root call
    via_method = yax.make_mox(lambda v, x: model.apply(v, x, method=model.encode))(variables, X)
    assert calls(via_method) == [("Encoder", ""), ("Dense", "dense")]
    assert yax.query("/mox/module_call", via_method)[0].attrs["method"] == "encode"


class SetupNet(nn.Module):
    """`setup` keeps only submodules: their variables are read through their scopes."""

    def setup(self):
        self.blocks = [Encoder(), Encoder()]
        self.head = nn.Dense(3)

    def __call__(self, xs):
        for block in self.blocks:
            xs = block(xs)
        return self.head(xs)


def test_modules_whose_setup_keeps_submodules():
    model = SetupNet()
    variables, mox = trace(model, X)
    assert calls(mox, "/mox/module_call/module_call") == [
        ("Encoder", "blocks_0"),
        ("Encoder", "blocks_1"),
        ("Dense", "head"),
    ]
    (root,) = mox.nodes
    assert root.n_state == len(jax.tree.leaves(variables))  # every variable, once
    (block,) = yax.query('//module_call[@name="blocks_1"][not(@method)]', mox)
    assert block.n_state == 3  # dense's bias and kernel, scale
    assert_tree_close(yax.eval_mox(mox, variables, X), model.apply(variables, X))


class Scale(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs * self.param("w", nn.initializers.ones, (1, 4))


class HoldsScale(nn.Module):
    def setup(self):
        self.scale = Scale()

    def __call__(self, xs):
        return self.scale(xs)


def with_consts(mox, consts):
    """`mox` with other values for its constants (a bound module's variables)."""
    return dataclasses.replace(mox, block=dataclasses.replace(mox.block, consts=tuple(consts)))


def assert_traced_with_variables_as_state(model, variables, bound, traced):
    """`traced` (a trace of `bound`, a bound `model` already called) takes `variables` as
    its constants, one per leaf: evaluated with others, it follows them, its gradient
    is `apply`'s; and `bound` still reads the caller's dicts."""
    from bryo_flax._compat import root_variables

    consts = traced.block.consts
    assert len(consts) == len(jax.tree.leaves(variables))  # the params, as the root's state
    doubled = jax.tree.map(lambda a: 2.0 * a, variables)
    evaluate = lambda cs: yax.eval_mox(with_consts(traced, cs), X)
    assert_tree_close(evaluate([2.0 * c for c in consts]), model.apply(doubled, X))
    assert_tree_close(jax.jit(evaluate)([2.0 * c for c in consts]), model.apply(doubled, X))
    loss = lambda f: lambda v: jnp.sum(f(v) ** 2)
    expected = jax.grad(loss(lambda v: model.apply(v, X)))(variables)
    assert_tree_close(jax.grad(loss(evaluate))(list(consts)), jax.tree.leaves(expected))
    # the bound module still reads the caller's variables, and no tracer
    assert root_variables(bound.scope)["params"] is variables["params"]
    assert not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(bound.variables))
    assert_tree_close(bound(X), model.apply(variables, X))


@pytest.mark.parametrize("direct", [False, True], ids=["through-setup", "submodule-directly"])
def test_a_bound_module_called_before_is_traced_with_its_variables_as_state(direct):
    """A submodule made in `setup` keeps its scope, and the references it took into the
    caller's variables at the concrete call: the trace still reads the node's state."""
    model = HoldsScale()
    variables = model.init(jax.random.key(0), X)
    bound = model.bind(variables)
    bound(X)
    mox = yax.make_mox(lambda x: bound.scale(x) if direct else bound(x))(X)
    assert_traced_with_variables_as_state(model, variables, bound, mox)
    assert bound.scale.variables["params"]["w"] is variables["params"]["scale"]["w"]


class Wraps(nn.Module):
    """A compact module calling the submodules given as its fields."""

    inner: nn.Module
    more: tuple = ()

    @nn.compact
    def __call__(self, xs):
        xs = self.inner(xs)
        for module in self.more:
            xs = module(xs)
        return xs


class WrapsInSetup(nn.Module):
    """A module with a `setup` calling a submodule given as its field."""

    inner: nn.Module

    def setup(self):
        self.head = nn.Dense(4)

    def __call__(self, xs):
        return self.head(self.inner(xs))


FIELD_MODELS = {  # a model, and the names of its nodes
    "field": (lambda: Wraps(nn.Dense(4)), ["", "inner"]),
    "setup-module-field": (lambda: WrapsInSetup(nn.Dense(4)), ["", "inner", "head"]),
    "list-of-fields": (
        lambda: Wraps(nn.Dense(4), more=[nn.Dense(4), HoldsScale()]),
        ["", "inner", "more_0", "more_1", "more_1/scale"],
    ),
    "nested-fields": (
        lambda: Wraps(WrapsInSetup(Wraps(nn.Dense(4))), more=(Wraps(Scale()),)),
        ["", "inner", "inner/inner", "inner/inner/inner", "inner/head", "more_0", "more_0/inner"],
    ),
}


@pytest.mark.parametrize(("make", "names"), FIELD_MODELS.values(), ids=FIELD_MODELS.keys())
def test_submodules_given_as_fields_are_traced_with_their_variables_as_state(make, names):
    """A submodule given as a field is adopted once, at the first call, and keeps its
    scope (under the root scope of that call: Flax gives the root a new one after each
    compact call): a trace after a concrete call still reads the node's state."""
    model = make()
    variables = model.init(jax.random.key(0), X)
    bound = model.bind(variables)
    bound(X)
    mox = yax.make_mox(lambda x: bound(x))(X)
    assert [node.name for node in yax.query("//module_call", mox)] == names
    assert_traced_with_variables_as_state(model, variables, bound, mox)


def test_a_field_submodule_and_its_holder_traced_together():
    """`bound.inner` and `bound` (two root scopes sharing one set of variable dicts)
    called in one trace: both read the node's state, and both are given back."""
    model = Wraps(nn.Dense(4))
    variables = model.init(jax.random.key(0), X)
    bound = model.bind(variables)
    bound(X)
    mox = yax.make_mox(lambda x: bound(x) + bound.inner(x))(X)
    consts = mox.block.consts
    doubled = jax.tree.map(lambda a: 2.0 * a, variables)
    expected = 2.0 * model.apply(doubled, X)
    assert_tree_close(yax.eval_mox(with_consts(mox, [2.0 * c for c in consts]), X), expected)
    assert not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(bound.variables))
    assert bound.inner.variables["params"]["kernel"] is variables["params"]["inner"]["kernel"]
    assert_tree_close(bound.inner(X), model.apply(variables, X))


class Block(nn.Module):
    @nn.compact
    def __call__(self, carry, _):
        return nn.relu(nn.Dense(4)(carry)), None


class Lifted(nn.Module):
    @nn.compact
    def __call__(self, xs):
        scanned = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=3)
        xs, _ = scanned(name="layers")(xs, None)
        return nn.remat(nn.Dense)(4, name="checkpointed")(xs)


def test_lifted_modules_and_sequential():
    model = Lifted()
    variables, mox = trace(model, X)
    assert calls(mox) == [
        ("Lifted", ""),
        ("Block", "layers"),
        ("Dense", "layers/Dense_0"),
        ("Dense", "checkpointed"),
    ]
    assert calls(mox, "//scan//module_call") == [("Block", "layers"), ("Dense", "layers/Dense_0")]
    remat = '//*[starts-with(name(), "remat") or name() = "checkpoint"]'  # by jax version
    assert calls(mox, f"{remat}//module_call") == [("Dense", "checkpointed")]
    assert_tree_close(yax.eval_mox(mox, variables, X), model.apply(variables, X))

    sequential = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
    variables, mox = trace(sequential, X)
    assert calls(mox) == [("Sequential", ""), ("Dense", "layers_0"), ("Dense", "layers_2")]
    assert_tree_close(yax.eval_mox(mox, variables, X), sequential.apply(variables, X))


def test_bound_modules_called_directly_are_left_unchanged():
    model = Stats()
    bound = model.bind(
        stats_variables(), rngs={"dropout": jax.random.key(2)}, mutable=["batch_stats"]
    )
    before = jax.tree.map(np.asarray, bound.variables["batch_stats"])
    counters = repr(bound.scope.rng_counters)
    mox = yax.make_mox(lambda x: bound(x, train=True))(X)
    assert calls(mox)[0] == ("Stats", "")
    assert repr(bound.scope.rng_counters) == counters  # no dropout key was drawn
    after = bound.variables["batch_stats"]
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
        assert isinstance(b, jax.Array) and not isinstance(b, jax.core.Tracer)
        np.testing.assert_array_equal(a, b)


@settings(max_examples=4, deadline=None)
@given(depth=st.integers(1, 3), features=st.sampled_from([2, 3]))
def test_any_depth_evaluates_like_apply(depth, features):
    model = nn.Sequential([nn.Dense(features) for _ in range(depth)])
    variables, mox = trace(model, X)
    assert [node.attrs["features"] for node in yax.query("//module_call[@features]", mox)] == [
        features
    ] * depth
    assert_tree_close(yax.eval_mox(mox, variables, X), model.apply(variables, X))


class Draws(nn.Module):
    @nn.compact
    def __call__(self):
        inner = nn.Dropout(0.5)(jnp.ones(4), deterministic=False)
        return inner, self.make_rng("dropout")


def test_the_pure_call_can_run_twice():
    """A backend's `pure` must not advance rng counters itself: a handler may trace it twice."""
    from bryo_flax._plugin import intercept

    seen = []

    def handler(info, state, pure, write_back, args, kwargs):
        pure(state, *args, **kwargs)  # a first run, thrown away
        new_state, out = pure(state, *args, **kwargs)
        seen.append(info.name)
        write_back(new_state)
        return out

    rngs = {"dropout": jax.random.key(7)}
    with intercept(handler):
        mask, key = Draws().apply({}, rngs=rngs)
    expected_mask, expected_key = Draws().apply({}, rngs=rngs)
    assert seen == ["Dropout_0", "Dropout_0", ""]  # the root ran twice, its child each time
    np.testing.assert_array_equal(mask, expected_mask)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(expected_key))


class JitAndVmap(nn.Module):
    @nn.compact
    def __call__(self, xs):
        xs = nn.jit(nn.Dense)(4, name="jitted")(xs)
        vmapped = nn.vmap(
            nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=0
        )
        return vmapped(4, name="per_row")(xs)


@pytest.mark.slow
def test_init_and_other_lifted_transforms():
    model = JitAndVmap()
    mox = yax.make_mox(model.init)(jax.random.key(0), X)  # `init` traces too
    assert calls(mox) == [("JitAndVmap", ""), ("Dense", "jitted"), ("Dense", "per_row")]
    (root,) = mox.nodes
    assert root.n_state == 1 and root.n_state_out == 4  # the params key in, the params out
    variables = yax.eval_mox(mox, jax.random.key(0), X)
    assert_tree_close(variables, model.init(jax.random.key(0), X))
    mox = yax.make_mox(model.apply)(variables, X)
    assert calls(mox) == [("JitAndVmap", ""), ("Dense", "jitted"), ("Dense", "per_row")]
    assert_tree_close(yax.eval_mox(mox, variables, X), model.apply(variables, X))
