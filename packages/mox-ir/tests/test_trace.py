import copy
import gc
import weakref
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import jaxpr_as_fun

from bryo_mox import Equation, ModuleCall, MoxError, eval_mox, make_mox
from bryo_mox._eval import _singles
from bryo_mox._ir import iter_nodes
from bryo_mox._load import from_document
from bryo_mox._markers import begin_p, end_p
from bryo_mox._trace import intercepting
from bryo_mox.document import to_document
from bryo_mox.testing import Counter, Linear, Module, ResBlock


def apply(model, x):
    return model(x)


def test_module_calls_become_nodes(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    (root,) = mox.nodes
    assert isinstance(root, ModuleCall) and root.info.short_type == "MLP"
    calls = [n for n in root.nodes if isinstance(n, ModuleCall)]
    assert [c.name for c in calls] == ["layers/0", "layers/1"]
    assert calls[0].attrs == {"in_features": 3, "features": 4}
    assert calls[0].type == "bryo_mox.testing.Linear"
    # parameters are inputs of the node that uses them
    assert calls[0].n_state == 2
    assert [v.aval.shape for v in calls[0].invars] == [(3, 4), (4,), (2, 3)]
    assert all(isinstance(n, Equation) for n in calls[0].nodes)
    relu = [n for n in root.nodes if isinstance(n, Equation)]
    assert relu[0].primitive.name == "custom_jvp_call" and relu[0].name == "relu"


def test_without_backend_calls_are_plain_equations(bryo_plugin_manager, mlp, x):
    mox = make_mox(apply)(mlp, x)
    assert not any(isinstance(n, ModuleCall) for n in mox.nodes)
    np.testing.assert_allclose(eval_mox(mox, mlp, x), mlp(x))


def test_eval_matches_original(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    expected = mlp(x)
    np.testing.assert_allclose(eval_mox(mox, mlp, x), expected, rtol=1e-6)
    np.testing.assert_allclose(
        jax.jit(lambda m, x: eval_mox(mox, m, x))(mlp, x), expected, rtol=1e-6
    )


def test_eval_under_grad_vmap_scan(toy, mlp, x):
    mox = make_mox(apply)(mlp, x[0])
    loss = lambda f: lambda m: jnp.sum(f(m, x[0]) ** 2)
    g_mox = jax.grad(loss(lambda m, v: eval_mox(mox, m, v)))(mlp)
    g_ref = jax.grad(loss(apply))(mlp)
    for a, b in zip(
        jax.tree_util.tree_leaves(g_mox), jax.tree_util.tree_leaves(g_ref), strict=False
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    batched = jax.vmap(lambda v: eval_mox(mox, mlp, v))(x)
    np.testing.assert_allclose(batched, mlp(x), rtol=1e-6)

    def step(carry, v):
        return carry + eval_mox(mox, mlp, v).sum(), None

    total, _ = jax.lax.scan(step, 0.0, x)
    np.testing.assert_allclose(total, mlp(x).sum(), rtol=1e-5)


def _hlo_ops(f, *args):
    """(type, opcode) of every instruction of the optimized HLO, names stripped."""
    text = jax.jit(f).lower(*args).compile().as_text()
    ops = []
    for line in text.splitlines():
        line = line.strip().removeprefix("ROOT ")
        if line.startswith("%") and " = " in line:
            rhs = line.split(" = ", 1)[1]
            type_, _, rest = rhs.partition(" ")
            ops.append((type_, rest.split("(", 1)[0]))
    return sorted(ops)


def test_jitted_eval_compiles_to_same_program(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    via_mox = lambda m, v: eval_mox(mox, m, v)
    assert _hlo_ops(via_mox, mlp, x) == _hlo_ops(apply, mlp, x)
    cost = lambda f: jax.jit(f).lower(mlp, x).compile().cost_analysis()
    a, b = cost(via_mox), cost(apply)
    a, b = (a[0], b[0]) if isinstance(a, list) else (a, b)
    assert a["flops"] == b["flops"]


def test_custom_jvp_kept_relu_grad_at_zero(bryo_plugin_manager):
    mox = make_mox(jax.nn.relu)(0.0)
    assert mox.nodes[0].primitive.name == "custom_jvp_call"
    assert jax.grad(lambda v: eval_mox(mox, v))(0.0) == 0.0


def test_custom_vjp_kept(bryo_plugin_manager):
    @jax.custom_vjp
    def f(v):
        return jnp.sin(v)

    f.defvjp(lambda v: (jnp.sin(v), None), lambda _, g: (7.0 * g,))
    mox = make_mox(f)(1.0)
    assert mox.nodes[0].primitive.name == "custom_vjp_call"
    assert jax.grad(lambda v: eval_mox(mox, v))(1.0) == 7.0


def test_state_mutation_stays_inside_and_module_is_restored(toy):
    counter = Counter()
    mox = make_mox(lambda v: counter(counter(v)))(jnp.ones(2))
    first, second = mox.nodes
    assert first.n_state_out == 1 and second.invars[0] is first.outvars[0]
    assert int(counter.count) == 0  # not a tracer, not incremented
    np.testing.assert_allclose(eval_mox(mox, jnp.ones(2)), 4.0 * jnp.ones(2))


def test_unchanged_state_outputs_are_pruned(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    assert all(c.n_state_out == 0 for c in mox.nodes if isinstance(c, ModuleCall))
    assert len(mox.nodes[0].outvars) == 1


def test_closed_over_module_params_are_constants(toy):
    block = ResBlock(4, key=jax.random.key(1))
    mox = make_mox(block)(jnp.ones((1, 4)))
    assert len(mox.block.constvars) == 2 and len(mox.invars) == 1
    np.testing.assert_allclose(eval_mox(mox, jnp.ones((1, 4))), block(jnp.ones((1, 4))))


def test_static_kwargs_of_module_calls(toy):
    class Scale(Linear):
        def forward(self, v, *, double=False):
            return super().forward(v) * (2.0 if double else 1.0)

    layer = Scale(2, 2, key=jax.random.key(0))
    mox = make_mox(lambda v: layer(v, double=True))(jnp.ones((1, 2)))
    np.testing.assert_allclose(
        eval_mox(mox, jnp.ones((1, 2))), layer(jnp.ones((1, 2)), double=True)
    )


def test_pretty_printer(toy, mlp, x):
    text = str(make_mox(apply)(mlp, x))
    assert text.startswith("{ lambda ; a:f32[3,4]")
    assert "module_call[type=Linear name=layers/0 in_features=3 features=4]" in text
    assert "dot_general[" in text and text.rstrip().endswith("}")


def test_bad_args(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    with pytest.raises(MoxError, match="structure"):
        eval_mox(mox, x, mlp)
    with pytest.raises(MoxError, match="are 1 positional arguments; the MoX was traced with 2"):
        eval_mox(mox, mlp)
    # the message names where the arguments differ and what each side holds
    dict_for_array = r"at args\[1\] .* hold a dict \(\['a'\]\); .* an array leaf"
    with pytest.raises(MoxError, match=dict_for_array):
        eval_mox(mox, mlp, {"a": x})
    tuple_for_model = r"at args\[0\] .* hold a tuple; the MoX was traced with a MLP"
    with pytest.raises(MoxError, match=tuple_for_model):
        eval_mox(mox, (mlp,), x)


def test_leaves_that_are_not_arrays_are_static(x):
    def scaled(config, v):
        mode, factor = config
        return v * factor if mode == "scale" else v

    mox = make_mox(scaled)(("scale", 2.0), x)
    assert len(mox.invars) == 1 and dict(mox.static_leaves) == {0: "scale", 1: 2.0}
    np.testing.assert_allclose(eval_mox(mox, ("scale", 2.0), x), 2.0 * x)
    with pytest.raises(MoxError, match=r"`args\[0\]\[0\]` is 'shift'"):
        eval_mox(mox, ("shift", 2.0), x)
    assert len(make_mox(lambda s, v: v * s)(3.0, x).invars) == 2  # a whole argument: traced
    back = from_document(to_document(mox))  # files mark static leaves, not their values
    assert back.in_tree is None and back.static_leaves == ()
    assert back.in_spec is not None and back.in_spec.static_positions == [0, 1]
    np.testing.assert_allclose(eval_mox(back, ("scale", 2.0), x), 2.0 * x)


def _noisy(x, *, key, scale=1.0, mode="add"):
    noise = jax.random.normal(key, x.shape)
    return x + scale * noise if mode == "add" else x * noise


def test_keyword_arguments_holding_arrays_are_traced():
    x = jnp.ones(3)
    mox = make_mox(_noisy)(x, key=jax.random.key(0), mode="mul")
    assert mox.traced_kwargs == ("key",) and dict(mox.static_kwargs) == {"mode": "mul"}
    assert len(mox.invars) == 2  # x, then the key: an input, not a constant
    for seed in (0, 1):
        key = jax.random.key(seed)
        expected = _noisy(x, key=key, mode="mul")
        np.testing.assert_allclose(eval_mox(mox, x, key=key), expected)
        np.testing.assert_allclose(eval_mox(mox, x, key=key, mode="mul"), expected)
    jitted = jax.jit(lambda v, k: eval_mox(mox, v, key=k))(x, jax.random.key(2))
    np.testing.assert_allclose(jitted, _noisy(x, key=jax.random.key(2), mode="mul"))


def test_keyword_arguments_errors():
    x = jnp.ones(3)
    mox = make_mox(_noisy)(x, key=jax.random.key(0), scale=2.0)
    with pytest.raises(MoxError, match=r"`scale=3.0` differs from the traced `scale=2.0`"):
        eval_mox(mox, x, key=jax.random.key(0), scale=3.0)
    with pytest.raises(MoxError, match=r"\['key'\] are missing"):
        eval_mox(mox, x)
    with pytest.raises(MoxError, match="`mode` was not given"):
        eval_mox(mox, x, key=jax.random.key(0), mode="add")
    with pytest.raises(MoxError, match="keyword arguments have structure"):
        eval_mox(mox, x, key={"a": jax.random.key(0)})
    mixed = make_mox(lambda v, key: v + key[0])(x, key=(jnp.ones(1), "text"))
    assert len(mixed.invars) == 2 and dict(mixed.static_leaves) == {2: "text"}
    with pytest.raises(MoxError, match=r"`kwargs\['key'\]\[1\]` is 'other'"):
        eval_mox(mixed, x, key=(jnp.ones(1), "other"))


def test_dead_equations_are_dropped():
    def f(x):
        jax.jit(lambda: ())()  # no inputs, no outputs: computes nothing
        return x + 1.0

    mox = make_mox(f)(jnp.ones(2))
    assert [node.primitive.name for node in mox.nodes] == ["add"]


def test_one_trace_the_leaves_are_the_jaxpr(toy, mlp, x):
    """Module calls cost no trace of their own: the leaves are make_jaxpr's equations."""
    mox = make_mox(apply)(mlp, x)
    plain = jax.make_jaxpr(apply)(mlp, x).jaxpr.eqns
    assert [n.primitive.name for n in _outer(mox)] == [e.primitive.name for e in plain]


def _outer(mox):
    """Leaf equations outside any region (module bodies included), in order."""
    out, stack = [], [iter(mox.nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
        elif isinstance(node, ModuleCall):
            stack.append(iter(node.nodes))
        else:
            out.append(node)
    return out


def test_markers_are_identities_under_transforms(toy, mlp):
    """A jaxpr that keeps its markers (a scan body does) evaluates, compiles and
    differentiates like the function."""
    v = jnp.linspace(-1.0, 1.0, 3)
    with intercepting():
        closed = jax.make_jaxpr(apply)(mlp, v)
    assert {e.primitive for e in closed.jaxpr.eqns} >= {begin_p, end_p}
    leaves = jax.tree_util.tree_leaves((mlp, v))
    run = lambda *xs: jaxpr_as_fun(closed)(*xs)[0]
    np.testing.assert_allclose(jax.jit(run)(*leaves), mlp(v), rtol=1e-6)
    batched = jax.vmap(lambda row: run(*leaves[:-1], row))(jnp.stack([v, 2 * v]))
    np.testing.assert_allclose(batched[1], mlp(2 * v), rtol=1e-6)
    grad = jax.grad(lambda row: run(*leaves[:-1], row).sum())(v)
    np.testing.assert_allclose(grad, jax.grad(lambda row: mlp(row).sum())(v), rtol=1e-5)
    with intercepting():
        linear = jax.make_jaxpr(lambda u: _Double()(u))(v)
    (transposed,) = jax.linear_transpose(lambda u: jaxpr_as_fun(linear)(u)[0], v)(jnp.ones(3))
    np.testing.assert_allclose(transposed, 2.0 * jnp.ones(3))


class _Double(Module):
    def forward(self, v):
        return 2.0 * v


def test_grad_inside_the_traced_function(toy, mlp, x):
    """Values escaping a call (residuals of an inner grad) dissolve it; nothing is lost."""
    fun = lambda m, v: jax.grad(lambda u: m(u).sum())(v)
    mox = make_mox(fun)(mlp, x)
    np.testing.assert_allclose(eval_mox(mox, mlp, x), fun(mlp, x), rtol=1e-5)


class _Shift(Linear):
    """A Linear whose output adds a value it reads from outside (not an argument)."""

    outside: ClassVar[list] = []

    def forward(self, v):
        return super().forward(v) + self.outside[-1]


def test_values_a_module_closes_over_become_state_inputs(toy):
    layer = _Shift(2, 2, key=jax.random.key(0))

    def fun(s, v):
        _Shift.outside.append(s)
        try:
            return layer(v)
        finally:
            _Shift.outside.pop()

    mox = make_mox(fun)(jnp.float32(3.0), jnp.ones((1, 2)))
    (call,) = mox.nodes
    assert call.n_state == 3 and call.invars[2] is mox.invars[0]  # w, b, then the shift
    assert [v.aval.shape for v in call.body.invars] == [(2, 2), (2,), (), (1, 2)]
    np.testing.assert_allclose(
        eval_mox(mox, jnp.float32(1.0), jnp.ones((1, 2))),
        Linear.forward(layer, jnp.ones((1, 2))) + 1,
    )


class _Constant(Module):
    """A module without state or arguments."""

    def forward(self):
        return jnp.arange(3.0) + np.arange(3.0)


def test_call_without_inputs_and_constants_of_the_body(toy):
    layer = _Constant()
    mox = make_mox(lambda: layer())()
    (call,) = mox.nodes
    assert isinstance(call, ModuleCall) and call.invars == () and call.n_state == 0
    assert len(call.body.constvars) == 1 and not mox.block.constvars  # the numpy constant
    np.testing.assert_allclose(eval_mox(mox), 2 * np.arange(3.0))


def test_eval_cache_is_freed_with_the_mox(toy, mlp, x):
    mox = make_mox(apply)(mlp, x)
    eval_mox(mox, mlp, x)
    equations = [weakref.ref(n) for n in _outer(mox)]
    cached = sum(1 for ref in equations if ref() in _singles)
    assert cached == len(equations)
    mox_ref = weakref.ref(mox)
    del mox
    gc.collect()
    assert mox_ref() is None and all(ref() is None for ref in equations)


def test_copies_of_a_mox_are_the_mox(toy, mlp, x):
    # every node is immutable; a jaxpr cannot be deep-copied, so copying must not try
    mox = make_mox(apply)(mlp, x)
    (root,) = mox.nodes
    assert copy.deepcopy(mox) is mox and copy.copy(mox) is mox
    assert copy.deepcopy(root) is root
    twin = copy.deepcopy({"mox": mox, "n": [1]})
    assert twin["mox"] is mox
    np.testing.assert_allclose(eval_mox(twin["mox"], mlp, x), mlp(x))


def test_equations_sharing_one_params_dict_each_get_their_own_regions():
    # the converter looks up the jaxprs of a params dict once (equations the loader
    # makes from one traced template share theirs); each equation's regions are its own
    from jax.extend import core as jex

    from bryo_mox._compat import new_jaxpr_eqn
    from bryo_mox._trace import convert

    closed = jax.make_jaxpr(lambda v: jax.jit(jnp.sin)(v))(jnp.ones(3))
    (call,) = closed.jaxpr.eqns
    out = jex.Var(call.outvars[0].aval)
    again = new_jaxpr_eqn(
        list(call.outvars),
        [out],
        call.primitive,
        call.params,
        call.effects,
        call.source_info,
        call.ctx,
    )
    jaxpr = closed.jaxpr.replace(eqns=[call, again], outvars=[out])
    first, second = convert(jaxpr).nodes
    assert isinstance(first, Equation) and isinstance(second, Equation)
    assert first.eqn.params is second.eqn.params
    assert len(first.regions) == len(second.regions) == 1
    assert first.regions[0].block is not second.regions[0].block
    np.testing.assert_allclose(
        jaxpr_as_fun(jex.ClosedJaxpr(jaxpr, []))(jnp.ones(3))[0], jnp.sin(jnp.sin(jnp.ones(3)))
    )


def _layout(block):
    """A block's structure: counts, module calls (type, state counts), primitives, regions."""
    nodes = []
    for node in block.nodes:
        if isinstance(node, ModuleCall):
            counts = (node.n_state, node.n_state_out, len(node.invars), len(node.outvars))
            nodes.append((node.type, *counts, _layout(node.body)))
        else:
            regions = tuple(_layout(region.block) for region in node.regions)
            nodes.append((node.primitive.name, len(node.invars), len(node.outvars), regions))
    return (len(block.constvars), len(block.invars), len(block.outvars), tuple(nodes))


def test_the_loader_builds_each_block_as_conversion_builds_a_traced_one(toy, mlp, x):
    # from_document makes MoX nodes as it builds (module calls inside regions aside, which
    # are converted with their region): a loaded MoX has the traced one's structure, with
    # unchanged state outputs pruned and each block holding the constants it uses
    block = ResBlock(3, key=jax.random.key(1))
    counter = Counter()
    table = jnp.arange(3.0).reshape(1, 3) + 1.0

    class Shift(Module):  # closes over `table`: a constant of its body
        def forward(self, v):
            return v + table

    shift = Shift()

    def nested(m, v):
        u = jax.jit(lambda u: m(u))(v) + block(shift(v[:, :3])).sum() + jnp.tanh(m(v))
        return counter(u * table[0, 0])

    linear = Linear(3, 3, key=jax.random.key(2))
    for fn, args in ((nested, (mlp, x)), (lambda m, v: m(m(v)), (linear, x))):
        mox = make_mox(fn)(*args)
        loaded = from_document(to_document(mox))
        assert _layout(loaded.block) == _layout(mox.block)
        ours, theirs = (
            jax.tree_util.tree_leaves(r) for r in (eval_mox(loaded, *args), eval_mox(mox, *args))
        )
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    calls = {
        n.info.short_type: n for n in make_mox(nested)(mlp, x).nodes if isinstance(n, ModuleCall)
    }
    assert calls["Counter"].n_state_out == 1  # a state output the call changed: kept
    assert len(calls["Shift"].body.constvars) == 1  # the constant its body uses


def test_a_traced_leaf_is_inlined_on_its_inputs_in_the_order_it_reads_them():
    # `_prepared` marks an equation reading the inputs as given (`in_order`): inlining
    # then copies them; one reading them otherwise (or a literal) maps each one
    from jax.extend import core as jex

    from bryo_mox import _load

    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    cases = [(lambda a, b: a - b, True), (lambda a, b: b - a, False), (lambda a, b: a * 2.0, False)]
    for fn, in_order in cases:
        traced = _load._prepared(jax.make_jaxpr(fn)(scalar, scalar))
        assert traced.single is not None and traced.in_order is in_order
        ins = [jex.Var(jax.core.ShapedArray((), jnp.float32)) for _ in range(2)]
        eqns: list = []
        outs = _load._inline(traced, ins, eqns, [], [])
        (eqn,) = eqns
        expected = [
            ins[p] if p >= 0 else a
            for p, a in zip(traced.positions, traced.single.invars, strict=True)
        ]
        assert eqn.invars == expected and eqn.outvars == outs
        assert (eqn.invars == ins) is in_order


def test_a_call_inside_a_jit_traced_before_is_not_seen(toy, mlp, x):
    """docs/mox.md, Limitations: JAX reuses a jitted function's cached trace, so a module
    called inside it does not run while make_mox traces; a new function object does."""
    step = jax.jit(lambda m, v: m(v))
    step(mlp, x)  # traced and cached by JAX, outside make_mox

    def calls(fn) -> list[str]:
        mox = make_mox(fn)(mlp, x)
        return [n.name for n in iter_nodes(mox.block) if isinstance(n, ModuleCall)]

    assert calls(lambda m, v: step(m, v)) == []
    assert calls(lambda m, v: jax.jit(lambda m, v: m(v))(m, v)) == ["", "layers/0", "layers/1"]


@pytest.mark.parametrize(
    ("fun", "dissolves"),
    [
        (lambda m, c, v: m(v), False),
        (lambda m, c, v: c(c(m(v))), False),  # state changed: outputs kept and pruned
        (lambda m, c, v: jax.grad(lambda u: m(u).sum())(v), True),  # residuals escape
        (lambda m, c, v: m(jax.lax.scan(lambda h, _: (c(h), None), v, None, length=2)[0]), False),
    ],
)
def test_the_one_pass_conversion_builds_what_the_two_passes_build(
    toy, monkeypatch, mlp, fun, dissolves, mox_structure
):
    """`convert` takes every marker pair for a call in one pass, and falls back on
    `_find_calls` when one cannot be: either way the MoX is the one the two passes make."""
    from bryo_mox import _trace

    traced, original = [], _trace.convert_closed
    monkeypatch.setattr(_trace, "convert_closed", lambda c: (traced.append(c), original(c))[1])
    make_mox(fun)(mlp, Counter(), jnp.ones((2, 3)))
    closed = traced[0]  # (then the sub-jaxprs of its equations)
    jaxpr, consts = closed.jaxpr, closed.consts
    two_passes = _trace._Converter(jaxpr, consts, _trace._find_calls(jaxpr)).run()
    assert mox_structure(_trace.convert(jaxpr, consts)) == mox_structure(two_passes)
    if dissolves:
        with pytest.raises(_trace._Dissolve):
            _trace._Converter(jaxpr, consts, None).run()
    else:
        _trace._Converter(jaxpr, consts, None).run()
