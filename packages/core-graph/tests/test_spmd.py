"""Sharding metadata helpers (Flax 0.12's `nnx.spmd`): annotated initializers, eager
placement switches, transformed axes, abstract models. One device: meshes of size 1."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bryo_graph import (
    PARTITION_NAME,
    Object,
    Param,
    State,
    Variable,
    VariableMetadata,
    add_axis,
    add_sharding_axis,
    as_abstract,
    get_abstract_model,
    get_named_sharding,
    get_partition_spec,
    remove_axis,
    use_eager_sharding,
    using_eager_sharding,
    with_metadata,
    with_partitioning,
)

pytestmark = pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="needs jax.set_mesh")


def _mesh(names=("a", "b"), kinds=(AxisType.Auto, AxisType.Auto)):
    return jax.make_mesh((1,) * len(names), names, axis_types=kinds, devices=jax.devices()[:1])


class Model(Object):
    def __init__(self, sharding=("a", "b"), **metadata):
        init = with_partitioning(lambda: jnp.ones((2, 4)), sharding, **metadata)
        self.w = Param(init())
        self.b = Param(jnp.zeros(4))


def test_with_metadata_carries_metadata_into_the_variable():
    init = with_metadata(lambda shape: jnp.zeros(shape), tag="frozen", nickname=("x",))
    wrapped = init((3,))
    assert isinstance(wrapped, VariableMetadata)
    param = Param(wrapped, extra=1)
    assert param.shape == (3,)
    assert param.metadata == {"extra": 1, "tag": "frozen", "nickname": ("x",)}


def test_with_metadata_refuses_non_callables_and_hooks():
    with pytest.raises(TypeError, match="wraps an initializer"):
        with_metadata(jnp.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_get_value"):
        with_metadata(jnp.zeros, on_get_value=lambda v, x: x)


def test_with_partitioning_sets_out_sharding_and_places_under_a_mesh():
    mesh = _mesh()
    with jax.set_mesh(mesh):
        model = Model()
    assert model.w.out_sharding == ("a", "b")
    assert model.w[...].sharding.spec == P("a", "b")
    assert get_partition_spec(State({"w": model.w}))["w"].value == P("a", "b")


def test_mesh_metadata_places_without_a_current_mesh():
    mesh = _mesh()
    v = Variable(jnp.ones((2, 2)), out_sharding=("a", None), mesh=mesh)
    assert v[...].sharding.mesh == mesh
    assert v[...].sharding.spec == P("a", None)
    ns = NamedSharding(mesh, P(None, "b"))
    assert Variable(jnp.ones((2, 2)), out_sharding=ns)[...].sharding.spec == P(None, "b")


def test_mixed_axis_types_are_refused_naming_the_variable():
    mesh = _mesh(kinds=(AxisType.Auto, AxisType.Explicit))
    with pytest.raises(ValueError, match="Param: eager sharding needs a mesh whose axes"):
        Param(jnp.ones((2, 2)), out_sharding=("a", "b"), mesh=mesh)


def test_eager_sharding_can_be_turned_off():
    mesh = _mesh()
    assert using_eager_sharding()
    with use_eager_sharding(False), jax.set_mesh(mesh):
        assert not using_eager_sharding()
        off = Param(jnp.ones((2, 4)), out_sharding=("a", "b"))
    with jax.set_mesh(mesh):
        per_variable = Param(jnp.ones((2, 4)), out_sharding=("a", "b"), eager_sharding=False)
    assert using_eager_sharding()
    for v in (off, per_variable):
        assert getattr(v[...].sharding, "spec", P()) == P()
    with pytest.raises(TypeError, match="True or False"):
        use_eager_sharding("yes")  # type: ignore[arg-type]


def test_sharding_rules_metadata_maps_names_in_partition_specs():
    v = Param(jnp.ones((2, 4)), out_sharding=("rows", "b"), sharding_rules=(("rows", "a"),))
    assert get_partition_spec(State({"v": v}))["v"].value == P("a", "b")


def test_add_and_remove_axis_keep_metadata_in_step():
    calls = []

    class Tracked(Param):
        def add_axis(self, axis_index, axis_name):
            calls.append(("add", axis_index, axis_name))

        def remove_axis(self, axis_index, axis_name):
            calls.append(("remove", axis_index, axis_name))

    v = Tracked(jnp.ones((2, 4)), out_sharding=("din", "dout"), nickname=("in", "out"))
    meta = {PARTITION_NAME: "layers", "nickname": "nick"}
    add_axis(State({"v": v}), 0, meta)
    assert v.out_sharding == ("layers", "din", "dout")
    assert v.nickname == ("nick", "in", "out")
    remove_axis(State({"v": v}), 0, meta)
    assert v.out_sharding == ("din", "dout")
    assert v.nickname == ("in", "out")
    assert calls == [("add", 0, "layers"), ("remove", 0, "layers")]
    plain = Param(jnp.ones(2))
    add_axis([plain], 0, meta)  # no sharding metadata: only the method is called
    assert plain.metadata == {}


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, ("L", "a", "b")), (1, ("a", "L", "b")), (-1, ("a", "b", "L")), (3, ("a", "b", None, "L"))],
)
def test_add_axis_and_add_sharding_axis_insert_by_one_rule(index, expected):
    """Past the end: padded with None (Flax); negative: counted from the result's end."""
    v = Param(jnp.ones((2, 4)), out_sharding=("a", "b"))
    add_axis(State({"v": v}), index, {PARTITION_NAME: "L"})
    assert v.out_sharding == expected
    w = Param(jnp.ones((2, 4)), sharding=("a", "b"))
    assert add_sharding_axis(State({"w": w}), index, "L")["w"].out_sharding == expected
    remove_axis(State({"v": v}), index, {PARTITION_NAME: "L"})
    assert v.out_sharding == (("a", "b", None) if index == 3 else ("a", "b"))


def test_remove_axis_errors_name_the_variable_and_the_entries():
    v = Param(jnp.ones((2, 4)), out_sharding=("din", "dout"))
    with pytest.raises(ValueError, match=r"Param at layer.w is \('din', 'dout'\).*'layers'"):
        remove_axis(State({"layer": {"w": v}}), 0, {PARTITION_NAME: "layers"})
    assert v.out_sharding == ("din", "dout")
    with pytest.raises(ValueError, match="must name the new axis under 'partition_name'"):
        add_axis(State({"w": v}), 0, {"nickname": "x"})


def test_as_abstract_gives_abstract_values_their_named_sharding():
    mesh = _mesh()
    abstract = jax.eval_shape(lambda: Model(mesh=mesh))
    assert abstract.w[...].sharding is None
    annotated = as_abstract(abstract)
    assert annotated.w[...].sharding == NamedSharding(mesh, P("a", "b"))
    assert annotated.b[...].sharding is None  # no sharding metadata: unchanged
    assert annotated.w.out_sharding == ("a", "b")


def test_as_abstract_without_a_mesh_names_the_variable():
    abstract = jax.eval_shape(lambda: Model())
    with pytest.raises(ValueError, match="Param at w has sharding metadata but no mesh"):
        as_abstract(abstract)


def test_get_abstract_model_shards_every_leaf():
    mesh = _mesh()
    _, abstract = get_abstract_model(lambda: Model(), mesh)
    assert abstract["w"].value.sharding == NamedSharding(mesh, P("a", "b"))
    assert abstract["b"].value.sharding == NamedSharding(mesh, P())
    assert isinstance(abstract["w"].value, jax.ShapeDtypeStruct)
    shardings = get_named_sharding(abstract, mesh)
    assert shardings["w"].value == NamedSharding(mesh, P("a", "b"))


def test_as_abstract_takes_the_mesh_of_named_sharding_metadata():
    mesh = _mesh()
    v = Param(jax.ShapeDtypeStruct((2, 4), jnp.float32), out_sharding=NamedSharding(mesh, P("a")))
    annotated = as_abstract(State({"v": v}))  # no current mesh: the NamedSharding's
    assert annotated["v"][...].sharding == NamedSharding(mesh, P("a"))


def test_get_abstract_model_refuses_a_non_function_naming_the_argument():
    with pytest.raises(TypeError, match="`init_fn` must be a function of no arguments"):
        get_abstract_model(Model(), _mesh())  # type: ignore[arg-type]


def test_logical_axis_rules_map_names_for_placement_and_specs():
    from bryo_graph import logical_axis_rules

    mesh = _mesh()
    with jax.set_mesh(mesh), logical_axis_rules([("rows", "a")]):
        v = Param(jnp.ones((2, 4)), out_sharding=("rows", "b"))
        same = Param(jnp.ones(2), out_sharding=("rows",), sharding_rules=(("rows", "a"),))
        assert get_partition_spec(State({"v": v}))["v"].value == P("a", "b")
    assert v[...].sharding.spec == P("a", "b")
    assert same[...].sharding.spec == P("a")
    assert get_partition_spec(State({"v": v}))["v"].value == P("rows", "b")  # rules ended
    with logical_axis_rules([("rows", "a")]):
        with pytest.raises(ValueError, match="Param at v: its `sharding_rules` map 'rows' to 'b'"):
            bad = Param(jnp.ones(2), out_sharding=("rows",), sharding_rules=(("rows", "b"),))
            get_partition_spec(State({"v": bad}))
    with pytest.raises(ValueError, match="takes `\\(logical name, mesh axes\\)` pairs"):
        with logical_axis_rules(["rows"]):
            pass


def test_partition_specs_longer_than_the_value_are_refused_naming_the_path():
    from bryo_graph import ShardingError

    v = Param(jnp.ones(2), out_sharding=("a", "b"))
    with pytest.raises(ShardingError, match=r"Param at layer\.w names 2 axes \('a', 'b'\)"):
        get_partition_spec(State({"layer": {"w": v}}))
    abstract = jax.eval_shape(lambda: Model(sharding=("a", "b", None)))
    with jax.set_mesh(_mesh()), pytest.raises(ShardingError, match="Param at w names 3 axes"):
        as_abstract(abstract)
