"""Sharding metadata on one device: logical specs, rules, checks against a mesh, init.

Shapes are checked against `AbstractMesh`es, which need no devices; the runs on 8 host
devices and on two processes live in the top-level tests (they need their own process).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bryo_graph import (
    Object,
    Param,
    ShardingError,
    State,
    Variable,
    VariableState,
    add_sharding_axis,
    clone,
    get_named_sharding,
    get_partition_spec,
    logical_to_mesh,
    make_mesh,
    merge,
    shard,
    sharded_init,
    split,
    state,
    update,
)
from bryo_plugins import hookimpl

RULES = {"embed": None, "mlp": "model", "batch": "data"}
MESH_2x4 = AbstractMesh((2, 4), ("data", "model"))


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


def one_device_mesh():
    return make_mesh({"data": 1, "model": 1})


# Metadata survives the graph functions -----------------------------------------------------


def test_metadata_kept_through_split_merge_state_update_clone():
    model = MLP()
    graphdef, params, rest = split(model, Param, ...)
    assert params["w1"].out_sharding == ("embed", "mlp")
    assert "sharding" not in rest["count"].metadata
    rebuilt = merge(graphdef, params, rest)
    assert rebuilt.w1.out_sharding == ("embed", "mlp") and rebuilt.b1.out_sharding == ("mlp",)
    assert state(rebuilt, Param)["w2"].out_sharding == ("mlp", "embed")
    update(model, jax.tree.map(lambda x: x * 2, params))
    assert model.w1.out_sharding == ("embed", "mlp")
    assert clone(model).w2.out_sharding == ("mlp", "embed")


def test_get_partition_spec_of_state_and_of_model():
    specs = get_partition_spec(state(MLP()))
    assert specs["w1"].value == P("embed", "mlp")
    assert specs["w1"].out_sharding == ("embed", "mlp")  # metadata kept: same tree structure
    assert specs["count"].value == P()  # arrays without metadata are replicated
    assert jax.tree.structure(specs) == jax.tree.structure(get_partition_spec(MLP()))


def test_get_partition_spec_of_non_arrays_and_plain_pytrees():
    tree = {"a": jnp.ones(3), "v": VariableState(Variable, "text"), "n": None}
    specs = get_partition_spec(tree)
    assert specs["a"] == P() and specs["v"].value is None


def test_logical_to_mesh_maps_names():
    specs = logical_to_mesh(get_partition_spec(MLP()), RULES)
    assert specs["w1"].value == P(None, "model")
    assert specs["w2"].value == P("model", None)
    assert specs["count"].value == P()
    assert logical_to_mesh(P(("batch", "mlp"), None), RULES) == P(("data", "model"), None)


def test_rules_as_pairs_first_wins():
    rules = [("mlp", "model"), ("mlp", "data"), ("embed", None)]
    assert logical_to_mesh(P("embed", "mlp"), rules) == P(None, "model")


def test_rules_tuple_of_mesh_axes():
    assert logical_to_mesh(P("mlp"), {"mlp": ("data", "model")}) == P(("data", "model"))


def test_missing_rule_names_path_and_axis():
    with pytest.raises(
        ShardingError, match=r"logical axis 'mlp' of Param at b1 has no mesh mapping"
    ):
        logical_to_mesh(get_partition_spec(state(MLP(), Param)), {"embed": None})


def test_two_logical_axes_on_one_mesh_axis():
    with pytest.raises(
        ShardingError, match=r"Param at w1 would be sharded twice over the mesh axis 'data'"
    ):
        get_named_sharding(MLP(), MESH_2x4, {"embed": "data", "mlp": "data"})


def test_bad_rules_value():
    with pytest.raises(ShardingError, match="maps 'mlp' to 3"):
        logical_to_mesh(P("mlp"), {"mlp": 3})
    with pytest.raises(ShardingError, match="`rules` must map"):
        logical_to_mesh(P("mlp"), [("mlp",)])


# Checked against a mesh --------------------------------------------------------------------


def test_named_sharding_on_abstract_mesh():
    shardings = get_named_sharding(state(MLP()), MESH_2x4, RULES)
    assert shardings["w1"].value == NamedSharding(MESH_2x4, P(None, "model"))
    assert shardings["count"].value == NamedSharding(MESH_2x4, P())


def test_not_divisible_names_path_dimension_and_axis():
    mesh = AbstractMesh((2, 3), ("data", "model"))
    with pytest.raises(
        ShardingError, match=r"dimension 0 of Param at b1 \(logical axis 'mlp', size 8\)"
    ):
        get_named_sharding(state(MLP(), Param), mesh, RULES)


def test_mesh_axis_missing_from_mesh():
    with pytest.raises(ShardingError, match=r"'mlp' of Param at b1 maps to the mesh axis 'tensor'"):
        get_named_sharding(MLP(), MESH_2x4, {"embed": None, "mlp": "tensor"})


def test_too_many_logical_axes():
    tree = {"w": VariableState(Param, jnp.ones(4), sharding=("embed", "mlp"))}
    with pytest.raises(ShardingError, match=r"Param at w names 2 axes .* 1 dimensions"):
        get_named_sharding(tree, MESH_2x4, RULES)


def test_without_rules_names_must_be_mesh_axes():
    tree = {"w": VariableState(Param, jnp.ones((4, 8)), sharding=("data", "model"))}
    assert get_named_sharding(tree, MESH_2x4)["w"].value.spec == P("data", "model")
    with pytest.raises(
        ShardingError, match=r"'mlp' of Param at b1 is not a mesh axis .* no `rules`"
    ):
        get_named_sharding(MLP(), MESH_2x4)


def test_bad_metadata_and_bad_mesh():
    tree = {"w": VariableState(Param, jnp.ones(4), sharding=3)}
    with pytest.raises(ShardingError, match="`sharding` metadata of Param at w must be a tuple"):
        get_partition_spec(tree)
    with pytest.raises(ShardingError, match=r"`mesh` must be a `jax\.sharding\.Mesh`"):
        get_named_sharding(MLP(), {"data": 2})


def test_errors_leave_model_unchanged():
    model = MLP()
    before = state(model)
    with pytest.raises(ShardingError):
        shard(model, MESH_2x4, {"embed": None})
    assert state(model) == before


# Placing models ----------------------------------------------------------------------------


def test_sharded_init_matches_eager_init():
    mesh = one_device_mesh()
    model = sharded_init(lambda: MLP(seed=3), mesh, RULES)
    eager = MLP(seed=3)
    assert isinstance(model, MLP)
    assert model.w1.out_sharding == ("embed", "mlp")
    assert model.w1.value.sharding == NamedSharding(mesh, P(None, "model"))
    np.testing.assert_allclose(model.w1.value, eager.w1.value)
    np.testing.assert_allclose(model(jnp.ones((2, 4))), eager(jnp.ones((2, 4))))


def test_sharded_init_checks_before_computing():
    calls = []

    def create():
        calls.append(1)
        return MLP()

    with pytest.raises(ShardingError, match="no mesh mapping"):
        sharded_init(create, one_device_mesh(), {"embed": None})
    assert len(calls) == 1  # only the abstract trace ran
    with pytest.raises(TypeError, match="`create` must be a function"):
        sharded_init(42, one_device_mesh(), RULES)


def test_shard_in_place_and_under_jit():
    mesh = one_device_mesh()
    model = MLP()
    assert shard(model, mesh, RULES) is model
    assert model.w1.value.sharding.spec == P(None, "model")

    jaxpr = jax.make_jaxpr(lambda params: shard(params, mesh, RULES))(state(model, Param))
    assert "sharding_constraint" in str(jaxpr)  # under a trace: constraints, not device_put


def test_add_sharding_axis_on_state_and_model():
    stacked = add_sharding_axis(state(MLP()), 0, None)
    assert stacked["w1"].out_sharding == (None, "embed", "mlp")
    assert "sharding" not in stacked["count"].metadata
    assert add_sharding_axis(state(MLP()), -1, "layers")["b1"].out_sharding == ("mlp", "layers")
    model = MLP()
    assert add_sharding_axis(model, 0, "layers") is model
    assert model.w2.out_sharding == ("layers", "mlp", "embed")


# Meshes ------------------------------------------------------------------------------------


def test_make_mesh_lays_out_auto_axes_in_order():
    mesh = make_mesh({"data": 1, "model": 1})
    assert tuple(mesh.axis_names) == ("data", "model") and dict(mesh.shape) == {
        "data": 1,
        "model": 1,
    }
    assert set(mesh.axis_types) == {AxisType.Auto}  # as Mesh(devices, names) makes them


def test_make_mesh_needs_enough_devices():
    with pytest.raises(ShardingError, match=r"needs 8 devices but there are 1"):
        make_mesh({"data": 4, "model": 2}, devices=jax.devices()[:1])


# Values with their own axis names (the hook) -----------------------------------------------


class Labelled:
    """A toy array type with axis names, as a named-axis backend would have."""

    def __init__(self, array, names):
        self.array, self.names = array, names


jax.tree_util.register_pytree_node(
    Labelled, lambda x: ((x.array,), x.names), lambda names, c: Labelled(c[0], names)
)


def test_values_with_own_axis_names(bryo_plugin_manager):
    class Names:
        @hookimpl
        def bryo_graph_logical_axes(self):
            return {Labelled: lambda value: value.names}

    bryo_plugin_manager.register(Names())
    tree = {
        "x": Labelled(jnp.ones((2, 8)), ("batch", "mlp")),
        "v": VariableState(Param, Labelled(jnp.ones(8), ("mlp",))),
        "meta_wins": VariableState(Param, Labelled(jnp.ones(8), ("mlp",)), sharding=(None,)),
    }
    specs = get_partition_spec(tree)
    assert specs["x"] == P("batch", "mlp") and specs["v"].value == P("mlp")
    assert specs["meta_wins"].value == P(None)
    shardings = get_named_sharding(tree, MESH_2x4, RULES)
    assert shardings["x"].spec == P("data", "model")
    placed = jax.device_put(tree, get_named_sharding(tree, one_device_mesh(), RULES))
    assert placed["v"].value.array.sharding.spec == P("model")


def test_a_raising_axes_function_is_named_with_its_plugin(bryo_plugin_manager):
    """It surfaced bare from inside `get_partition_spec`, naming neither plugin nor value."""
    from bryo_plugins import PluginCallbackError

    class Names:
        @hookimpl
        def bryo_graph_logical_axes(self):
            return {Labelled: lambda value: value.missing}

    bryo_plugin_manager.register(Names(), name="acme-names")
    with pytest.raises(PluginCallbackError) as raised:
        get_partition_spec({"x": Labelled(jnp.ones((2, 8)), ("batch", "mlp"))})
    message = str(raised.value)
    assert "The logical axes function for Labelled" in message
    assert (
        "from plugin 'acme-names', hook `bryo_graph_logical_axes`, raised AttributeError" in message
    )
    assert isinstance(raised.value, AttributeError)


def test_state_with_empty_sharding_is_replicated():
    tree = State({"w": VariableState(Param, jnp.ones((4, 4)), sharding=())})
    assert get_named_sharding(tree, MESH_2x4, RULES)["w"].value.spec == P()
