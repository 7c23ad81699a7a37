"""Fuzzing the loaders: `loads` with mutated MoX files, `restore_state` with mutated checkpoints.

Valid XML and YSON files (module calls, custom derivatives, scan/cond regions, constants,
literals, PRNG keys) are mutated the ways a corrupted or hostile file differs from a
good one: truncated, numbers, shapes, types and attribute values edited, elements
nested deeper or duplicated, lines dropped, bytes flipped. Whatever comes out, `loads`
must either return a MoX that writes and reads back the same, or raise
`MoxSerializationError` (`MoxLimitError` included) — never another exception — and stay
within a memory budget (traced by `tracemalloc`, which numpy reports to).

Checkpoints get the same treatment at the end of the file: a mutated checkpoint restores
the saved state bit for bit or raises `CheckpointError`, never another exception.

The number of examples is small in CI; `BRYO_FUZZ_EXAMPLES=10000` runs a long campaign.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import tracemalloc
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bryo
import bryo_mox as yax
from bryo import nnx
from bryo_mox import MoxSerializationError
from bryo_mox.testing import MLP, Linear, ToyBackend, document_signature
from bryo_plugins import new_plugin_manager, use_plugin_manager

EXAMPLES = int(os.environ.get("BRYO_FUZZ_EXAMPLES", "25"))
#: Python-visible bytes one load may allocate at its peak (the files are a few KB).
MEMORY_BUDGET = 64 * 2**20
FORMATS = ("xml", "yson")


def _models() -> list[yax.Mox]:
    key = jax.random.key(0)
    x = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    mlp = MLP((4, 3, 4), key=key)
    table = np.arange(4.0, dtype=np.float32)

    def scanned(v):
        def body(c, e):
            return c * 0.5 + e, jnp.where(c > 0, c, -c)

        return jax.lax.scan(body, v[0], v)

    def branching(p, v):
        return jax.lax.cond(p, jnp.sin, lambda u: jnp.cos(u) + table, v)

    def keyed(k, v):
        return v + jax.random.normal(k, v.shape), jax.random.split(k)

    return [
        yax.make_mox(lambda m, v: m(v))(mlp, x),
        yax.make_mox(lambda m, v: jax.nn.relu(m(v)) * 2)(Linear(4, 4, key=key), x),
        yax.make_mox(scanned)(x),
        yax.make_mox(branching)(True, jnp.ones(4)),
        yax.make_mox(keyed)(key, x),
    ]


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[tuple[str, str], ...]:
    """(format, text) of every model in every format."""
    pm = new_plugin_manager()
    pm.register(ToyBackend())
    with use_plugin_manager(pm):
        models = _models()
        return tuple((f, yax.dumps(m, f)) for m in models for f in FORMATS)


NUMBER = re.compile(r"(?<![A-Za-z_<])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
TYPE = re.compile(r"\b(?:f32|f64|i32|u32|bool|key<fry>)\[[0-9,]*\](?:\{weak\})?")
SHAPE = re.compile(r"\[([0-9,]*)\]")
XML_ATTR = re.compile(r'(\w+)="([^"]*)"')
YSON_VALUE = re.compile(r'("[\w]+")=("(?:[^"\\]|\\.)*"|[^;>\]}]+)')

NUMBERS = ["0", "-1", "1", "3", "99", "1" + "0" * 100, "2147483648", "1e308", "-0.0", "nan"]
TYPES = ["f32[]", "f32[2,4]", "i32[4]", "bool[]", "f16[8000,8000]", "key<fry>[]", "f99[2]"]
SHAPES = ["[]", "[0]", "[1000000000,1000000000]", "[2,4,1]", "[" + "1," * 70 + "1]", "[-1]"]
VALUES = [
    "array(0, '(8000,8000)f8')",
    "array('AAAA', dtype('float64'), (8000, 8000))",
    "float('inf')",
    "(((((((((",
    "__import__('os').system('true')",
    "dtype('float32')",
    "(" * 300 + ")" * 300,
    "x" * 5000,
    "GatherDimensionNumbers(1, 2, 3, 4, 5, 6, 7)",
    "1" + "0" * 50,
    "",
    "-",
]


def _replace_one(text: str, pattern: re.Pattern[str], data: st.DataObject, choices: list[str]):
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    match = data.draw(st.sampled_from(matches))
    new = data.draw(st.sampled_from(choices))
    return text[: match.start()] + new + text[match.end() :]


def _replace_attribute(text: str, format: str, data: st.DataObject) -> str:
    pattern = XML_ATTR if format == "xml" else YSON_VALUE
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    match = data.draw(st.sampled_from(matches))
    value = data.draw(st.sampled_from(VALUES))
    if format == "xml":
        new = f'{match.group(1)}="{value.replace(chr(34), "&quot;")}"'
    else:
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        new = f'{match.group(1)}=<"py"=%true>"{escaped}"'
    return text[: match.start()] + new + text[match.end() :]


def _lines(text: str, data: st.DataObject, kind: str) -> str:
    lines = text.split("\n")
    i = data.draw(st.integers(0, len(lines) - 1))
    if kind == "drop":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    else:  # swap with a neighbour
        j = min(i + 1, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _nest(text: str, format: str, data: st.DataObject) -> str:
    """Wrap the root's content in many module calls (or jit regions), balanced or not."""
    depth = data.draw(st.sampled_from([2, 150, 199, 201, 260, 5000]))
    balanced = data.draw(st.booleans())
    if format == "xml":
        start = text.find(">") + 1
        end = text.rfind("</mox>") if "</mox>" in text else len(text)
        opener = '<module_call type="A" name="a" state_inputs="0" state_outputs="0">'
        closer = "</module_call>" if balanced else ""
        return text[:start] + opener * depth + text[start:end] + closer * depth + text[end:]
    opener = '<"primitive"="module_call";"inputs"=[];"results"=[]>['
    closer = "]" if balanced else ""
    start = text.find(">[") + 2 if ">[" in text else len(text)
    return text[:start] + opener * depth + closer * depth + ";" + text[start:]


def _bytes(raw: bytes, data: st.DataObject) -> bytes:
    i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
    junk = data.draw(
        st.sampled_from([b"\x00", b"\xff\xfe", b"\xc3", b"\x01", b"<!DOCTYPE x>", b"&lol;", b"\n"])
    )
    return raw[:i] + junk + raw[i + 1 :]


#: Edits that keep the syntax valid come up more often: they reach the document builder.
MUTATIONS = (
    *("number", "type", "shape", "attribute") * 3,
    *("truncate", "drop", "duplicate", "swap", "nest", "bytes"),
)


def mutate(format: str, text: str, data: st.DataObject) -> str | bytes:
    kinds = data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3))
    out: str | bytes = text
    for kind in kinds:
        if isinstance(out, bytes):
            out = out.decode("utf-8", "replace")
        if kind == "truncate":
            out = out[: data.draw(st.integers(0, len(out)))]
        elif kind == "number":
            out = _replace_one(out, NUMBER, data, NUMBERS)
        elif kind == "type":
            out = _replace_one(out, TYPE, data, TYPES)
        elif kind == "shape":
            out = _replace_one(out, SHAPE, data, SHAPES)
        elif kind == "attribute":
            out = _replace_attribute(out, format, data)
        elif kind in ("drop", "duplicate", "swap"):
            out = _lines(out, data, kind)
        elif kind == "nest":
            out = _nest(out, format, data)
        else:
            out = _bytes(out.encode(), data)
    return out


def check_load(format: str, data_in: str | bytes) -> None:
    """`loads` round-trips or raises MoxSerializationError, within the memory budget."""
    tracemalloc.start()
    try:
        try:
            loaded = yax.loads(data_in, format)
        except MoxSerializationError:
            loaded = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BUDGET, f"a load peaked at {peak / 2**20:.1f} MiB"
    if loaded is not None:
        again = yax.loads(yax.dumps(loaded, format), format)
        assert document_signature(again) == document_signature(loaded)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 100,  # CI runs the same examples every time
)
@given(st.data())
def test_mutated_files_round_trip_or_raise_serialization_errors(data):
    format, text = data.draw(st.sampled_from(corpus()))
    check_load(format, mutate(format, text, data))


@pytest.mark.parametrize(("format", "text"), corpus())
def test_the_corpus_itself_round_trips(format, text):
    check_load(format, text)


# Checkpoints -----------------------------------------------------------------------------
#
# A saved checkpoint mutated the ways a damaged disk or a hostile sender would: a file's
# bytes flipped, garbled, cut or grown, files deleted, added or replaced by links, index
# fields set to hostile values, the index nested deeply; half the time the manifest is
# then rewritten to match (a crafted checkpoint). Every restore, with and without an
# abstract state, raises `CheckpointError` or returns a State: for a damaged checkpoint
# (manifest not rewritten), the saved state bit for bit.


class _Checkpointed(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)


def _checkpoint_state() -> bryo.State:
    return nnx.split(_Checkpointed(nnx.Rngs(0, dropout=1)))[1]


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "ckpt"
    bryo.save_state(path, _checkpoint_state())
    return path


HOSTILE_INDEX_VALUES = {
    "path": [[], ["..", "..", "etc", "passwd"], ["a/b"], [True], [["x"]], ["linear"], [""]],
    "shape": [[], [-1], [2**40, 2**40], [1] * 70, ["4"], None, [4, 4]],
    "dtype": ["object", "float64", "int32", "key<fry>", "V8", "<U4", "", 7],
    "type": ["os.system", "bryo_graph._variables.Param", "array", 3],
    "metadata": [None, [], {"a": [[[[[[[]]]]]]]}, {"value": 1}, {"type": "x"}],
    "sha256": ["0" * 64, "x", None, 5],
}


def _mutate_bytes(file: Path, data: st.DataObject) -> None:
    raw = bytearray(file.read_bytes())
    kind = data.draw(st.sampled_from(["flip", "garble", "cut", "grow", "delete", "empty"]))
    if kind == "delete":
        file.unlink()
        return
    at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
    if kind == "flip" and raw:
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "garble":
        raw[at : at + 8] = data.draw(st.binary(min_size=8, max_size=8))
    elif kind == "cut":
        del raw[at:]
    elif kind == "grow":
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=64))
    else:
        raw.clear()
    file.write_bytes(bytes(raw))


def _mutate_index(folder: Path, data: st.DataObject) -> None:
    index = folder / "variables" / "metadata"
    try:
        document = json.loads(index.read_text())
        entries = document["variables"]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        entries = None  # an earlier mutation already broke the index
    if entries and data.draw(st.booleans()):
        entry = data.draw(st.sampled_from(entries))
        field = data.draw(st.sampled_from(sorted(HOSTILE_INDEX_VALUES)))
        if isinstance(entry, dict):
            entry[field] = data.draw(st.sampled_from(HOSTILE_INDEX_VALUES[field]))
        index.write_text(json.dumps(document))
    else:
        depth = data.draw(st.sampled_from([40, 5000, 100_000]))
        index.write_text("[" * depth + "]" * depth)


def _mutate_folder(folder: Path, data: st.DataObject, elsewhere: Path) -> None:
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    kind = data.draw(st.sampled_from(["bytes", "bytes", "index", "add", "link"]))
    if kind == "index":
        _mutate_index(folder, data)
    elif kind == "add":
        where = folder / data.draw(st.sampled_from(["arrays", "variables", "."]))
        if where.is_dir() and not where.is_symlink():  # (an earlier mutation may have linked it)
            (where / "extra").write_text("{}")
    elif kind == "link":
        name = data.draw(st.sampled_from([*names, "arrays"]))
        target = elsewhere / name if data.draw(st.booleans()) else Path("/etc/hostname")
        victim = folder / name
        shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
        victim.symlink_to(target)
    else:
        _mutate_bytes(folder / data.draw(st.sampled_from(names)), data)


def _same_values(restored: bryo.State, saved: bryo.State) -> bool:
    got, want = restored.flat_state(), saved.flat_state()

    def raw(leaf):
        value = getattr(leaf, "value", leaf)
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        return getattr(leaf, "type", None), str(value.dtype), np.asarray(value).tobytes()

    return list(got) == list(want) and all(raw(got[p]) == raw(want[p]) for p in want)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 100,
)
@given(st.data())
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_mutated_checkpoints_restore_exactly_or_raise_checkpoint_errors(saved_checkpoint, data):
    from bryo._checkpoint_files import seal  # rewrites the manifest: a crafted checkpoint

    saved = _checkpoint_state()
    with tempfile.TemporaryDirectory() as scratch:
        folder, elsewhere = Path(scratch) / "ckpt", Path(scratch) / "other"
        shutil.copytree(saved_checkpoint, folder)
        shutil.copytree(saved_checkpoint, elsewhere)
        for _ in range(data.draw(st.integers(1, 3))):
            _mutate_folder(folder, data, elsewhere)
        crafted = data.draw(st.booleans())
        if crafted:  # a consistent manifest over the mutated files
            try:
                seal(folder)
            except bryo.CheckpointError:
                pass  # a link: the crafter cannot seal it either
        for abstract in (None, jax.eval_shape(_checkpoint_state)):
            try:
                restored = bryo.restore_state(folder, abstract)
            except bryo.CheckpointError:
                continue
            # a damaged checkpoint restores exactly or not at all; a crafted one may hold
            # other values (its manifest matches them), but never raises anything else
            assert crafted or _same_values(restored, saved)
