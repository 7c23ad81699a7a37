"""The collector pause of tracing, writing and reading: re-entrant, shared by threads,
exception-safe, and leaves the collector as it found it."""

import gc
import threading

import jax.numpy as jnp
import pytest

from bryo_mox import make_mox
from bryo_mox._collector import collector_paused


@pytest.fixture
def collector_on():
    """The collector enabled for the test, and as it was afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pause_disables_and_resumes(collector_on):
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_resume_at_the_outermost_end(collector_on):
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still runs
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_on):
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_error_inside_resumes_the_collector(collector_on):
    with pytest.raises(ValueError, match="inside"):
        with collector_paused():
            raise ValueError("inside")
    assert gc.isenabled()
    with collector_paused():  # and the next pause starts from zero
        assert not gc.isenabled()
    assert gc.isenabled()


def test_threads_share_one_pause(collector_on):
    """The collector resumes when the last of overlapping pauses ends, whichever
    thread started first."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen["after_first_ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after_first_ended": False}
    assert gc.isenabled()


def test_make_mox_traces_with_the_collector_paused(collector_on):
    seen = []

    def f(v):
        seen.append(gc.isenabled())
        return v * 2

    make_mox(f)(jnp.ones(3))
    assert seen == [False]
    assert gc.isenabled()


def test_make_mox_resumes_the_collector_when_the_function_raises(collector_on):
    def f(v):
        raise RuntimeError("traced function failed")

    with pytest.raises(RuntimeError, match="traced function failed"):
        make_mox(f)(jnp.ones(3))
    assert gc.isenabled()


def test_nested_make_mox_resumes_after_the_outer_trace(collector_on):
    inner_seen = []

    def inner(v):
        inner_seen.append(gc.isenabled())
        return v + 1

    def outer(v):
        make_mox(inner)(v)  # a trace inside a trace
        assert not gc.isenabled()
        return v * 2

    make_mox(outer)(jnp.ones(3))
    assert inner_seen == [False]
    assert gc.isenabled()


def test_make_mox_keeps_a_disabled_collector_disabled(collector_on):
    gc.disable()
    try:
        make_mox(lambda v: v * 2)(jnp.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_query_builds_its_view_with_the_collector_paused(collector_on, monkeypatch):
    from bryo_mox import MoxError, _view, query

    seen = []
    build = _view.ElementView.__init__

    def recording_init(self, mox):
        seen.append(gc.isenabled())
        build(self, mox)

    monkeypatch.setattr(_view.ElementView, "__init__", recording_init)
    mox = make_mox(lambda v: jnp.sin(v) * 2)(jnp.ones(3))
    assert len(query("//sin", mox)) == 1
    assert seen == [False]
    assert gc.isenabled()
    with pytest.raises(MoxError, match="cannot be evaluated"):
        query("//sin[unknown-function()]", mox)
    assert gc.isenabled()
