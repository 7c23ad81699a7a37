"""Damaged and crafted checkpoints: every one is a `CheckpointError` naming what and where.

Every file of a saved checkpoint is damaged four ways (a flipped bit, cut in half,
deleted, a run of bytes garbled); each restore must raise a `CheckpointError` naming the
file, and a changed array file names the state path whose values changed. Crafted
checkpoints (a consistent manifest over hostile contents: links out of the folder, `..`
paths, deep JSON, huge shapes) are refused before anything is allocated.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bryo
from bryo import CheckpointError, nnx, read_index, restore_state, save_state
from bryo._checkpoint_files import seal

MANIFEST = "bryo-manifest.json"
INDEX = "variables/metadata"
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"  # orbax coroutines left by a failed read
)
DAMAGES = ("bit flip", "truncation", "deletion", "garble")


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.table = nnx.Param(jax.random.normal(jax.random.key(1), (32, 32)))


def saved_state() -> bryo.State:
    return nnx.split(Model(nnx.Rngs(0, dropout=1)))[1]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "ckpt"
    save_state(path, saved_state())
    return path


def checkpoint_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def damage(file: Path, kind: str, rng: random.Random) -> None:
    """Damage one file as a failing disk or a careless edit would."""
    raw = bytearray(file.read_bytes())
    if kind == "deletion":
        file.unlink()
        return
    if kind == "truncation":
        del raw[len(raw) // 2 :]
    elif kind == "bit flip":
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    else:  # garble: a run of bytes overwritten by other bytes
        start = rng.randrange(len(raw))
        for i in range(start, min(start + 16, len(raw))):
            raw[i] = (raw[i] + 1 + rng.randrange(255)) % 256
    file.write_bytes(bytes(raw))


def copy_of(checkpoint: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint, copy)
    return copy


@pytest.mark.parametrize("kind", DAMAGES)
def test_every_damaged_file_is_named(checkpoint, tmp_path, kind):
    rng = random.Random(kind)
    names = checkpoint_files(checkpoint)
    assert len(names) > 15 and MANIFEST in names and INDEX in names
    abstract = jax.eval_shape(lambda: saved_state())
    for number, name in enumerate(names):
        copy = copy_of(checkpoint, tmp_path / str(number))
        damage(copy / name, kind, rng)
        for into in (None, abstract):
            with pytest.raises(CheckpointError) as caught:
                restore_state(copy, into)
            assert str(copy / name) in str(caught.value), (name, str(caught.value))


def test_a_changed_array_file_names_the_state_path(checkpoint, tmp_path):
    copy = copy_of(checkpoint, tmp_path)
    data = max((p for p in (copy / "arrays").rglob("*") if p.is_file()), key=os.path.getsize)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x04  # inside the 32x32 table's values
    data.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"values of state path\(s\) table") as caught:
        restore_state(copy)
    assert "does not match its SHA-256" in str(caught.value)
    assert str(data) in str(caught.value)


def test_added_and_linked_files_are_refused(checkpoint, tmp_path):
    copy = copy_of(checkpoint, tmp_path / "added")
    (copy / "arrays" / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes.txt: is not in the checkpoint's manifest"):
        restore_state(copy)
    other = copy_of(checkpoint, tmp_path / "other")
    copy = copy_of(checkpoint, tmp_path / "linked")
    shutil.rmtree(copy / "arrays")
    (copy / "arrays").symlink_to(other / "arrays")  # another checkpoint's weights
    with pytest.raises(CheckpointError, match=r"arrays: a link inside a checkpoint"):
        restore_state(copy)
    with pytest.raises(CheckpointError, match="a link inside a checkpoint"):
        read_index(copy)


# Crafted checkpoints: hostile contents under a manifest that matches them ----------------


def reseal(folder: Path) -> None:
    """Rewrite the manifest to match the folder, as someone crafting a checkpoint would."""
    seal(folder)


def crafted(checkpoint: Path, tmp_path: Path, edit) -> Path:
    """A copy whose index `edit` changed, resealed."""
    copy = copy_of(checkpoint, tmp_path)
    document = json.loads((copy / INDEX).read_text())
    edited = edit(document)
    (copy / INDEX).write_text(edited if isinstance(edited, str) else json.dumps(edited))
    reseal(copy)
    return copy


def _first_entry(field: str, value: object):
    def edit(document: dict) -> dict:
        document["variables"][0][field] = value
        return document

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_first_entry("path", ["..", "..", "etc", "passwd"]), r"key '\.\.' cannot name an array"),
        (_first_entry("path", ["a/../../b"]), r"as `a/\.\./\.\./b`, a file name leaving its"),
        (_first_entry("path", []), "is not a non-empty list of keys"),
        (_first_entry("path", [True]), "key True is not a string or an integer"),
        (_first_entry("shape", [10**12, 10**12]), "claims arrays of .* more than this machine"),
        (_first_entry("shape", [-1]), r"its shape \[-1\] is not a list of sizes"),
        (_first_entry("shape", [1] * 65), "is not a list of sizes"),
        (_first_entry("dtype", "object"), "dtype 'object' is not a numeric"),
        (_first_entry("dtype", "V1000000000000"), "is not a numeric, bool or PRNG key dtype"),
        (_first_entry("sha256", "xyz"), "sha256 is not 64 hexadecimal digits"),
        (_first_entry("metadata", {"value": 1}), "metadata holds 'value', which is a Variable"),
        (_first_entry("metadata", {"type": "x"}), "metadata holds 'type', which is a Variable"),
        (lambda d: {**d, "version": 7}, "index version 7, this bryo reads versions 1 and 2"),
        (lambda d: {**d, "variables": d["variables"] * 2}, "is listed twice"),
        (lambda d: "[" * 100_000 + "]" * 100_000, "nests deeper than 32 levels"),
        (lambda d: '{"version": 2, "variables": [' + "[" * 40 + "]" * 40 + "]}", "nests deeper"),
        (lambda d: "\xff{", "is not valid JSON"),
        (lambda d: [], r"not a bryo index \(no `variables` list\)"),
    ],
)
def test_crafted_indexes_are_refused_naming_the_index(checkpoint, tmp_path, edit, message):
    copy = crafted(checkpoint, tmp_path, edit)
    with pytest.raises(CheckpointError, match=message) as caught:
        restore_state(copy)
    assert str(copy / INDEX) in str(caught.value)


def test_a_path_with_no_array_behind_it_is_an_orbax_error_named(checkpoint, tmp_path):
    copy = crafted(checkpoint, tmp_path, _first_entry("path", ["elsewhere", "w"]))
    with pytest.raises(CheckpointError, match=r"arrays: orbax could not restore the arrays"):
        restore_state(copy)


def test_a_crafted_manifest_is_refused(checkpoint, tmp_path):
    copy = copy_of(checkpoint, tmp_path)
    document = json.loads((copy / MANIFEST).read_text())
    document["files"]["../../etc/passwd"] = {"size": 1, "sha256": "0" * 64}
    canonical = json.dumps(document["files"], sort_keys=True, separators=(",", ":"))
    document["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    (copy / MANIFEST).write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match=r"'\.\./\.\./etc/passwd' is not a file name inside"):
        restore_state(copy)


def test_a_special_file_is_refused_without_reading_it(checkpoint, tmp_path):
    copy = copy_of(checkpoint, tmp_path)
    os.mkfifo(copy / "arrays" / "pipe")  # reading it would block forever
    with pytest.raises(CheckpointError, match="pipe: not a regular file or folder"):
        restore_state(copy)


def test_huge_claimed_shapes_are_refused_before_allocating(checkpoint, tmp_path, monkeypatch):
    copy = crafted(checkpoint, tmp_path, _first_entry("shape", [2**40]))

    def never(*args, **kwargs):
        raise AssertionError("orbax was asked to restore")

    monkeypatch.setattr(bryo._checkpoint, "_restore_arrays", never)
    with pytest.raises(CheckpointError, match=r"claims arrays of [\d,]+ bytes"):
        restore_state(copy)


@pytest.mark.parametrize("stored", [{"chunks": [2**20]}, {"shape": [2**20], "chunks": [2**20]}])
def test_stored_metadata_claiming_more_than_the_index_is_refused(tmp_path, stored):
    # tensorstore reads an array's zarr metadata (in orbax's OCDBT files) and allocates a
    # whole chunk: a crafted checkpoint of a few KB claimed megabytes (gigabytes alike)
    # for an array of 4 values, and was read with them.
    import tensorstore as ts

    state = bryo.State.from_flat_path({("w",): bryo.VariableState(nnx.Param, jnp.arange(4.0))})
    save_state(tmp_path / "ckpt", state)
    kvstore = {"driver": "ocdbt", "base": f"{(tmp_path / 'ckpt' / 'arrays').as_uri()}/"}
    spec = {"driver": "zarr", "kvstore": {**kvstore, "path": "w/"}}
    metadata = {**ts.open(spec).result().spec().to_json()["metadata"], **stored}
    crafted = ts.open({**spec, "metadata": metadata}, create=True, delete_existing=True).result()
    crafted[:4].write(np.arange(4.0, dtype=np.float32) * 10).result()
    reseal(tmp_path / "ckpt")
    for abstract in (None, jax.eval_shape(lambda: state)):
        with pytest.raises(CheckpointError, match=r"state path w is stored with shape .* chunks"):
            restore_state(tmp_path / "ckpt", abstract)


def test_a_plain_file_layout_is_checked_too(tmp_path):
    # orbax reads plain zarr files instead of OCDBT where its `_METADATA` says
    # `use_ocdbt: false`: the same crafted chunk, written that way, is refused the same.
    import tensorstore as ts

    state = bryo.State.from_flat_path({("w",): bryo.VariableState(nnx.Param, jnp.arange(4.0))})
    save_state(tmp_path / "ckpt", state)
    arrays = tmp_path / "ckpt" / "arrays"
    for path in list(arrays.iterdir()):
        if path.name not in ("_METADATA", "commit_success.txt"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    metadata = json.loads((arrays / "_METADATA").read_text())
    (arrays / "_METADATA").write_text(json.dumps({**metadata, "use_ocdbt": False}))
    spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": f"{arrays}/w/"}}
    zarr = {"chunks": [2**20], "shape": [4], "dtype": "<f4", "compressor": {"id": "zstd"}}
    crafted = ts.open({**spec, "metadata": zarr}, create=True, delete_existing=True).result()
    crafted.write(np.arange(4.0, dtype=np.float32) * 10).result()
    reseal(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"state path w is stored with shape \[4\] in chunks"):
        restore_state(tmp_path / "ckpt", jax.eval_shape(lambda: state))


def test_an_abstract_state_that_does_not_fit_is_refused_before_allocating(checkpoint, tmp_path):
    abstract = jax.eval_shape(lambda: saved_state())
    flat = abstract.flat_state()
    flat["table",] = flat["table",].replace(jax.ShapeDtypeStruct((10**6, 10**6), jnp.float32))
    with pytest.raises(CheckpointError, match=r"state path table: the checkpoint holds"):
        restore_state(checkpoint, bryo.State.from_flat_path(flat))


def test_every_damage_kind_leaves_the_original_readable(checkpoint):
    """The campaign above works on copies; the saved checkpoint still restores exactly."""
    restored = restore_state(checkpoint).flat_state()
    for path, leaf in saved_state().flat_state().items():
        value, got = leaf.value, restored[path].value
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value, got = jax.random.key_data(value), jax.random.key_data(got)
        assert np.array_equal(np.asarray(value), np.asarray(got)), path
