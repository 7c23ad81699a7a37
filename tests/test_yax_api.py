"""YAX's public API on `bryo.mox` (issue 31): its names, its object model on bryo's nodes,
its query dialect and its file functions, on Linen, NNX and Equinox models."""

from __future__ import annotations

import dataclasses
import io

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex

import bryo_mox
from bryo import mox as yax
from bryo import nnx

X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)

YAX_ALL = (
    "Equation", "Expr", "Literal", "Mox", "Symbol", "Var", "dump_yson", "dump_xml",
    "eval_mox", "make_mox", "map_mox", "query", "sub",
)  # fmt: skip


class LinenRes(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return xs + nn.Dense(4)(xs)


class NnxRes(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x):
        return x + self.linear(x)


class EqxRes(eqx.Module):
    linear: eqx.nn.Linear

    def __init__(self, key):
        self.linear = eqx.nn.Linear(4, 4, key=key)

    def __call__(self, x):
        return x + self.linear(x)


def traced(kind: str):
    """(mox, args, expected output, dense layer's type name) of a residual block."""
    if kind == "linen":
        model = LinenRes()
        variables = model.init(jax.random.key(0), X)
        return yax.make_mox(model.apply)(variables, X), (variables, X), model.apply(variables, X)
    if kind == "nnx":
        graphdef, state = nnx.split(NnxRes(nnx.Rngs(0)))

        def apply(state, x):
            return nnx.merge(graphdef, state)(x)

        return yax.make_mox(apply)(state, X), (state, X), apply(state, X)
    model = EqxRes(jax.random.key(0))

    def call(m, x):
        return jax.vmap(m)(x)

    return yax.make_mox(call)(model, X), (model, X), call(model, X)


KINDS = ["linen", "nnx", "equinox"]
LINEAR = {"linen": "Dense", "nnx": "Linear", "equinox": "Linear"}


def test_every_yax_name_is_in_the_facade():
    assert [name for name in YAX_ALL if not hasattr(yax, name)] == []
    assert yax.Expr is yax.Node


@pytest.mark.parametrize("kind", KINDS)
def test_root_and_module_calls_are_mox(kind):
    mox, args, expected = traced(kind)
    assert isinstance(mox, yax.Mox) and mox.is_ephemeral and mox.module_ty is None
    (block,) = mox.children
    assert isinstance(block, yax.Mox) and isinstance(block, yax.ModuleCall)
    assert not block.is_ephemeral and block.module_ty.__name__ in {"LinenRes", "NnxRes", "EqxRes"}
    assert isinstance(block, yax.Expr) and not isinstance(block.children[0], yax.Equation)
    (linear,) = yax.query(f'//[@type="{LINEAR[kind]}"]', mox)
    assert linear.params["name"] in {"Dense_0", "linear"}
    assert linear.var_tree.num_leaves == linear.n_state == 2
    assert all(isinstance(s, yax.Var) for s in linear.inputs)
    # the call's state inputs come first: the arguments follow
    assert linear.inputs[2:] == block.children[0].inputs[2:] or kind == "equinox"
    assert [s.atom for s in linear.outputs] == list(linear.outvars)
    assert isinstance(mox.to_dict()["children"][0]["children"][0], dict)
    np.testing.assert_allclose(yax.eval_mox(mox, *args), expected, rtol=1e-6)
    assert type(mox) is yax.Mox and type(block) is yax.ModuleCall


@pytest.mark.parametrize("kind", KINDS)
def test_to_dict_and_equation_prim(kind):
    mox, _, _ = traced(kind)
    tree = mox.to_dict()
    assert tree["primitive"] == "module_call" and tree["ephemeral"] is True
    block = tree["children"][0]
    assert block["ephemeral"] is False and block["primitive"] == "module_call"
    flat = mox.to_dict(recursively=False)
    assert "children" not in flat
    equations = [n for n in yax.query("//*", mox) if isinstance(n, yax.Equation)]
    assert equations and all(e.prim is e.primitive for e in equations)
    assert all(e.to_dict()["primitive"] == e.prim.name for e in equations)


def test_symbols_wrap_atoms_and_make_new_ones():
    mox = yax.make_mox(lambda x: x > 0)(jnp.array([-1, 1]))
    (eq,) = mox.children
    kinds = [type(s) for s in eq.inputs]
    assert kinds == [yax.Var, yax.Literal]
    var, lit = eq.inputs
    assert isinstance(var.value, jax.core.ShapedArray) and var.aval is var.atom.aval
    assert lit.const == lit.value == 0 and not isinstance(lit.value, jax.core.AbstractValue)
    assert var == yax.Symbol(var.atom) and hash(var) == hash(yax.Var(var.atom))
    assert var != yax.Var(var.aval)  # a fresh variable of the same type
    assert isinstance(yax.Symbol(var.aval), yax.Var)
    assert isinstance(yax.Symbol(3.0), yax.Literal) and isinstance(yax.Var(var.aval).atom, jex.Var)
    with pytest.raises(yax.MoxError, match="constant is a `Literal`"):
        yax.Var(3.0)
    with pytest.raises(yax.MoxError, match="placeholder is a `Var`"):
        yax.Literal(var.aval)


@pytest.mark.parametrize("kind", KINDS)
def test_map_mox_walks_what_fn_returns(kind):
    mox, _, _ = traced(kind)

    def walk(node):  # YAX's order: a node, then the children of a root or module call
        found = [node]
        for child in getattr(node, "children", []):
            found += walk(child)
        return found

    seen = []
    yax.map_mox(lambda n: seen.append(n) or n, mox)
    assert seen == walk(mox) and len(seen) > 3
    pruned = []
    yax.map_mox(lambda n: pruned.append(n) or (n if type(n) is yax.Mox else None), mox)
    assert pruned == [mox, *mox.children]
    with pytest.raises(yax.MoxError, match="must be a Mox"):
        yax.map_mox(lambda n: n, mox.children[0])


@pytest.mark.parametrize("kind", KINDS)
def test_yax_query_dialect(kind):
    mox, _, _ = traced(kind)
    linear_type = LINEAR[kind]
    assert yax.query("/", mox) == [mox]
    everything = yax.query("//", mox)
    assert everything[0] is mox and everything == yax.query("/descendant-or-self::*", mox)
    (linear,) = yax.query(f'//[@type="{linear_type}"]', mox)
    assert yax.query(f'//module_call[@type="{linear_type}"]', mox) == [linear]
    assert yax.query('//[@primitive="module_call"]', mox) == [mox, *yax.query("//module_call", mox)]
    assert yax.query('//[@primitive="add"]', mox) == yax.query("//add", mox) != []
    assert yax.query('//[@ephemeral="True"]', mox) == [mox]
    assert yax.query(f'./module_call/..//[@type="{linear_type}"]', mox) == [linear]
    assert yax.query(f'//module_call//[@type="{linear_type}"][@primitive="module_call"]', mox)
    compiled = yax.XPath(f'//[@type="{linear_type}"]')
    assert yax.query(compiled, mox) == [linear] and str(compiled) == f'//[@type="{linear_type}"]'
    assert yax.XPath(compiled) == compiled


def test_yax_dialect_on_features_and_jit_names():
    model = nn.Sequential([nn.Dense(10), nn.relu, nn.Dense(4)])
    variables = model.init(jax.random.key(0), X)
    mox = yax.make_mox(model.apply)(variables, X)
    assert [n.params["name"] for n in yax.query("//[@features=10]", mox)] == ["layers_0"]
    (relu,) = yax.query('//[@primitive="jit"][@name="relu"]', mox)
    assert isinstance(relu, yax.Equation) and relu.prim.name == "jit"


def test_a_valid_xpath_keeps_its_meaning_and_bad_text_names_both_dialects():
    mox, _, _ = traced("linen")
    assert yax.query("count(//module_call)", mox) == 2.0
    with pytest.raises(yax.MoxError, match="nor YAX's short form"):
        yax.query("//[@type=", mox)
    with pytest.raises(yax.MoxError, match="nor YAX's short form"):
        yax.XPath("//[[")
    with pytest.raises(yax.MoxError, match="no token at offset 2"):
        list(yax.tokenize_xpath("//#"))


@pytest.mark.parametrize(
    "text",
    ["/", "//", "//jit", '//[@primitive="jit"][@name="relu"]', './module_call/..//[@x=1.5]',
     "child::a[position() < 3] | $v and -1"],
)  # fmt: skip
def test_tokens_spell_the_query(text):
    tokens = list(yax.tokenize_xpath(text))
    assert "".join(str(t) for t in tokens) == text.replace(" ", "")
    assert all(text[t.start :].startswith(t.value) for t in tokens)


def test_tokens_follow_xpath_disambiguation():
    kinds = [(t.kind, t.value) for t in yax.tokenize_xpath("a * b and count(@*)")]
    assert kinds == [
        ("NameTest", "a"), ("Operator", "*"), ("NameTest", "b"), ("Operator", "and"),
        ("FunctionName", "count"), ("(", "("), ("@", "@"), ("NameTest", "*"), (")", ")"),
    ]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_params_edits_rename_and_requery_but_never_change_the_computation(kind):
    mox, args, expected = traced(kind)
    (linear,) = yax.query(f'//[@type="{LINEAR[kind]}"]', mox)
    before = linear.name
    linear.params["name"] = "renamed"
    assert linear.name.rsplit("/", 1)[-1] == "renamed"
    assert linear.name.rpartition("/")[0] == before.rpartition("/")[0]
    assert yax.query('//[@name="renamed"]', mox) == [linear]  # the cached view is rebuilt
    linear.params["note"] = "adapted"
    assert linear.attrs["note"] == "adapted" and yax.query('//[@note="adapted"]', mox) == [linear]
    del linear.params["note"]
    assert "note" not in linear.params
    np.testing.assert_allclose(yax.eval_mox(mox, *args), expected, rtol=1e-6)
    with pytest.raises(yax.MoxError, match="must be an int, float"):
        linear.params["init"] = jax.nn.initializers.zeros
    with pytest.raises(yax.MoxError, match="without '/'"):
        linear.params["name"] = "a/b"
    with pytest.raises(yax.MoxError, match="reserved keys"):
        linear.params["type"] = "Other"
    with pytest.raises(yax.MoxError, match="cannot be deleted"):
        del linear.params["name"]
    assert linear.name.endswith("renamed")  # failed edits leave the node as it was
    with pytest.raises(TypeError):
        mox.params["name"] = "root"  # the root has no params


@pytest.mark.parametrize("kind", KINDS)
def test_assigning_a_node_field_is_refused_with_the_way_to_do_it(kind):
    mox, _, _ = traced(kind)
    block = mox.children[0]
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"call.params\['name'\]"):
        block.module_ty = None
    with pytest.raises(dataclasses.FrozenInstanceError, match="immutable"):
        mox.inputs = []
    eq = next(n for n in yax.query("//*", mox) if isinstance(n, yax.Equation))
    with pytest.raises(dataclasses.FrozenInstanceError, match="`sub` it"):
        eq.outputs = []


def test_module_ty_of_an_unimportable_class_names_it():
    class Local(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x * 2

    model = Local()
    mox = yax.make_mox(model.apply)({}, X)
    with pytest.raises(yax.MoxError, match="cannot be imported here"):
        _ = mox.children[0].module_ty


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("binary", [False, True])
def test_dump_xml_and_dump_yson_write_file_objects_that_load_back(kind, binary):
    mox, args, expected = traced(kind)
    for write, format in ((yax.dump_xml, "xml"), (yax.dump_yson, "yson")):
        buffer = io.BytesIO() if binary else io.StringIO()
        write(mox, buffer)
        assert buffer.tell() > 0
        buffer.seek(0)
        loaded = yax.load(buffer, format=format)
        assert [type(n) for n in yax.query("//*", loaded)] == [
            type(n) for n in yax.query("//*", mox)
        ]
    if kind == "linen":
        np.testing.assert_allclose(yax.eval_mox(loaded, *args), expected, rtol=1e-6)


def test_dump_and_load_take_named_files_and_bound_what_they_read(tmp_path):
    mox, _, _ = traced("linen")
    with open(tmp_path / "m.mox.yson", "wb") as file:
        yax.dump(mox, file)  # the format follows the file's name
    with open(tmp_path / "m.mox.yson", "rb") as file:
        assert yax.dumps(yax.load(file)) == yax.dumps(mox)
    with pytest.raises(yax.MoxError, match="pass `format=`"):
        yax.dump(mox, io.StringIO())
    small = bryo_mox.Limits(max_bytes=100)
    with pytest.raises(yax.MoxSerializationError, match="size budget"):
        yax.load(io.StringIO(yax.dumps(mox)), format="xml", limits=small)


def _relu_model(kind):
    """(mox, args, apply with an activation) of linear -> relu -> linear."""
    if kind == "linen":
        model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(4)])
        variables = model.init(jax.random.key(0), X)

        def linen_apply(act):
            return nn.Sequential([nn.Dense(4), act, nn.Dense(4)]).apply(variables, X)

        return yax.make_mox(model.apply)(variables, X), (variables, X), linen_apply
    if kind == "nnx":
        first, second = nnx.Linear(4, 4, rngs=nnx.Rngs(0)), nnx.Linear(4, 4, rngs=nnx.Rngs(1))

        def nnx_call(a, b, x):
            return b(jax.nn.relu(a(x)))

        return (
            yax.make_mox(nnx_call)(first, second, X),
            (first, second, X),
            lambda act: second(act(first(X))),
        )
    first, second = (
        eqx.nn.Linear(4, 4, key=jax.random.key(0)),
        eqx.nn.Linear(4, 4, key=jax.random.key(1)),
    )

    def eqx_call(a, b, x):
        return jax.vmap(lambda r: b(jax.nn.relu(a(r))))(x)

    return (
        yax.make_mox(eqx_call)(first, second, X),
        (first, second, X),
        lambda act: jax.vmap(lambda r: second(act(first(r))))(X),
    )


@pytest.mark.parametrize("kind", KINDS)
def test_sub_takes_an_equation_of_another_mox(kind):
    mox, args, apply = _relu_model(kind)
    before = yax.dumps(mox)
    gelu = yax.make_mox(jax.jit(jax.nn.gelu))(X)
    (equation,) = gelu.children
    assert isinstance(equation, yax.Equation)
    new = yax.sub('//[@primitive="jit"][@name="relu"]', equation, mox)
    np.testing.assert_allclose(yax.eval_mox(new, *args), apply(jax.nn.gelu), rtol=1e-5)
    assert yax.dumps(mox) == before  # the rewritten MoX is untouched


@pytest.mark.parametrize("kind", KINDS)
def test_sub_calls_a_function_with_yax_paths(kind):
    mox, args, apply = _relu_model(kind)
    seen = []

    def fn(path, node):
        seen.append((path, node))
        return yax.make_mox(jax.nn.gelu)(jnp.ones(node.out_avals[0].shape))

    new = yax.sub('//[@primitive="jit"][@name="relu"]', fn, mox)
    ((path, node),) = seen
    assert path[-1] == "relu" and isinstance(node, yax.Equation)
    assert path[:-1] == (("Sequential",) if kind == "linen" else ())
    np.testing.assert_allclose(yax.eval_mox(new, *args), apply(jax.nn.gelu), rtol=1e-5)
    assert yax.sub("//module_call", lambda path, node: node, mox) is mox  # kept
    with pytest.raises(yax.MoxError, match="replacement `fn` made for module_call"):
        yax.sub("//module_call[1]", lambda path, node: 3, mox)
    with pytest.raises(yax.MoxError, match=r"a function `\(path, node\) -> replacement`"):
        yax.sub("//module_call", 3, mox)


def test_sub_takes_a_module_call_of_another_mox_with_its_weights_in_the_params_tree():
    mox, (variables, x), _ = _relu_model("linen")
    dense = nn.Dense(4, use_bias=False)
    weights = dense.init(jax.random.key(5), X)
    (call,) = yax.make_mox(dense.apply)(weights, X).children
    new = yax.sub('//[@name="layers_2"]', call, mox)
    assert new.extra_params == ()
    assert [n.name for n in yax.query("//module_call", new)] == ["", "layers_0", "Dense_0"]
    hidden = jax.nn.relu(nn.Dense(4).apply({"params": variables["params"]["layers_0"]}, x))
    params = {"layers_0": variables["params"]["layers_0"], "Dense_0": weights["params"]}
    out = yax.eval_mox(new, {"params": params}, x)
    np.testing.assert_allclose(out, dense.apply(weights, hidden), rtol=1e-5)
    source = yax.make_mox(dense.apply)(weights, X)
    (again,) = yax.query('//[@type="Dense"]', source)  # a call from `query` too
    assert yax.sub('//[@name="layers_2"]', again, mox).in_tree == new.in_tree
    # a MoX replacement keeps bryo's convention: new parameters in a trailing dict
    as_mox = yax.make_mox(dense.apply)(weights, X)
    new = yax.sub('//[@name="layers_2"]', as_mox, mox)
    assert [k for k, _ in new.extra_params] == ["layers_2:0"]
    out = yax.eval_mox(new, variables, x, {"layers_2:0": weights["params"]["kernel"]})
    np.testing.assert_allclose(out, dense.apply(weights, hidden), rtol=1e-5)


class Identity(nn.Module):
    def __call__(self, xs):
        return jnp.array(xs)


class Holder(nn.Module):
    inner: type = nn.Dense

    @nn.compact
    def __call__(self, xs):
        return xs + self.inner(4)(xs) if self.inner is nn.Dense else xs + self.inner()(xs)


class Outer(nn.Module):
    @nn.compact
    def __call__(self, xs):
        return nn.Dense(4)(xs) + Holder()(xs)


def test_a_module_call_replacement_takes_its_weights_from_the_params_tree_as_in_yax():
    placeholder = Holder(inner=Identity)
    mox = yax.make_mox(placeholder.apply)(placeholder.init(jax.random.key(0), X), X)
    dense = nn.Dense(4)
    weights = dense.init(jax.random.key(1), X)
    (call,) = yax.make_mox(dense.apply)(weights, X).children
    new = yax.sub('//[@name="Identity_0"]', call, mox)
    assert new.extra_params == ()  # no trailing dict: the weights are in the tree
    variables = {"params": {"Dense_0": weights["params"]}}  # under the replacement's name
    expected = Holder(inner=nn.Dense).apply(variables, X)
    np.testing.assert_allclose(yax.eval_mox(new, variables, X), expected, rtol=1e-6)
    with pytest.raises(yax.MoxError, match="Dense_0"):
        yax.eval_mox(new, {"params": {}}, X)  # the tree names what is missing


def test_a_renamed_replacement_goes_to_its_new_name_and_the_old_weights_leave_the_tree():
    model = Outer()
    variables = model.init(jax.random.key(0), X)
    mox = yax.make_mox(model.apply)(variables, X)
    (inner,) = yax.query('//[@name="Holder_0/Dense_0"]', mox)
    dense = nn.Dense(4, use_bias=False)
    weights = dense.init(jax.random.key(2), X)
    (call,) = yax.make_mox(dense.apply)(weights, X).children
    call.params["name"] = "Plain_0"
    new = yax.sub(inner, call, mox)
    tree = jax.tree_util.tree_structure(
        (
            {
                "params": {
                    "Dense_0": {"bias": 0, "kernel": 0},
                    "Holder_0": {"Plain_0": {"kernel": 0}},
                }
            },
            0,
        )
    )
    assert new.in_tree == tree and new.extra_params == ()
    params = {
        "Dense_0": variables["params"]["Dense_0"],
        "Holder_0": {"Plain_0": weights["params"]},
    }
    hidden = dense.apply(weights, X)
    expected = nn.Dense(4).apply({"params": variables["params"]["Dense_0"]}, X) + X + hidden
    np.testing.assert_allclose(yax.eval_mox(new, {"params": params}, X), expected, rtol=1e-5)
    assert [n.name for n in yax.query("//module_call", new)][-1] == "Holder_0/Plain_0"


def test_a_clash_in_the_params_tree_is_refused_naming_the_entry():
    model = Outer()
    variables = model.init(jax.random.key(0), X)
    mox = yax.make_mox(model.apply)(variables, X)
    dense = nn.Dense(4)
    (call,) = yax.make_mox(dense.apply)(dense.init(jax.random.key(2), X), X).children
    call.params["name"] = "Holder_0"
    before = yax.dumps(mox)
    with pytest.raises(yax.MoxError, match="'Holder_0' in argument 0's 'params' collection"):
        yax.sub('//[@name="Dense_0"]', call, mox)
    assert yax.dumps(mox) == before


@pytest.mark.parametrize("kind", ["nnx", "equinox"])
def test_without_a_dict_params_tree_the_weights_come_in_the_trailing_dict(kind):
    mox, _, _ = traced(kind)
    (linear,) = yax.query('//[@type="Linear"]', mox)
    replacement = nnx.Linear(4, 4, rngs=nnx.Rngs(3))
    (call,) = yax.make_mox(lambda m, x: m(x))(replacement, X).children
    if kind == "equinox":
        rep = eqx.nn.Linear(4, 4, key=jax.random.key(3))
        (call,) = yax.make_mox(lambda m, x: jax.vmap(m)(x))(rep, X).children
    new = yax.sub(linear, call, mox)
    assert len(new.extra_params) == 2
    leaves = [call.invars[i].aval.shape for i in range(call.n_state)]
    assert [s.shape for _, s in new.extra_params] == leaves


@pytest.mark.parametrize("kind", KINDS)
def test_a_replacement_written_over_the_layer_reuses_its_weights_in_its_own_order(kind):
    mox, args, _ = traced(kind)
    (layer,) = yax.query(f'//[@type="{LINEAR[kind]}"]', mox)
    if kind == "linen":
        dense = nn.Dense(4)
        weights = args[0]["params"]["Dense_0"]
        twice = yax.make_mox(lambda p, x: dense.apply({"params": p}, x) * 2)(weights, X)

        def expected_fn():
            return X + dense.apply({"params": weights}, X) * 2
    elif kind == "nnx":
        graphdef, state = nnx.split(NnxRes(nnx.Rngs(0)))
        model = nnx.merge(graphdef, state)
        twice = yax.make_mox(lambda lin, x: lin(x) * 2)(model.linear, X)

        def expected_fn():
            return X + model.linear(X) * 2
    else:
        model = args[0]
        twice = yax.make_mox(lambda lin, x: jax.vmap(lin)(x) * 2)(model.linear, X)

        def expected_fn():
            return X + jax.vmap(model.linear)(X) * 2

    new = yax.sub(layer, twice, mox, with_state=True)
    assert new.extra_params == ()  # the layer's own weights, not new parameters
    np.testing.assert_allclose(yax.eval_mox(new, *args), expected_fn(), rtol=1e-5)
