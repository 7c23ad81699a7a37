"""Pausing Python's cyclic garbage collector around work that only builds.

Tracing (`make_mox`), writing (`dumps`) and reading (`loads`) allocate many small
objects that nearly all stay alive until they return: jaxpr equations, variables,
tracers, document nodes. The collector counts those allocations and scans the young
objects again and again, and every few hundred thousand of them it scans the whole heap
(jax's module state included). None of it finds garbage: what these steps drop is freed
by reference counting. So they run with the collector paused; it resumes afterwards and
collects whatever cyclic garbage was made meanwhile (a traced function's, say).

The pause is process-wide, since the collector is; it is re-entrant and shared by
threads: the collector is disabled when the first pause starts, and the last one to end
enables it again if it was enabled when the first started (and leaves it alone
otherwise). A `gc.disable()` made while a pause runs thus ends with it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pauses = 0  # pauses running now, in every thread
_resume = False  # whether the last pause to end enables the collector again


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (see the module docstring)."""
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
