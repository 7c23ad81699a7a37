"""Checkpoints through orbax: a whole model state, into an abstract state, never unpickled."""

import hashlib
import json
import os
import pickle
import threading

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bryo
from bryo import CheckpointError, nnx, read_index, restore_state, save_state


class Model(nnx.Module):
    def __init__(self, width: int, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(3, width, rngs=rngs)
        self.norm = nnx.BatchNorm(width, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.seed = nnx.Param(jax.random.key(7))  # a typed PRNG key as a parameter
        self.sharded = nnx.Param(jnp.arange(4.0), sharding=("mlp",))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.drop(self.norm(self.linear(x)))


def trained_state(width: int = 4) -> tuple[nnx.GraphDef, bryo.State]:
    model = Model(width, nnx.Rngs(0, dropout=1))
    model.train()
    model(jnp.ones((2, 3)))  # moves the batch statistics and the dropout rng count
    return nnx.split(model)


def abstract_state(width: int = 4) -> bryo.State:
    return nnx.split(nnx.eval_shape(lambda: Model(width, nnx.Rngs(0, dropout=1))))[1]


def same(a: jax.Array, b: jax.Array) -> bool:
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return a.dtype == b.dtype and bool(
            jnp.all(jax.random.key_data(a) == jax.random.key_data(b))
        )
    return a.dtype == b.dtype and bool(jnp.all(a == b))


def assert_same_state(restored: bryo.State, saved: bryo.State) -> None:
    got, want = restored.flat_state(), saved.flat_state()
    assert list(got) == list(want)
    for path, leaf in want.items():
        assert got[path].type is leaf.type, path
        assert got[path].metadata == leaf.metadata, path
        assert same(got[path].value, leaf.value), path


@pytest.mark.slow
def test_whole_state_round_trips_into_an_eval_shape_state(tmp_path):
    graphdef, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    restored = restore_state(tmp_path / "ckpt", abstract_state())
    assert_same_state(restored, saved)
    types = {leaf.type for leaf in restored.flat_state().values()}
    assert {nnx.Param, nnx.BatchStat, nnx.RngKey, nnx.RngCount} <= types
    model = nnx.merge(graphdef, restored)
    assert int(model.drop.rngs.count.value) == 1  # the count advanced before saving


def test_without_abstract_the_index_rebuilds_types_and_metadata(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    assert_same_state(restore_state(tmp_path / "ckpt"), saved)
    entry = next(e for e in read_index(tmp_path / "ckpt") if e.path == ("sharded",))
    assert entry.type.endswith(".Param") and entry.metadata["out_sharding"] == ("mlp",)


def test_restore_places_arrays_on_a_mesh_by_logical_axes(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    mesh = (
        bryo.parse_mesh_spec(f"data={len(jax.devices())}")
        if hasattr(bryo, "parse_mesh_spec")
        else None
    )
    mesh = mesh or jax.make_mesh((len(jax.devices()),), ("data",))
    restored = restore_state(tmp_path / "ckpt", abstract_state(), mesh=mesh, rules={"mlp": "data"})
    sharding = restored.flat_state()[("sharded",)].value.sharding
    assert isinstance(sharding, jax.sharding.NamedSharding)
    assert sharding.spec == jax.sharding.PartitionSpec("data")
    assert_same_state(restored, saved)


def test_a_sharding_on_an_abstract_mesh_asks_for_a_mesh(tmp_path):
    # `jax.eval_shape` of a sharded state gives shardings on an AbstractMesh (jax 0.8+):
    # orbax failed on them with "_device_assignment is not implemented".
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    flat = abstract_state().flat_state()
    leaf = flat["sharded",]
    on_abstract = jax.sharding.NamedSharding(mesh.abstract_mesh, jax.sharding.PartitionSpec())
    shape, dtype = leaf.value.shape, leaf.value.dtype
    flat["sharded",] = leaf.replace(jax.ShapeDtypeStruct(shape, dtype, sharding=on_abstract))
    abstract = bryo.State.from_flat_path(flat)
    with pytest.raises(CheckpointError, match=r"path sharded: .* on an abstract mesh .* `mesh=`"):
        restore_state(tmp_path / "ckpt", abstract)
    restored = restore_state(tmp_path / "ckpt", abstract, mesh=mesh, rules={"mlp": "data"})
    assert_same_state(restored, saved)


def test_loading_never_unpickles(tmp_path, monkeypatch):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load unpickled something")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(np, "load", refuse)
    assert_same_state(restore_state(tmp_path / "ckpt", abstract_state()), saved)
    assert_same_state(restore_state(tmp_path / "ckpt"), saved)


def test_a_different_shape_is_named_with_its_path(tmp_path):
    _, saved = trained_state(width=4)
    save_state(tmp_path / "ckpt", saved)
    with pytest.raises(
        CheckpointError,
        match=r"state path linear/bias: the checkpoint holds a Param float32\[4\], "
        r"the abstract state wants a Param float32\[5\]",
    ):
        restore_state(tmp_path / "ckpt", abstract_state(width=5))


def test_missing_and_extra_paths_are_named(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    params = abstract_state().filter(nnx.Param)
    with pytest.raises(
        CheckpointError, match=r"holds \d+ path\(s\) the abstract state lacks \(drop/rngs/count"
    ):
        restore_state(tmp_path / "ckpt", params)
    save_state(tmp_path / "params", saved.filter(nnx.Param))
    with pytest.raises(
        CheckpointError, match="state path drop/rngs/count is not in the checkpoint"
    ):
        restore_state(tmp_path / "params", abstract_state())


def test_not_a_checkpoint_and_unknown_types_are_explained(tmp_path):
    with pytest.raises(CheckpointError, match="is not a bryo checkpoint"):
        restore_state(tmp_path)

    class Private(nnx.Variable):
        pass

    state = bryo.State.from_flat_path({("x",): bryo.VariableState(Private, jnp.zeros(2))})
    save_state(tmp_path / "ckpt", state)
    with pytest.raises(CheckpointError, match="mesh=` needs `abstract="):
        restore_state(tmp_path / "ckpt", mesh=jax.make_mesh((1,), ("data",)))
    assert restore_state(tmp_path / "ckpt").flat_state()[("x",)].type is Private


def test_paths_through_a_file_are_explained(tmp_path):
    _, saved = trained_state()
    (tmp_path / "notes.txt").write_text("notes")
    for path in (tmp_path / "notes.txt" / "ckpt", tmp_path / "notes.txt" / "deeper" / "ckpt"):
        with pytest.raises(CheckpointError, match=r"notes.txt.* cannot be made, a part of that"):
            save_state(path, saved)
        with pytest.raises(CheckpointError, match=r"is not a bryo checkpoint \(no such folder"):
            restore_state(path)
    with pytest.raises(CheckpointError, match=r"notes.txt is not a bryo checkpoint \(a file\)"):
        restore_state(tmp_path / "notes.txt")
    with pytest.raises(CheckpointError, match="needs a folder name of its own"):
        save_state(tmp_path / "sub" / "..", saved, force=True)
    assert (tmp_path / "notes.txt").read_text() == "notes"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_non_array_values_are_refused_when_saving(tmp_path):
    state = bryo.State.from_flat_path({("a", "b"): bryo.VariableState(nnx.Param, "text")})
    with pytest.raises(CheckpointError, match="state path a/b: a str is not an array"):
        save_state(tmp_path / "ckpt", state)
    assert not (tmp_path / "ckpt").exists()


@settings(max_examples=8, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 3), max_size=2), min_size=1, max_size=3),
    dtype=st.sampled_from(["float32", "int32", "bool", "bfloat16"]),
)
def test_round_trip_of_any_shapes_and_dtypes(tmp_path_factory, shapes, dtype):
    directory = tmp_path_factory.mktemp("ckpt") / "c"
    flat = {
        ("layers", i, "w"): bryo.VariableState(nnx.Param, jnp.full(shape, i % 2, dtype))
        for i, shape in enumerate(shapes)
    }
    state = bryo.State.from_flat_path(flat)
    save_state(directory, state)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
    assert_same_state(restore_state(directory, abstract), state)
    assert_same_state(restore_state(directory), state)


def test_raw_array_attributes_round_trip_as_raw_leaves(tmp_path):
    class Raw(nnx.Module):
        def __init__(self) -> None:
            self.scale = jnp.arange(3.0)  # a raw array stays raw in States (Flax NNX 0.12)
            self.bias = nnx.Param(jnp.ones(2))

    graphdef, saved = nnx.split(Raw())
    save_state(tmp_path / "ckpt", saved)
    assert {entry.type for entry in read_index(tmp_path / "ckpt")} >= {"array"}
    for restored in (
        restore_state(tmp_path / "ckpt"),
        restore_state(tmp_path / "ckpt", nnx.split(nnx.eval_shape(Raw))[1]),
    ):
        assert isinstance(restored["scale"], jax.Array) and same(restored["scale"], saved["scale"])
        assert restored["bias"].type is nnx.Param
        assert float(nnx.merge(graphdef, restored).scale[2]) == 2.0


def test_force_replaces_checkpoints_only(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    with pytest.raises(CheckpointError, match=r"ckpt already exists; pass `force=True`"):
        save_state(tmp_path / "ckpt", saved)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "thesis.tex").write_text("years of work")
    (tmp_path / "notes.txt").write_text("notes")
    for name in ("work", "notes.txt"):
        with pytest.raises(CheckpointError, match=f"{name} exists and is not a checkpoint"):
            save_state(tmp_path / name, saved, force=True)
    assert (tmp_path / "work" / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "notes.txt").read_text() == "notes"
    (tmp_path / "latest").symlink_to(tmp_path / "ckpt")  # a link is replaced, not followed
    save_state(tmp_path / "latest", saved.filter(nnx.Param), force=True)
    assert not (tmp_path / "latest").is_symlink()
    assert_same_state(restore_state(tmp_path / "ckpt"), saved)
    save_state(tmp_path / "ckpt", saved.filter(nnx.Param), force=True)
    assert_same_state(restore_state(tmp_path / "ckpt"), saved.filter(nnx.Param))
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "latest", "notes.txt", "work"]


def test_leftovers_of_unfinished_saves_are_never_restored_and_the_next_save_removes_them(
    tmp_path,
):
    _, saved = trained_state()
    # killed while writing: an incomplete new folder, or orbax's own (when orbax replaced it)
    (tmp_path / "ckpt.bryo-new-0123456789abcdef" / "arrays").mkdir(parents=True)
    (tmp_path / "ckpt.orbax-checkpoint-tmp" / "arrays").mkdir(parents=True)
    with pytest.raises(
        CheckpointError, match=r"ckpt is not a bryo checkpoint .*An unfinished save left ckpt\."
    ):
        restore_state(tmp_path / "ckpt")
    save_state(tmp_path / "ckpt", saved)
    save_state(tmp_path / "ckpt2", saved.filter(nnx.Param))  # a prefix of another name
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "ckpt2"]
    # killed between the two renames of a replace: the complete new folder is the checkpoint
    os.rename(tmp_path / "ckpt", tmp_path / "ckpt.bryo-new-00000000000000aa")
    assert_same_state(restore_state(tmp_path / "ckpt"), saved)
    assert len(read_index(tmp_path / "ckpt")) == len(saved.flat_state())
    with pytest.raises(CheckpointError, match="already exists"):
        save_state(tmp_path / "ckpt", saved)  # the next save puts it in place first
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "ckpt2"]
    assert_same_state(restore_state(tmp_path / "ckpt2"), saved.filter(nnx.Param))


def test_checkpoints_from_before_checksums_still_restore(tmp_path):
    """Index version 1 (before checksums): the same orbax files, no manifest."""
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    (tmp_path / "ckpt" / "bryo-manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"bryo-manifest.json: missing; this checkpoint"):
        restore_state(tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "variables" / "metadata"
    document = json.loads(index.read_text())
    document["version"] = 1
    for entry in document["variables"]:
        del entry["sha256"]
    index.write_text(json.dumps(document))
    assert_same_state(restore_state(tmp_path / "ckpt"), saved)
    assert_same_state(restore_state(tmp_path / "ckpt", abstract_state()), saved)
    assert {entry.sha256 for entry in read_index(tmp_path / "ckpt")} == {None}


def test_orbax_reads_a_bryo_checkpoint_itself(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    arrays = ocp.StandardCheckpointer().restore(tmp_path / "ckpt" / "arrays")
    assert np.array_equal(arrays["linear"]["kernel"], saved["linear"]["kernel"].value)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        items = checkpointer.restore(
            tmp_path / "ckpt",
            ocp.args.Composite(arrays=ocp.args.StandardRestore(), variables=ocp.args.JsonRestore()),
        )
    assert np.array_equal(items["arrays"]["norm"]["mean"], saved["norm"]["mean"].value)
    assert items["variables"]["version"] == 2


@pytest.mark.parametrize(
    ("flat", "message"),
    [
        ({("/etc", "w"): 1.0}, r"state path /etc/w would be stored by orbax as `/etc.w`"),
        ({("a", "b/.."): 1.0}, r"as `a\.b/\.\.`, a file name leaving its folder"),
        ({(".", "/x"): 1.0}, r"key '\.' cannot name an array"),
        ({("..", "w"): 1.0}, r"state path \.\./w: key '\.\.' cannot name an array"),
        ({("a.b", "c"): 1.0, ("a", "b.c"): 2.0}, r"a\.b/c and a/b\.c would both be stored as"),
        ({("layers", 0): 1.0, ("layers", "0"): 2.0}, r"would both be stored as `layers\.0`"),
    ],
)
def test_paths_orbax_cannot_store_apart_are_refused_before_writing(tmp_path, flat, message):
    state = bryo.State.from_flat_path(
        {path: bryo.VariableState(nnx.Param, jnp.full(2, value)) for path, value in flat.items()}
    )
    with pytest.raises(CheckpointError, match=message):
        save_state(tmp_path / "ckpt", state)
    assert not os.listdir(tmp_path)


def test_the_index_records_each_arrays_checksum(tmp_path):
    _, saved = trained_state()
    save_state(tmp_path / "ckpt", saved)
    entries = {entry.path: entry for entry in read_index(tmp_path / "ckpt")}
    kernel = np.asarray(saved["linear"]["kernel"].value)
    assert entries["linear", "kernel"].sha256 == hashlib.sha256(kernel.tobytes()).hexdigest()
    key = np.asarray(jax.random.key_data(saved["seed"].value))
    assert entries["seed",].sha256 == hashlib.sha256(key.tobytes()).hexdigest()


def test_keys_with_slashes_round_trip(tmp_path):
    """Keys like `trunk/stacked/down:0` (a MoX node's name) are kept: orbax stores them."""
    state = bryo.State.from_flat_path(
        {("lora", "trunk/stacked/down:0"): bryo.VariableState(nnx.Param, jnp.arange(3.0))}
    )
    save_state(tmp_path / "ckpt", state)
    assert_same_state(restore_state(tmp_path / "ckpt"), state)


def test_threads_save_and_restore_their_own_checkpoints(tmp_path):
    """orbax's Checkpointer fails when two threads use it at once (on different folders
    too: FileNotFoundError in its temporary folders); bryo's saves take turns."""
    _, state = trained_state()
    errors: list[BaseException] = []

    def save_and_restore(name: str) -> None:
        try:
            save_state(tmp_path / name, state)
            restored = restore_state(tmp_path / name, abstract_state())
            assert jnp.array_equal(restored["sharded"].value, state["sharded"].value)
        except BaseException as error:  # reported below, with the thread's name
            errors.append(error)

    threads = [threading.Thread(target=save_and_restore, args=(f"ck{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck0", "ck1", "ck2"]
