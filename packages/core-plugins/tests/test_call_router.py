"""CallRouter: wrapped methods run as usual until a handler is active, then go to `route`."""

import threading

from bryo_plugins import CallRouter, original_call, standing_in, stood_in_for

calls = []


def route(handler, call, obj, current, args, kwargs):
    calls.append((obj.name, current[1] if current else None))
    with router.running(obj, obj.name):
        return handler(call(obj, *args, **kwargs))


router = CallRouter("test", route)


class Layer:
    def __init__(self, name, child=None):
        self.name, self.child = name, child

    def __call__(self, x):
        return self.child(x) + 1 if self.child else x + 1


class Special(Layer):
    def __call__(self, x):
        return super().__call__(x) * 10  # the inner call is not routed twice


Layer.__call__ = router.wrap(Layer.__call__)
Special.__call__ = router.wrap(Special.__call__)


def test_unwrapped_behaviour_without_a_handler():
    calls.clear()
    assert Layer("a", Layer("b"))(1) == 3
    assert calls == []


def test_routed_calls_know_their_parent():
    calls.clear()
    with router.active(lambda out: out * 2):
        assert Layer("outer", Layer("inner"))(1) == ((1 + 1) * 2 + 1) * 2
    assert calls == [("outer", None), ("inner", "outer")]
    assert Layer("after")(1) == 2  # the handler is gone after the block


def test_super_call_is_not_routed_again():
    calls.clear()
    with router.active(lambda out: out):
        assert Special("s")(1) == 20
    assert calls == [("s", None)]


def test_wrapping_twice_is_a_no_op_and_the_original_is_kept():
    wrapped = Layer.__call__
    assert router.wrap(wrapped) is wrapped
    assert original_call(wrapped).__name__ == "__call__"
    assert original_call(len) is None


def test_handlers_are_confined_to_their_thread():
    seen = []
    with router.active(lambda out: out * 100):
        thread = threading.Thread(target=lambda: seen.append(Layer("t")(1)))
        thread.start()
        thread.join()
    assert seen == [2]


class Foreign:
    """A class hierarchy the backend does not own: wrapped only inside `patching`."""

    def __call__(self, x):
        return x + 1


class ForeignChild(Foreign):
    def __call__(self, x):
        return super().__call__(x) * 3


class Skipped(Foreign):
    def __call__(self, x):
        return x


def _route_running(handler, call, obj, current, args, kw):
    with foreign_router.running(obj, type(obj).__name__):  # as a backend's route does
        return handler(call(obj, *args, **kw))


foreign_router = CallRouter("foreign", _route_running)


def test_patching_wraps_the_base_and_existing_subclasses_while_active():
    """The base was left out: a torch-like `Module.__call__` (calling `forward`), the one
    `__call__` of its hierarchy, was never routed."""
    originals = {cls: cls.__dict__["__call__"] for cls in (Foreign, ForeignChild, Skipped)}
    with foreign_router.patching(Foreign, keep=lambda cls: cls is not Skipped):
        with foreign_router.patching(Foreign):  # re-entrant: patched once, undone once
            assert original_call(ForeignChild.__call__) is originals[ForeignChild]
            assert original_call(Foreign.__call__) is originals[Foreign]
        with foreign_router.active(lambda out: -out):
            assert ForeignChild()(1) == -6  # routed once: its super().__call__ is not
            assert Foreign()(1) == -2
            assert Skipped()(1) == 1
        assert ForeignChild()(1) == 6
    assert {cls: cls.__dict__["__call__"] for cls in originals} == originals


def test_a_copy_stands_for_its_original_only_inside_the_block_innermost_first():
    copy, original, outer = Layer("copy"), Layer("original"), Layer("outer")
    assert stood_in_for(copy) is None
    with standing_in(copy, outer):
        with standing_in(copy, original):
            assert stood_in_for(copy) is original
            assert stood_in_for(original) is None  # by identity, one way
        assert stood_in_for(copy) is outer
    assert stood_in_for(copy) is None


def test_stand_ins_are_confined_to_their_thread():
    copy, original = Layer("copy"), Layer("original")
    seen = []
    with standing_in(copy, original):
        thread = threading.Thread(target=lambda: seen.append(stood_in_for(copy)))
        thread.start()
        thread.join()
    assert seen == [None]
