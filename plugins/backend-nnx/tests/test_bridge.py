"""`bryo_nnx.bridge`: Linen modules as NNX-style modules (`ToNNX`, `lazy_init`) and
NNX-style module classes as Linen modules (`ToLinen`, `to_linen`), checked against Flax
NNX's own `nnx.bridge` where Flax defines the numbers (same seeds, same values)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo_graph as graph
import bryo_nnx
import bryo_transforms
from bryo_filters import Not
from bryo_graph import BatchStat, Intermediate, Param, Variable
from bryo_rngs import Rngs, reseed

nn = pytest.importorskip("flax.linen")
flax_nnx = pytest.importorskip("flax.nnx")
bridge = pytest.importorskip("bryo_nnx.bridge")

X = jnp.arange(8.0).reshape(2, 4) / 8


class LinenBlock(nn.Module):
    """Params in a nested scope, a batch statistic, a counter, a sown value, dropout."""

    features: int = 3

    @nn.compact
    def __call__(self, x, train: bool = False):
        y = nn.Dense(self.features)(x)
        y = nn.BatchNorm(use_running_average=not train)(y)
        count = self.variable("counter", "count", lambda: jnp.zeros((), jnp.int32))
        if self.is_mutable_collection("counter") and not self.is_initializing():
            count.value += 1
        self.sow("intermediates", "total", jnp.sum(y))
        return nn.Dropout(0.5, deterministic=not train)(y)


class LinenEncoder(nn.Module):
    def setup(self):
        self.dense = nn.Dense(3)

    def __call__(self, x):
        return self.dense(x)

    def encode(self, x):
        return 2 * self.dense(x)


def _equal_trees(a, b) -> bool:
    return jax.tree.all(jax.tree.map(lambda u, v: bool(np.array_equal(u, v)), a, b))


def _values(module, flax: bool = False) -> dict:
    to_pure_dict = flax_nnx.to_pure_dict if flax else graph.to_pure_dict
    state = to_pure_dict((flax_nnx.state if flax else graph.state)(module))

    def plain(leaf):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(leaf))
        return np.asarray(leaf)

    return jax.tree.map(plain, state)


# ToNNX + lazy_init ----------------------------------------------------------------------


def test_to_nnx_dense_matches_flax_bridge():
    ours = bridge.ToNNX(nn.Dense(3), rngs=Rngs(0)).lazy_init(X)
    theirs = flax_nnx.bridge.ToNNX(nn.Dense(3), rngs=flax_nnx.Rngs(0)).lazy_init(X)
    assert isinstance(ours.kernel, Param) and ours.kernel.shape == (4, 3)
    assert _equal_trees(_values(ours), _values(theirs, flax=True))
    assert np.array_equal(ours(X), theirs(X))


def test_lazy_init_returns_the_module_and_nested_scopes_become_dicts():
    model = bridge.ToNNX(LinenBlock(), rngs=Rngs(params=0, dropout=1))
    assert bridge.lazy_init(model, X) is model
    assert isinstance(model.Dense_0, graph.Dict)
    assert isinstance(model.Dense_0["kernel"], Param)
    assert isinstance(model.BatchNorm_0["mean"], BatchStat)
    assert type(model.count).__name__ == "counter"
    assert graph.variable_name_from_type(type(model.count)) == "counter"
    assert not hasattr(model, "total")  # Linen's init does not keep intermediates
    model(X, mutable=True)
    assert isinstance(model.total, Intermediate)


def test_to_nnx_block_matches_flax_bridge_call_after_call():
    ours = bridge.lazy_init(bridge.ToNNX(LinenBlock(), rngs=Rngs(params=0, dropout=1)), X)
    theirs = flax_nnx.bridge.lazy_init(
        flax_nnx.bridge.ToNNX(LinenBlock(), rngs=flax_nnx.Rngs(params=0, dropout=1)), X
    )
    assert _equal_trees(_values(ours), _values(theirs, flax=True))
    for _ in range(2):  # rng streams advance alike; mutable collections written back alike
        y = ours(X, train=True, mutable=True)
        z = theirs(X, train=True, mutable=True)
        assert np.array_equal(y, z)
        assert _equal_trees(_values(ours), _values(theirs, flax=True))


def test_mutable_collections_are_written_in_place():
    model = bridge.lazy_init(bridge.ToNNX(LinenBlock(), rngs=Rngs(params=0, dropout=1)), X)
    mean, count = model.BatchNorm_0["mean"], model.count
    model(X)  # nothing mutable: nothing changes
    assert int(count[...]) == 0
    model(X, train=True, mutable=["batch_stats", "counter"])
    assert model.BatchNorm_0["mean"] is mean and model.count is count
    assert int(count[...]) == 1
    assert not np.array_equal(mean[...], np.zeros(3))


@pytest.mark.slow
def test_rng_streams_advance_and_reseed():
    model = bridge.lazy_init(
        bridge.ToNNX(nn.Dropout(0.5, deterministic=False), rngs=Rngs(dropout=0)), X
    )
    ones = jnp.ones((4, 8))
    assert not np.array_equal(model(ones), model(ones))
    reseed(model, dropout=0)
    first = model(ones)
    reseed(model, dropout=0)
    assert np.array_equal(first, model(ones))
    # an explicit key for one call
    assert np.array_equal(model(ones, rngs=jax.random.key(3)), model(ones, rngs=jax.random.key(3)))


def test_a_key_as_rngs_is_the_params_stream():
    model = bridge.ToNNX(nn.Dense(3), rngs=jax.random.key(0)).lazy_init(X)
    theirs = flax_nnx.bridge.ToNNX(nn.Dense(3), rngs=jax.random.key(0)).lazy_init(X)
    assert np.array_equal(model.kernel[...], theirs.kernel[...])


def test_linen_methods_are_module_methods():
    model = bridge.lazy_init(bridge.ToNNX(LinenEncoder(), rngs=Rngs(0)), X)
    assert np.allclose(model.encode(X), 2 * model(X))
    assert model.encode.__self__ is model
    fresh = bridge.ToNNX(nn.Dense(3), rngs=Rngs(0))
    bridge.lazy_init(fresh.__call__, X)  # a method of the module initializes it too
    assert fresh.kernel.shape == (4, 3)


def test_inside_an_nnx_module_with_split_merge_and_filters():
    class Outer(bryo_nnx.Module):
        def __init__(self, rngs):
            self.block = bridge.ToNNX(LinenBlock(), rngs=rngs)
            self.head = bryo_nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, x):
            return self.head(self.block(x))

    model = bridge.lazy_init(Outer(Rngs(params=0, dropout=1)), X)
    graphdef, params, stats, rest = graph.split(model, Param, BatchStat, ...)
    assert set(params["block"]) == {"Dense_0", "BatchNorm_0"}
    assert set(stats["block"]["BatchNorm_0"]) == {"mean", "var"}
    again = graph.merge(graphdef, params, stats, rest)
    assert np.array_equal(again(X), model(X))


def test_under_nnx_jit_and_grad():
    model = bridge.lazy_init(bridge.ToNNX(LinenBlock(), rngs=Rngs(params=0, dropout=1)), X)

    @bryo_transforms.jit
    def train_step(model, x):
        def loss(model):
            return jnp.sum(model(x, train=True, mutable=["batch_stats"]) ** 2)

        return bryo_transforms.grad(loss)(model)

    grads = train_step(model, X)
    assert set(grads["Dense_0"]) == {"kernel", "bias"}
    assert grads["Dense_0"]["kernel"].shape == (4, 3)
    # the batch statistics changed inside the jitted call reach the model
    assert not np.array_equal(model.BatchNorm_0["mean"][...], np.zeros(3))


def test_under_plain_jax_jit_tree_mode():
    model = bridge.ToNNX(nn.Dense(3), rngs=Rngs(0)).lazy_init(X)
    out = jax.jit(lambda m, x: m(x))(model, X)
    assert np.allclose(out, model(X))
    graphdef, params, rest = graph.split(model, Param, ...)
    grads = jax.grad(lambda p: jnp.sum(graph.merge(graphdef, p, rest)(X)))(params)
    assert grads["kernel"].shape == (4, 3)


@pytest.mark.slow
def test_lazy_init_under_vmap_makes_one_copy_per_index():
    class Vmapped(bryo_nnx.Module):
        def __init__(self, rngs):
            self.inner = bridge.ToNNX(nn.Dense(3, use_bias=False), rngs=rngs)

        def __call__(self, x):
            @bryo_transforms.vmap(in_axes=(0, None), axis_size=4, graph=True, graph_updates=True)
            def apply(inner, x):
                return inner(x)

            from bryo_rngs import split_rngs

            with split_rngs(self.inner, splits=4, graph=True, graph_updates=True):
                return apply(self.inner, x)

    model = bridge.lazy_init(Vmapped(Rngs(0)), X)
    assert model.inner.kernel.shape == (4, 4, 3)
    assert not np.array_equal(model.inner.kernel[0], model.inner.kernel[1])
    assert "_bridge__initializing" not in vars(model.inner)


def test_linen_partitioning_becomes_variable_metadata_and_back():
    class Dot(nn.Module):
        @nn.compact
        def __call__(self, x):
            init = nn.with_partitioning(nn.initializers.lecun_normal(), ("in", "out"))
            return x @ self.param("w", init, (x.shape[-1], 3))

    model = bridge.ToNNX(Dot(), rngs=Rngs(0)).lazy_init(X)
    assert model.w.out_sharding == ("in", "out")
    spec = graph.get_partition_spec(graph.state(model))
    assert spec["w"].get_value() == jax.sharding.PartitionSpec("in", "out")
    assert np.allclose(model(X), X @ model.w[...])  # boxed again for Linen's apply


def test_duplicate_paths_across_collections_are_refused():
    class Clash(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.param("w", nn.initializers.zeros, (2,))
            self.variable("stats", "w", lambda: jnp.zeros(2))
            return x

    model = bridge.ToNNX(Clash(), rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"'params' and 'stats' both hold a variable at 'w'"):
        model.lazy_init(X)
    assert not any(isinstance(v, Variable) for v in vars(model).values())


def test_to_nnx_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"`module`.*pass an instance"):
        bridge.ToNNX(nn.Dense, rngs=Rngs(0))  # type: ignore[arg-type]  # the mistake under test
    with pytest.raises(TypeError, match=r"as `rngs`; got int.*nnx.Rngs\(0\)"):
        bridge.ToNNX(nn.Dense(3), rngs=0)  # type: ignore[arg-type]  # the mistake under test
    with pytest.raises(ValueError, match=r"`lazy_init` takes an NNX-style module"):
        bridge.lazy_init(lambda x: x, X)
    model = bridge.ToNNX(nn.Dense(3), rngs=Rngs(0))
    with pytest.raises(AttributeError, match=r"'kernel'.*call `lazy_init"):
        model.kernel  # noqa: B018  # the attribute read under test


# ToLinen / to_linen ---------------------------------------------------------------------


def test_to_linen_linear_matches_flax_bridge():
    ours = bridge.to_linen(bryo_nnx.Linear, 4, 3)
    theirs = flax_nnx.bridge.to_linen(flax_nnx.Linear, 4, 3)
    variables = ours.init(jax.random.key(0), X)
    assert list(variables) == ["params"]
    assert _equal_trees(variables, theirs.init(jax.random.key(0), X))
    assert np.array_equal(ours.apply(variables, X), theirs.apply(variables, X))


def test_to_linen_batch_stats_collection_round_trip():
    ours = bridge.ToLinen(bryo_nnx.BatchNorm, args=(4,))
    theirs = flax_nnx.bridge.ToLinen(flax_nnx.BatchNorm, args=(4,))
    variables = ours.init(jax.random.key(0), X)
    assert _equal_trees(variables, theirs.init(jax.random.key(0), X))
    assert np.array_equal(variables["batch_stats"]["mean"], np.zeros(4))  # the created state
    y, updates = ours.apply(variables, X * 3, mutable=["batch_stats"])
    z, expected = theirs.apply(variables, X * 3, mutable=["batch_stats"])
    assert np.array_equal(y, z) and _equal_trees(updates, expected)


def test_to_linen_dropout_takes_linen_rngs():
    model = bridge.to_linen(bryo_nnx.Dropout, rate=0.5)
    theirs = flax_nnx.bridge.to_linen(flax_nnx.Dropout, rate=0.5)
    ones = jnp.ones((4, 8))
    variables = model.init({"dropout": jax.random.key(0)}, ones)
    y1 = model.apply(variables, ones, rngs={"dropout": jax.random.key(1)})
    y2 = model.apply(variables, ones, rngs={"dropout": jax.random.key(2)})
    assert not np.array_equal(y1, y2)
    assert np.array_equal(y1, model.apply(variables, ones, rngs={"dropout": jax.random.key(1)}))
    assert np.array_equal(y1, theirs.apply(variables, ones, rngs={"dropout": jax.random.key(1)}))


@pytest.mark.slow
def test_to_linen_as_a_submodule_and_under_nn_vmap():
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            inner = nn.vmap(
                bridge.ToLinen,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=None,
                axis_size=2,
            )(bryo_nnx.Linear, args=(4, 3))
            return bridge.to_linen(bryo_nnx.Linear, 4, 3)(x), inner(x)

    variables = Outer().init(jax.random.key(0), X)
    assert variables["params"]["ToLinen_0"]["kernel"].shape == (4, 3)
    assert variables["params"]["VmapToLinen_0"]["kernel"].shape == (2, 4, 3)
    y, stacked = Outer().apply(variables, X)
    assert y.shape == (2, 3) and stacked.shape == (2, 2, 3)


def test_registered_variable_names_are_linen_collections():
    class Count(Variable):
        pass

    graph.register_variable_name("bridge_test_counts", Count)

    class Counter(bryo_nnx.Module):
        def __init__(self, rngs):
            self.count = Count(jnp.zeros((), jnp.int32))

        def __call__(self, x):
            self.count[...] += 1
            return x

    model = bridge.to_linen(Counter)
    variables = model.init(jax.random.key(0), X)
    assert int(variables["bridge_test_counts"]["count"]) == 0
    _, updates = model.apply(variables, X, mutable=True)
    assert int(updates["bridge_test_counts"]["count"]) == 1
    back = bridge.ToNNX(model, rngs=Rngs(0)).lazy_init(X)  # and back to a Variable
    assert type(back.count) is Count


def test_metadata_is_boxed_in_nnxmeta_or_the_linen_box():
    class Dot(bryo_nnx.Module):
        def __init__(self, init, rngs):
            self.w = Param(init(rngs.params(), (4, 3)))

        def __call__(self, x):
            return x @ self.w

    lecun = bryo_nnx.initializers.lecun_normal()
    plain = graph.with_partitioning(lecun, ("in", "out"))
    variables = bridge.to_linen(Dot, plain).init(jax.random.key(0), X)
    box = variables["params"]["w"]
    assert isinstance(box, bridge.NNXMeta) and box.metadata["out_sharding"] == ("in", "out")
    assert nn.get_partition_spec(variables)["params"]["w"] == jax.sharding.PartitionSpec(
        "in", "out"
    )
    assert isinstance(nn.unbox(variables)["params"]["w"], jax.Array)
    assert box.to_nnx_variable().out_sharding == ("in", "out")
    linen_style = bridge.with_partitioning(lecun, ("in", "out"))
    variables = bridge.to_linen(Dot, linen_style).init(jax.random.key(0), X)
    assert isinstance(variables["params"]["w"], nn.Partitioned)
    assert variables["params"]["w"].names == ("in", "out")
    raw = bridge.ToLinen(Dot, args=(plain,), metadata_fn=None).init(jax.random.key(0), X)
    assert isinstance(raw["params"]["w"], jax.Array)


def test_to_linen_methods_and_unknown_paths():
    class TwoWays(bryo_nnx.Module):
        def __init__(self, rngs):
            self.linear = bryo_nnx.Linear(4, 3, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)

        def double(self, x):
            return 2 * self.linear(x)

    model = bridge.to_linen(TwoWays)
    variables = model.init(jax.random.key(0), X)
    twice = 2 * model.apply(variables, X)
    assert np.allclose(model.apply(variables, X, nnx_method="double"), twice)
    assert np.allclose(model.apply(variables, X, method="double"), twice)
    extra = {"params": {**variables["params"], "stray": jnp.zeros(2)}}
    with pytest.warns(UserWarning, match=r"paths the module does not have.*\n  - stray"):
        model.apply(extra, X)


def test_to_linen_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"not an instance.*`to_linen\(Linear"):
        bridge.ToLinen(bryo_nnx.Linear(4, 3, rngs=Rngs(0)))  # type: ignore[arg-type]  # the mistake under test
    with pytest.raises(TypeError, match=r"`args` must be a tuple.*args=\(4,\)"):
        bridge.ToLinen(bryo_nnx.Linear, args=4)  # type: ignore[arg-type]  # the mistake under test
    model = bridge.to_linen(bryo_nnx.Linear, 4, 3)
    variables = model.init(jax.random.key(0), X)
    with pytest.raises(TypeError, match=r"`nnx_method='nope'` must name a method of Linear"):
        model.apply(variables, X, nnx_method="nope")


def test_round_trip_through_both_wrappers():
    linen_model = bridge.to_linen(bryo_nnx.Linear, 4, 3)
    nnx_model = bridge.ToNNX(linen_model, rngs=Rngs(0)).lazy_init(X)
    variables = linen_model.init(jax.random.key(0), X)  # Rngs(0).fork()'s params key differs
    graph.update(nnx_model, graph.State(variables["params"]))
    assert np.array_equal(nnx_model(X), linen_model.apply(variables, X))
    assert graph.state(nnx_model, Not(Param), Not(graph.Variable)) is not None


# functional -----------------------------------------------------------------------------


def test_functional_init_then_apply_matches_flax():
    ours = bridge.functional(bryo_nnx.Linear)(4, 3)
    theirs = flax_nnx.bridge.functional(flax_nnx.Linear)(4, 3)
    with pytest.raises(ValueError, match=r"call `state = f.init\(rngs=nnx.Rngs\(0\)\)` first"):
        ours.apply({})
    state = ours.init(rngs=Rngs(0))
    assert _equal_trees(
        graph.to_pure_dict(state), flax_nnx.to_pure_dict(theirs.init(rngs=flax_nnx.Rngs(0)))
    )
    out, (graphdef, new_state) = ours.apply(state)(X)
    assert np.array_equal(out, theirs.apply(theirs.init(rngs=flax_nnx.Rngs(0)))(X)[0])
    assert graphdef == ours.graphdef and _equal_trees(new_state, state)
    with pytest.raises(TypeError, match=r"module class \(e.g. `nnx.Linear`\) as `cls`"):
        bridge.functional(bryo_nnx.Linear(4, 3, rngs=Rngs(0)))  # type: ignore[arg-type]  # the mistake under test
