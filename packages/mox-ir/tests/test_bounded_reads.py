"""`load` and `loads` refuse a file over `Limits.max_bytes` while reading it, never after
holding all of it: a huge file is refused by its size, an endless one (a pipe,
`/dev/zero`) at the first chunk past the limit. `query` refuses an XPath that is not text."""

import os
import threading
import tracemalloc

import jax.numpy as jnp
import pytest

from bryo_mox import Limits, MoxError, MoxLimitError, dumps, load, loads, make_mox, query
from bryo_mox._limits import READ_CHUNK_BYTES

pytest.importorskip("bryo_xml")
LIMIT = 1 << 20


def peak_allocation(run):
    """The peak of Python's allocations (bytes) while `run()` runs."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_regular_file_over_the_limit_is_refused_by_its_size(tmp_path):
    huge = tmp_path / "huge.mox.xml"
    with open(huge, "wb") as file:
        file.truncate(LIMIT * 64)  # sparse: takes no disk

    def read():
        with pytest.raises(MoxLimitError, match=f"is {LIMIT * 64} bytes, over the limit of"):
            load(huge, limits=Limits(max_bytes=LIMIT))

    assert peak_allocation(read) < 4 * LIMIT  # nothing of it was read (imports aside)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_file_is_refused_after_the_limit():
    with pytest.raises(MoxLimitError, match="holds more than"):
        load("/dev/zero", format="xml", limits=Limits(max_bytes=LIMIT))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_is_read_only_up_to_the_limit(tmp_path):
    """The writer offers 32 times the limit; the loader takes one chunk past it and stops."""
    fifo = tmp_path / "stream.mox.yson"
    os.mkfifo(fifo)
    written = [0]

    def write():
        block = b" " * (1 << 16)
        try:
            with open(fifo, "wb") as out:
                while written[0] < 32 * LIMIT:
                    out.write(block)
                    written[0] += len(block)
        except BrokenPipeError:
            pass  # the loader closed its end: what we wanted

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with pytest.raises(MoxLimitError, match="holds more than"):
            load(fifo, limits=Limits(max_bytes=LIMIT))
    finally:
        writer.join(timeout=30)
    assert not writer.is_alive()
    assert written[0] <= LIMIT + READ_CHUNK_BYTES + (1 << 20)  # + what the pipe buffers


def test_loads_refuses_an_over_limit_text_before_encoding_it():
    text = "é" * (16 * LIMIT)  # 2 UTF-8 bytes each: over the limit by its length alone

    def read():
        with pytest.raises(MoxLimitError, match="over the limit of"):
            loads(text, format="xml", limits=Limits(max_bytes=LIMIT))

    assert peak_allocation(read) < 4 * LIMIT  # not encoded to bytes


def test_a_file_within_the_limit_still_loads(tmp_path):
    mox = make_mox(lambda x: jnp.sin(x) * 2.0)(jnp.ones(3))
    path = tmp_path / "small.mox.yson"
    path.write_text(dumps(mox, format="yson"))
    assert len(query("//sin", load(path, limits=Limits(max_bytes=path.stat().st_size)))) == 1
    with pytest.raises(MoxLimitError):
        load(path, limits=Limits(max_bytes=path.stat().st_size - 1))


@pytest.mark.parametrize(
    ("xpath", "message"),
    [("//\udcff", "lone surrogate"), (b"//sin", "must be a string"), (3, "must be a string")],
)
def test_query_refuses_an_xpath_that_is_not_text(xpath, message):
    mox = make_mox(jnp.sin)(jnp.ones(3))
    with pytest.raises(MoxError, match=message):
        query(xpath, mox)


def _distinct_powers(n: int, first: int) -> str:
    """A file of `n` equations that all differ (`x ** first`, `x ** (first + 1)`, ...):
    each one a trace of its own when loaded (exponents no other load used)."""
    eqns = "".join(
        f'<integer_pow y="{first + k}"><input type="f32[3]">a</input>'
        f'<output type="f32[3]">e{k}</output></integer_pow>\n'
        for k in range(n)
    )
    return (
        '<mox in_tree="(0,)" out_tree="0" extra="()">\n<input type="f32[3]">a</input>\n'
        f'{eqns}<outputs type="f32[3]">e0</outputs></mox>'
    )


def test_a_file_of_ever_different_equations_is_refused_past_max_traces():
    mox = loads(_distinct_powers(6, 1000), "xml", limits=Limits(max_traces=6))
    assert len(query("//integer_pow", mox)) == 6
    text = _distinct_powers(6, 2000)
    with pytest.raises(
        MoxLimitError,
        match=r"equation `integer_pow` would be distinct "
        r"equation number 6 .* limit of 5.*max_traces",
    ) as info:
        loads(text, "xml", limits=Limits(max_traces=5))
    assert info.value.line == 8  # the sixth equation's line
    assert Limits().max_traces == 5_000


@pytest.mark.slow
def test_a_pickled_mox_is_trusted_with_its_traces():
    import pickle

    from bryo_mox import clear_caches

    n = Limits().max_traces + 1
    mox = loads(_distinct_powers(n, 10_000), "xml", limits=Limits(max_traces=n))
    clear_caches()  # (loads shares what it traced between loads)
    again = pickle.loads(pickle.dumps(mox))  # trusted: not held to the default budget
    assert len(query("//integer_pow", again)) == n
