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


def test_equations_of_many_inputs_are_refused_past_max_trace_ports():
    # each `integer_pow` traced has 2 ports (an input, an output): 12 for the file
    loads(_distinct_powers(6, 3000), "xml", limits=Limits(max_trace_ports=12))
    with pytest.raises(
        MoxLimitError,
        match=r"equation `integer_pow` has 2 inputs and outputs to trace, which would bring "
        r"those of the equations the file rebuilds to 12, over the limit of 11 .*"
        r"max_trace_ports",
    ) as info:
        loads(_distinct_powers(6, 4000), "xml", limits=Limits(max_trace_ports=11))
    assert info.value.line == 8  # the sixth equation's line
    # one equation of many inputs: refused before jax makes a tracer per input
    wide = (
        '<mox in_tree="(0,)" out_tree="0" extra="()">\n<input type="f32[3]">a</input>\n'
        + '<concatenate dimension="0">\n'
        + '<input type="f32[3]">a</input>\n' * 50
        + '<output type="f32[150]">c</output></concatenate>\n'
        + '<outputs type="f32[150]">c</outputs></mox>'
    )
    with pytest.raises(MoxLimitError, match=r"`concatenate` has 51 inputs and outputs") as info:
        loads(wide, "xml", limits=Limits(max_trace_ports=50))
    assert info.value.line == 3
    assert loads(wide, "xml", limits=Limits(max_trace_ports=51)).block.outvars[0].aval.shape == (
        150,
    )
    assert Limits().max_trace_ports == 20_000


def _distinct_types(n: int) -> str:
    """A file whose root takes `n` inputs of `n` types (`f32[1]`, `f32[2]`, ...)."""
    inputs = "".join(f'<input type="f32[{k}]">a{k}</input>\n' for k in range(1, n + 1))
    return (
        f'<mox in_tree="None" out_tree="0" extra="()">\n{inputs}'
        '<outputs type="f32[1]">a1</outputs></mox>'
    )


def test_a_file_of_many_types_is_refused_past_max_types():
    assert len(loads(_distinct_types(5), "xml", limits=Limits(max_types=5)).block.invars) == 5
    with pytest.raises(
        MoxLimitError,
        match=r"the type 'f32\[5\]' would be distinct type number 5 of the file, over the "
        r"limit of 4 .*max_types",
    ) as info:
        loads(_distinct_types(5), "xml", limits=Limits(max_types=4))
    assert info.value.line == 6  # the fifth input's line
    # a type written another way is another type string: counted too
    spaced = _distinct_types(1).replace("\n<outputs", '\n<input type="f32[ 1]">b</input>\n<outputs')
    with pytest.raises(MoxLimitError, match=r"'f32\[ 1\]' would be distinct type number 2"):
        loads(spaced, "xml", limits=Limits(max_types=1))
    assert Limits().max_types == 100_000


def _distinct_literals(n: int) -> str:
    """A file of `n` equations multiplying by `n` literal values (0.5, 1.5, ...)."""
    eqns = "".join(
        f'<mul><input type="f32[3]">{"a" if k == 0 else f"e{k - 1}"}</input>'
        f'<input type="f32[]" value="{k}.5"/><output type="f32[3]">e{k}</output></mul>\n'
        for k in range(n)
    )
    return (
        '<mox in_tree="(0,)" out_tree="0" extra="()">\n<input type="f32[3]">a</input>\n'
        f'{eqns}<outputs type="f32[3]">e{n - 1}</outputs></mox>'
    )


@pytest.mark.parametrize("format", ["xml", "yson"])
def test_a_file_of_many_literal_values_is_refused_past_max_literals(format):
    text = _distinct_literals(6)
    if format == "yson":
        pytest.importorskip("bryo_yson")
        text = dumps(loads(text, "xml"), "yson")
    mox = loads(text, format, limits=Limits(max_literals=6))
    assert len(query("//mul", mox)) == 6
    with pytest.raises(
        MoxLimitError,
        match=r"the literal 5\.5 of type f32\[\] would be distinct literal number 6 of the "
        r"file, over the limit of 5 .*max_literals",
    ) as info:
        loads(text, format, limits=Limits(max_literals=5))
    if format == "xml":
        assert info.value.line == 8  # the sixth equation's line
    else:
        assert info.value.path is not None and info.value.path.startswith("/5/@inputs/1")
    # a literal repeated is one value
    repeated = _distinct_literals(6).replace('value="5.5"', 'value="0.5"')
    assert len(query("//mul", loads(repeated, "xml", limits=Limits(max_literals=5)))) == 6
    assert Limits().max_literals == 100_000


@pytest.mark.slow
def test_a_pickled_mox_is_trusted_with_its_types_literals_and_trace_ports():
    import pickle

    from bryo_mox import clear_caches

    limits = Limits()
    n = max(limits.max_types, limits.max_literals) + 1
    wide = limits.max_trace_ports  # its inputs, one output, and the `mul`'s 3 ports: over
    inputs = "".join(f'<input type="f32[{k}]">a{k}</input>\n' for k in range(1, n + 1))
    total = wide * (wide + 1) // 2
    concatenate = (
        '<concatenate dimension="0">\n'
        + "".join(f'<input type="f32[{k}]">a{k}</input>\n' for k in range(1, wide + 1))
        + f'<output type="f32[{total}]">c</output></concatenate>\n'
    )
    scaled = "".join(
        f'<mul><input type="f32[1]">a1</input><input type="f32[]" value="{k}.5"/>'
        f'<output type="f32[1]">e{k}</output></mul>\n'
        for k in range(n)
    )
    text = (
        f'<mox in_tree="None" out_tree="0" extra="()">\n{inputs}{concatenate}{scaled}'
        f'<outputs type="f32[{total}]">c</outputs></mox>'
    )
    wide_open = Limits(max_types=n + 2, max_literals=n, max_trace_ports=wide + 4)
    mox = loads(text, "xml", limits=wide_open)
    clear_caches()  # (loads shares what it traced between loads)
    again = pickle.loads(pickle.dumps(mox))  # trusted: not held to the default budgets
    assert len(query("//mul", again)) == n
