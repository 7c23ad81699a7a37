"""`run_frames`: nested walks of any depth on an explicit stack."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bryo_pytree import run_frames


def _sum(tree: Any) -> Generator[Any, Any, int]:
    """The sum of a nested list of ints: lists open frames, ints are resolved."""
    total = 0
    for item in tree:
        total += yield item
    return total


def _recursive_sum(tree: Any) -> int:
    return tree if isinstance(tree, int) else sum(_recursive_sum(t) for t in tree)


_TREES = st.recursive(st.integers(-5, 5), lambda inner: st.lists(inner, max_size=4), max_leaves=30)


@settings(max_examples=50, deadline=None)
@given(st.lists(_TREES, max_size=4))
def test_results_match_the_recursive_walk(tree):
    got = run_frames(_sum(tree), _sum, frame_type=list, resolve=lambda leaf: leaf)
    assert got == _recursive_sum(tree)


def test_depth_is_not_bounded_by_the_recursion_limit():
    nested: list[Any] = [1]
    for _ in range(20_000):
        nested = [nested, 1]
    got = run_frames(_sum(nested), _sum, frame_type=list, resolve=lambda leaf: leaf)
    assert got == 20_001


def test_every_request_opens_a_frame_by_default():
    seen = []

    def frame(depth: int) -> Generator[int, int, int]:
        seen.append(depth)
        if depth == 3:
            return 0
        return 1 + (yield depth + 1)

    assert run_frames(frame(0), frame) == 3
    assert seen == [0, 1, 2, 3]


def test_on_error_replaces_errors_raised_inside_a_frame():
    def frame(tree: Any) -> Generator[Any, Any, int]:
        if tree == "bad":
            raise ValueError("bad leaf")
        return (yield from ())

    def outer() -> Generator[Any, Any, int]:
        yield "ok"
        yield "bad"
        return 0

    def wrap(error: Exception) -> Exception:
        return KeyError(f"wrapped: {error}")

    with pytest.raises(KeyError, match="wrapped: bad leaf"):
        run_frames(outer(), frame, on_error=wrap)
    with pytest.raises(ValueError, match="bad leaf"):
        run_frames(outer(), frame)


def test_errors_of_enter_are_not_passed_to_on_error():
    def enter(request: Any) -> Generator[Any, Any, int]:
        raise LookupError("too deep")

    def outer() -> Generator[Any, Any, int]:
        yield 1
        return 0

    with pytest.raises(LookupError, match="too deep"):
        run_frames(outer(), enter, on_error=lambda error: RuntimeError("not this"))


def test_a_request_no_one_answers_is_refused():
    with pytest.raises(TypeError, match="no `resolve` was given"):
        run_frames(_sum([[1], 2]), _sum, frame_type=list)
