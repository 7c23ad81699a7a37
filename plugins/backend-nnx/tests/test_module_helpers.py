"""Module helpers of Flax NNX 0.12: `iter_modules`/`iter_children`, `set_attributes` with
filters, `with_attributes` and `view` (configured copies sharing the Variables),
`view_info`, and `capture` of the values modules sow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bryo_filters import PathContains
from bryo_graph import Intermediate, List, Param, Variable, state
from bryo_nnx import (
    BatchNorm,
    Dropout,
    Linear,
    Module,
    MultiHeadAttention,
    capture,
    iter_module_children,
    iter_modules,
    view,
    view_info,
    with_attributes,
)
from bryo_rngs import Rngs


class Block(Module):
    def __init__(self, rngs):
        self.linear = Linear(3, 3, rngs=rngs)
        self.dropout = Dropout(0.5, deterministic=False, rngs=rngs)
        self.norm = BatchNorm(3, use_running_average=False, rngs=rngs)

    def __call__(self, x):
        x = self.linear(x)
        self.sow(Intermediate, "features", x)
        return self.norm(self.dropout(x))


class Stack(Module):
    def __init__(self, rngs):
        self.blocks = List([Block(rngs), Block(rngs)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        self.sow(Intermediate, "out", x, reduce_fn=lambda a, b: a + b, init_fn=lambda: 0)
        return x


def test_iter_modules_and_children():
    model = Stack(Rngs(0))
    paths = [path for path, _ in iter_modules(model)]
    assert paths[-1] == () and ("blocks", 0, "linear") in paths and len(paths) == 9
    with pytest.warns(DeprecationWarning, match=r"'m.iter_children\(\)' method is deprecated"):
        assert [k for k, _ in model.blocks[0].iter_children()] == ["dropout", "linear", "norm"]
    assert [k for k, _ in iter_module_children(model.blocks[0])] == ["dropout", "linear", "norm"]
    assert [k for k, _ in iter_module_children(model)] == []  # a List is not a Module


def test_set_attributes_with_filters_and_errors():
    model = Stack(Rngs(0))
    model.set_attributes(Dropout, deterministic=True)
    assert all(block.dropout.deterministic for block in model.blocks)
    assert not model.blocks[0].norm.use_running_average
    model.set_attributes(PathContains(1), use_running_average=True)
    assert [b.norm.use_running_average for b in model.blocks] == [False, True]
    with pytest.raises(ValueError, match=r"following attributes: \['unknown'\]"):
        model.set_attributes(deterministic=False, unknown=1)
    model.set_attributes(unknown=1, raise_if_not_found=False)


@pytest.mark.parametrize("graph", [True, False])
def test_with_attributes_and_view_copy_the_modules_and_share_the_variables(graph):
    model = Block(Rngs(0))
    copy = with_attributes(model, only=Dropout, deterministic=True, graph=graph)
    assert copy.dropout.deterministic and not model.dropout.deterministic
    assert copy is not model and copy.linear.kernel is model.linear.kernel
    viewed = view(model, deterministic=True, use_running_average=True, graph=graph)
    assert viewed.dropout.deterministic and viewed.norm.use_running_average
    assert not model.norm.use_running_average
    with pytest.raises(ValueError, match=r"Unused keys found in nnx.view: \['unknown'\]"):
        view(model, unknown=True, graph=graph)
    with pytest.raises(ValueError, match=r"attributes: \['unknown'\]"):
        with_attributes(model, unknown=True, graph=graph)


def test_view_creates_the_attention_cache_and_view_info_lists_the_keywords():
    attention = MultiHeadAttention(2, 4, decode=False, rngs=Rngs(0))
    decoding = view(attention, decode=True, batch_size=3, max_length=5)
    assert decoding.cached_key.shape == (3, 5, 2, 2) and attention.cached_key is None
    with pytest.raises(TypeError, match="batch_size"):
        view(attention, decode=True)
    info = view_info(Block(Rngs(0)))
    assert info.splitlines()[:3] == [
        "BatchNorm:",
        "  use_running_average: bool | None = None",
        "    if True, normalise with the stored batch statistics.",
    ]


def test_capture_returns_sown_values_by_path_and_leaves_the_model_unchanged():
    model = Stack(Rngs(0))
    x = jnp.ones((4, 3))
    y, sown = capture(model, Intermediate)(x)
    flat = dict(sown.flat_state())
    assert set(flat) == {("blocks", 0, "features"), ("blocks", 1, "features"), ("out",)}
    assert isinstance(flat[("out",)], Intermediate)
    np.testing.assert_allclose(flat[("out",)].get_value(), y)
    assert "features" not in vars(model.blocks[0]) and not state(model, Intermediate)
    # types first, as a decorator; the model is the function's first argument
    forward = capture(Intermediate, Param)(lambda m, x: m(x))
    _, sown_again, params = forward(model, x)
    assert len(sown_again.flat_state()) == 3 and len(params.flat_state()) == 0
    # init: continue from captured values (the reducer folds into them)
    _, twice = capture(model, Intermediate, init=sown)(x)
    assert len(dict(twice.flat_state())[("blocks", 0, "features")].get_value()) == 2


def test_capture_takes_what_a_scanned_body_sows():
    from bryo_transforms import Carry, StateAxes, scan

    class Scanned(Module):
        def __init__(self):
            self.w = Param(jnp.arange(3.0))

        @scan(in_axes=(StateAxes({(Param, Intermediate): 0, ...: None}), Carry), out_axes=Carry)
        def __call__(self, x):
            x = x + self.w.value
            self.sow(Intermediate, "steps", x)
            return x

    model = Scanned()
    y, sown = capture(model, Intermediate)(jnp.array(1.0))
    (steps,) = sown["steps"].get_value()  # one sow per step, stacked along the scan
    np.testing.assert_allclose(steps, [1.0, 2.0, 4.0])
    assert float(y) == 4.0 and "steps" not in vars(model)  # the model is left unchanged

    def scan_then_fail(m, x):
        m(x)
        raise RuntimeError("after the scan")

    with pytest.raises(RuntimeError, match="after the scan"):
        capture(scan_then_fail, Intermediate)(model, jnp.array(1.0))
    assert "steps" not in vars(model)  # what the scan sowed is not left on the model


def test_capture_method_outputs_sows_what_each_method_returns():
    class Inner(Module):
        def __call__(self, x):
            return 2.0 * x

        def process(self, x):
            return x + 1.0

    class Outer(Module):
        def __init__(self):
            self.inner = Inner()

        def __call__(self, x):
            self.sow(Intermediate, "mid", x)
            return self.inner.process(self.inner(x))

    model, x, plain = Outer(), jnp.ones(2), Inner.__call__
    y, sown = capture(model, Intermediate, method_outputs=Intermediate)(x)
    flat = {path: v.get_value()[0] for path, v in sown.flat_state().items()}
    assert set(flat) == {("__call__",), ("mid",), ("inner", "__call__"), ("inner", "process")}
    np.testing.assert_allclose(flat[("__call__",)], y)
    np.testing.assert_allclose(flat[("inner", "__call__")], 2.0 * x)
    # afterwards the classes' methods are the plain ones again, and other calls sow nothing
    assert Inner.__call__ is plain
    assert len(capture(model, Intermediate)(x)[1].flat_state()) == 1
    with pytest.raises(TypeError, match=r"method_outputs.*got 'intermediates'"):
        capture(model, Intermediate, method_outputs="intermediates")


def test_capture_method_outputs_skips_the_methods_of_module_itself():
    class Tagged(Module):
        def tag(self, x):
            return x * 3.0

        def train(self, **attributes):  # overrides Module's: the framework's, not recorded
            super().train(**attributes)

    class Holder(Module):
        def __init__(self):
            self.plain = Module()  # its class is Module itself: sow, train, ... stay plain
            self.tagged = Tagged()

        def __call__(self, x):
            self.plain.sow(Intermediate, "seen", x)
            self.tagged.train()
            return self.tagged.tag(x)

    model, sow, train = Holder(), Module.sow, Tagged.train
    y, sown = capture(model, Intermediate, method_outputs=Intermediate)(jnp.ones(2))
    flat = {path: v.get_value()[0] for path, v in sown.flat_state().items()}
    assert set(flat) == {("__call__",), ("plain", "seen"), ("tagged", "tag")}
    np.testing.assert_allclose(flat[("tagged", "tag")], y)
    assert Module.sow is sow and Tagged.train is train


def test_capture_sow_of_an_uncaptured_type_returns_false_and_bad_input_is_named():
    class Probe(Module):
        def __call__(self):
            return self.sow(Variable, "v", 1)

    probe = Probe()
    kept, _ = capture(probe, Intermediate)()
    assert kept is False and "v" not in vars(probe)
    with pytest.raises(TypeError, match="Variable types"):
        capture(probe, "intermediates")
    with pytest.raises(ValueError, match="not a Variable under one of the model's modules"):
        capture(probe, Intermediate, init=state(Block(Rngs(0))))()


def test_perturb_gives_gradients_of_intermediates():
    from bryo_nnx import Perturbation
    from bryo_transforms import grad, jit

    class Scaled(Module):
        def __init__(self):
            self.w = Param(jnp.array(2.0))

        def __call__(self, x):
            x = self.perturb("x_grad", x)
            y = 3 * x * self.w
            self.sow(Intermediate, "y", y)
            return y

    model = Scaled()
    _, zeros = capture(model, Perturbation)(1.0)
    assert float(dict(zeros.flat_state())[("x_grad",)].get_value()) == 0.0

    def loss(m, perturbations, x):
        return capture(m, Intermediate, init=perturbations)(x)

    p_grads, sown = grad(loss, argnums=1, has_aux=True, wrt=...)(model, zeros, 1.0)
    assert float(p_grads["x_grad"].get_value()) == 6.0
    assert float(sown["y"].get_value()[0]) == 6.0
    assert not hasattr(model, "x_grad")
    # outside a capture, the perturbation lives on the module (zeros)
    assert float(model(1.0)) == 6.0 and isinstance(model.x_grad, Perturbation)
    # sow under jit keeps the tuple of values
    jit(lambda m, x: m(x))(model, 1.0)
    assert len(model.y.get_value()) == 2


def _public(module):
    return {name for name in vars(module) if not name.startswith("_")}


def test_perturb_inside_an_inner_jit_takes_its_gradient_from_init_and_leaves_no_trace():
    from bryo_nnx import Perturbation
    from bryo_transforms import grad, jit

    class Tripled(Module):
        @jit
        def __call__(self, x):
            x = self.perturb("x_grad", x)
            y = 3 * x
            self.sow(Intermediate, "y", y)
            return y

    model = Tripled()
    _, zeros = capture(model, Perturbation)(1.0)
    # the Intermediate sown inside the inner jit, which this capture does not take, is
    # dropped as a sow outside lifted transforms is: the model is left as it was
    assert _public(model) == set()
    assert float(zeros["x_grad"].get_value()) == 0.0

    def loss(m, perturbations, x):
        return capture(m, Intermediate, init=perturbations)(x)

    p_grads, sown = grad(loss, argnums=1, has_aux=True, wrt=...)(model, zeros, 1.0)
    assert float(p_grads["x_grad"].get_value()) == 3.0
    assert float(sown["y"].get_value()[0]) == 3.0
    assert _public(model) == set()
    # init values are seen by the copies: a non-zero perturbation shifts the output
    shifted = jax.tree.map(lambda v: v + 1.0, zeros)
    y, _ = capture(model, Intermediate, init=shifted)(1.0)
    assert float(y) == 6.0
    assert _public(model) == set()


def test_capture_takes_what_copies_sow_inside_a_simple_mode_jit():
    from bryo_transforms import jit

    class Doubles(Module):
        def __init__(self):
            self.w = Param(jnp.array(2.0))

        @jit(graph_updates=False)  # a copy of the module inside: new attributes are dropped
        def __call__(self, x):
            self.sow(Intermediate, "y", x * self.w[...])
            return x

    model = Doubles()
    _, sown = capture(model, Intermediate)(jnp.array(3.0))
    assert float(sown["y"].get_value()[0]) == 6.0
    assert "__captures__" not in vars(model) and not state(model, Intermediate)


@pytest.mark.parametrize("graph", [True, False])
def test_capture_takes_what_a_scan_under_a_prefix_sows_inside_a_simple_mode_jit(graph):
    from bryo_transforms import Carry, jit, prefix, scan

    class Steps(Module):
        def __init__(self):
            self.w = Param(jnp.array(1.0))

        def step(self, c):
            self.sow(Intermediate, "seen", c + self.w[...])
            return c + 1

        @jit(graph=graph, graph_updates=False)
        def __call__(self, c):
            axes = prefix(self, {Intermediate: 0, ...: None}, graph=graph)
            modes = {"graph": graph, "graph_updates": False}
            run = scan(Steps.step, in_axes=(axes, Carry), out_axes=Carry, length=3, **modes)
            return run(self, c)

    model = Steps()
    c, sown = capture(model, Intermediate)(jnp.array(0.0))
    assert float(c) == 3.0
    np.testing.assert_allclose(sown["seen"].get_value()[0], [1.0, 2.0, 3.0])
    assert "__captures__" not in vars(model)


def test_capture_takes_perturbations_of_modules_merged_inside_vmap():
    from bryo_graph import merge, split
    from bryo_nnx import Perturbation
    from bryo_transforms import vmap

    class Dot(Module):
        def __init__(self):
            self.w = Param(jnp.arange(3.0))

        def __call__(self, x):
            return jnp.dot(self.perturb("x_grad", x), self.w[...])

    model = Dot()

    def run_merged(m, xs):
        graphdef, intermediates, params = split(m, Intermediate, Param)

        def run(i, p, x):
            return merge(graphdef, i, p)(x)

        return vmap(run, in_axes=(0, None, 0))(intermediates, params, xs)

    ys, zeros = capture(run_merged, Perturbation)(model, jnp.ones((2, 3)))
    assert ys.shape == (2,) and zeros["x_grad"].get_value().shape == (2, 3)
    assert "__captures__" not in vars(model) and not hasattr(model, "x_grad")


def test_a_capture_inside_a_capture_leaves_the_outer_one_its_values():
    from bryo_transforms import jit

    class Twice(Module):
        @jit(graph_updates=False)
        def __call__(self, x):
            self.sow(Intermediate, "x", x)
            return x

    model = Twice()

    def outer(m, x):
        _, inner = capture(m, Intermediate)(x)
        m(x + 1.0)
        return inner

    inner, sown = capture(outer, Intermediate)(model, jnp.array(1.0))
    assert [float(v) for v in inner["x"].get_value()] == [1.0]
    assert [float(v) for v in sown["x"].get_value()] == [2.0]
    assert "__captures__" not in vars(model)
