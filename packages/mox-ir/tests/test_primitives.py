"""Every primitive jax.numpy, jax.lax, jax.nn and jax.random emit survives a MoX file.

Each group of examples is traced into one MoX, written and read back in every format,
and evaluated under `jax.jit`: it must give what the function gives. A sweep of jax's
primitive tables (the primitives `jax.extend.core.primitives` exports and, where this jax
has it, the table of primitives with a lowering) checks that each primitive is either
emitted by an example here or on `EXCLUDED` with the reason it cannot be in a file:
the next jax release's new primitive fails this test, not a user.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend import core as jex

import bryo_mox as mox_lib
from bryo_mox import MoxSerializationError

FORMATS = ("xml", "yson")

F = jnp.linspace(-0.9, 0.9, 12, dtype=jnp.float32).reshape(3, 4)
INTS = jnp.arange(12, dtype=jnp.int32).reshape(3, 4)
SQUARE = jnp.array([[2.0, 0.5, 0.1], [0.5, 3.0, 0.2], [0.1, 0.2, 4.0]], jnp.float32)
KEY = jax.random.key(0)


def _window(x: jax.Array, init: float, op: Callable[..., Any]) -> jax.Array:
    return lax.reduce_window(x, init, op, (2, 2), (1, 1), "VALID")


@jax.custom_vjp
def _clipped(x: jax.Array) -> jax.Array:
    return jnp.sin(x)


_clipped.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda cos, g: (jnp.clip(g * cos, -1, 1),))


FLOAT: dict[str, Callable[[jax.Array], Any]] = {
    "abs": jnp.abs,
    "acos": jnp.arccos,
    "acosh": lambda x: jnp.arccosh(x + 2),
    "asin": jnp.arcsin,
    "asinh": jnp.arcsinh,
    "atan": jnp.arctan,
    "atanh": jnp.arctanh,
    "cbrt": jnp.cbrt,
    "ceil": jnp.ceil,
    "cos": jnp.cos,
    "cosh": jnp.cosh,
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "floor": jnp.floor,
    "log": lambda x: jnp.log(x + 1),
    "log1p": jnp.log1p,
    "neg": jnp.negative,
    "round": jnp.round,  # an IntEnum param (`RoundingMethod`)
    "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "rsqrt": lambda x: lax.rsqrt(x + 1),
    "sign": jnp.sign,
    "sin": jnp.sin,
    "sinh": jnp.sinh,
    "sqrt": lambda x: jnp.sqrt(x + 1),
    "square": jnp.square,
    "tan": jnp.tan,
    "tanh": jnp.tanh,
    "isfinite": jnp.isfinite,
    "isnan": jnp.isnan,
    "nan_to_num": jnp.nan_to_num,
    "erf": lax.erf,
    "erfc": lax.erfc,
    "erf_inv": lax.erf_inv,
    "lgamma": lax.lgamma,
    "digamma": lax.digamma,
    "bessel_i0e": lax.bessel_i0e,
    "bessel_i1e": lax.bessel_i1e,
    "reduce_precision": lambda x: lax.reduce_precision(x, 5, 10),
    "stop_gradient": lax.stop_gradient,
    "copy": jnp.copy,
    "complex": lambda x: jnp.abs(lax.complex(x, x)),
    "real_imag": lambda x: jnp.real(lax.complex(x, x)) + jnp.imag(lax.complex(x, x)),
    "conj": lambda x: jnp.abs(jnp.conj(lax.complex(x, x))),
    "bitcast": lambda x: lax.bitcast_convert_type(x, jnp.int32),
    "convert": lambda x: x.astype(jnp.float16),
    "atan2": lambda x: jnp.arctan2(x, x + 1),
    "pow": lambda x: jnp.power(x + 1, x),
    "integer_pow": lambda x: x**3,
    "rem": lambda x: jnp.remainder(x, 0.3),
    "div": lambda x: x / 3,
    "maximum": lambda x: jnp.maximum(x, 0.1),
    "minimum": lambda x: jnp.minimum(x, 0.1),
    "nextafter": lambda x: lax.nextafter(x, jnp.ones_like(x)),
    "polygamma": lambda x: lax.polygamma(jnp.ones_like(x), x + 2),
    "zeta": lambda x: lax.zeta(x + 2, jnp.ones_like(x)),
    "igamma": lambda x: lax.igamma(x + 1, x + 2),
    "igammac": lambda x: lax.igammac(x + 1, x + 2),
    "igamma_grad_a": lambda x: lax.igamma_grad_a(x + 1, x + 2),
    "random_gamma_grad": lambda x: lax.random_gamma_grad(x + 1, x + 2),
    "betainc": lambda x: lax.betainc(x + 1, x + 2, jnp.abs(x) / 2),
    "select_n": lambda x: lax.select_n(x > 0, x, -x),
    "where": lambda x: jnp.where(x > 0, x, 0.0),
    "clip": lambda x: jnp.clip(x, -0.5, 0.5),
    "clamp": lambda x: lax.clamp(-0.5, x, 0.5),
    "compare": lambda x: (x == 0.5, x != 0.5, x < 0.5, x <= 0.5, x > 0.5, x >= 0.5),
    "optimization_barrier": lax.optimization_barrier,
    "empty": lambda x: x + jnp.empty_like(x) * 0,
    "platform_dependent": lambda x: lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos),
}
NN: dict[str, Callable[[jax.Array], Any]] = {
    "gelu": jax.nn.gelu,
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "sigmoid": jax.nn.sigmoid,
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
    "elu": jax.nn.elu,
    "selu": jax.nn.selu,
    "celu": jax.nn.celu,
    "glu": jax.nn.glu,  # jnp.split
    "mish": jax.nn.mish,
    "hard_tanh": jax.nn.hard_tanh,
    "leaky_relu": jax.nn.leaky_relu,
    "log_sigmoid": jax.nn.log_sigmoid,
    "softmax": jax.nn.softmax,
    "log_softmax": jax.nn.log_softmax,
    "standardize": jax.nn.standardize,
    "logsumexp": jax.nn.logsumexp,
    "one_hot": lambda x: jax.nn.one_hot(jnp.argmax(x, -1), 4),
    "squareplus": jax.nn.squareplus,
    "dot_product_attention": lambda x: jax.nn.dot_product_attention(
        x[None, :, None], x[None, :, None], x[None, :, None]
    ),
}
ARRAYS: dict[str, Callable[[jax.Array], Any]] = {
    "cumsum": jnp.cumsum,
    "cumprod": jnp.cumprod,
    "cummax": lambda x: lax.cummax(x, 1),
    "cummin": lambda x: lax.cummin(x, 1),
    "cumlogsumexp": lambda x: lax.cumlogsumexp(x, 1),
    "sort": jnp.sort,
    "argsort": jnp.argsort,
    "top_k": lambda x: lax.top_k(x, 2),
    "approx_max_k": lambda x: lax.approx_max_k(x, 2),
    "argmax": jnp.argmax,
    "argmin": lambda x: jnp.argmin(x, axis=1),
    "reductions": lambda x: (jnp.max(x), jnp.min(x), jnp.sum(x), jnp.prod(x), jnp.var(x)),
    "any_all": lambda x: (jnp.any(x > 0.5, axis=0), jnp.all(x > -1, axis=0)),
    "reduce_xor": lambda x: lax.reduce_xor(x > 0, (0,)),
    "reshape": lambda x: x.reshape(4, 3),
    "transpose": jnp.transpose,
    "rev": jnp.flip,
    "squeeze": lambda x: jnp.squeeze(x[None]),
    "broadcast": lambda x: jnp.broadcast_to(x, (2, 3, 4)),
    "pad": lambda x: jnp.pad(x, 1),
    "pad_reflect": lambda x: jnp.pad(x, 1, mode="reflect"),
    "slice": lambda x: x[1:, ::2],
    "dynamic_slice": lambda x: lax.dynamic_slice(x, (jnp.int32(1), jnp.int32(0)), (2, 2)),
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(
        x, jnp.zeros((1, 2), x.dtype), (jnp.int32(1), jnp.int32(1))
    ),
    "gather": lambda x: x[jnp.array([0, 2])],
    "take_along_axis": lambda x: jnp.take_along_axis(x, jnp.argsort(x, 1), 1),
    "scatter": lambda x: x.at[0, 1].set(5.0),
    "scatter_add": lambda x: x.at[jnp.array([0, 0])].add(1.0),
    "scatter_mul": lambda x: x.at[0].multiply(2.0),
    "scatter_min": lambda x: x.at[0].min(0.0),
    "scatter_max": lambda x: x.at[0].max(0.0),
    "scatter_sub": lambda x: x.at[0].subtract(1.0),
    "split": lambda x: jnp.split(x, 2, axis=1),
    "array_split": lambda x: jnp.array_split(x, 3),
    "concatenate": lambda x: jnp.concatenate([x, x]),
    "stack": lambda x: jnp.stack([x, x]),
    "tile": lambda x: jnp.tile(x, (2, 1)),
    "repeat": lambda x: jnp.repeat(x, 2, axis=0),
    "triu_tril": lambda x: (jnp.triu(x), jnp.tril(x)),
    "iota": lambda x: x + lax.broadcasted_iota(x.dtype, x.shape, 1),
    "fft": lambda x: jnp.abs(jnp.fft.fft(x)),  # an IntEnum param (`FftType`)
    "rfft": lambda x: jnp.abs(jnp.fft.rfft(x)),
    "window_max": lambda x: _window(x, -jnp.inf, lax.max),
    "window_min": lambda x: _window(x, jnp.inf, lax.min),
    "window_sum": lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), "SAME"),
    "select_and_scatter_add": jax.grad(lambda x: jnp.sum(_window(x, -jnp.inf, lax.max))),
    "select_and_gather_add": lambda x: jax.jvp(lambda v: _window(v, -jnp.inf, lax.max), (x,), (x,))[
        1
    ],
    "dot": lambda x: x @ x.T,
    "einsum": lambda x: jnp.einsum("ij,kj->ik", x, x),
    "precision": lambda x: jnp.dot(x, x.T, precision=lax.Precision.HIGHEST),
    "ragged_dot": lambda x: lax.ragged_dot(
        x, jnp.ones((2, 4, 2), x.dtype), jnp.array([1, 2], jnp.int32)
    ),
    "conv": lambda x: lax.conv_general_dilated(
        x[None, None], jnp.ones((1, 1, 2, 2), x.dtype), (1, 1), "SAME"
    ),
    "conv_transpose": lambda x: lax.conv_transpose(
        x[None, :, :, None], jnp.ones((2, 2, 1, 1), x.dtype), (1, 1), "SAME"
    ),
}
CONTROL: dict[str, Callable[[jax.Array], Any]] = {
    "cond": lambda x: lax.cond(x[0, 0] > 0, jnp.sin, jnp.cos, x),
    "switch": lambda x: lax.switch(1, [jnp.sin, jnp.cos, jnp.tan], x),
    "scan": lambda x: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(4, x.dtype), x),
    "fori_loop": lambda x: lax.fori_loop(0, 3, lambda k, v: v * 2, x),
    "while_loop": lambda x: lax.while_loop(lambda v: v[0, 0] < 10, lambda v: v * 2 + 1, x),
    "map": lambda x: lax.map(jnp.sin, x),
    "associative_scan": lambda x: lax.associative_scan(jnp.add, x),
    "checkpoint": lambda x: jax.checkpoint(jnp.sin)(x),
    "grad": jax.grad(lambda x: jnp.sum(jnp.sin(x))),
    "vmap": lambda x: jax.vmap(jnp.dot)(x, x),
    "jit": lambda x: jax.jit(jnp.cos)(x),
    "custom_vjp": lambda x: _clipped(x),
}
INTEGER: dict[str, Callable[[jax.Array], Any]] = {
    "bitwise": lambda v: (v & 3, v | 3, v ^ 3, ~v),
    "shifts": lambda v: (v << 1, v >> 1, lax.shift_right_logical(v, jnp.ones_like(v))),
    "population_count": lax.population_count,
    "clz": lax.clz,
    "rem_div": lambda v: (v % 5, v // 5),
    "abs_sign": lambda v: (jnp.abs(v), jnp.sign(v)),
    "bincount": lambda v: jnp.bincount(v.ravel(), length=12),
    "unique": lambda v: jnp.unique(v, size=12),
    "searchsorted": lambda v: jnp.searchsorted(v.ravel(), v),
    "nonzero": lambda v: jnp.nonzero(v, size=12),
}
LINALG: dict[str, Callable[[jax.Array], Any]] = {
    "cholesky": jnp.linalg.cholesky,
    "qr": lambda a: jnp.linalg.qr(a)[1],
    "eigh": lambda a: jnp.linalg.eigh(a)[0],
    "svd": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "lu": lambda a: jax.scipy.linalg.lu_factor(a)[0],
    "triangular_solve": lambda a: jax.scipy.linalg.solve_triangular(a, a, lower=True),
    "eig": lambda a: jnp.abs(jnp.linalg.eigvals(a)),
    "schur": lambda a: jax.scipy.linalg.schur(a)[0],
    "hessenberg": jax.scipy.linalg.hessenberg,
    "tridiagonal": lambda a: lax.linalg.tridiagonal(a)[1],
    "tridiagonal_solve": lambda a: lax.linalg.tridiagonal_solve(a[0], a[1], a[2], a[:, :1]),
    "householder_product": lambda a: lax.linalg.householder_product(a, a[0, :2]),
}
RANDOM: dict[str, Callable[[jax.Array], Any]] = {
    "split": lambda k: jax.random.key_data(jax.random.split(k)),
    "fold_in": lambda k: jax.random.key_data(jax.random.fold_in(k, 3)),
    "uniform": lambda k: jax.random.uniform(k, (3,)),
    "normal": lambda k: jax.random.normal(k, (3,)),
    "bits": lambda k: jax.random.bits(k, (3,)),
    "randint": lambda k: jax.random.randint(k, (3,), 0, 9),
    "bernoulli": lambda k: jax.random.bernoulli(k, 0.5, (3,)),
    "categorical": lambda k: jax.random.categorical(k, jnp.zeros(4)),
    "permutation": lambda k: jax.random.permutation(k, 5),
    "choice": lambda k: jax.random.choice(k, 5, (2,), replace=False),
    "gamma": lambda k: jax.random.gamma(k, 2.0, (3,)),
    "beta": lambda k: jax.random.beta(k, 2.0, 3.0, (3,)),
    "dirichlet": lambda k: jax.random.dirichlet(k, jnp.ones(3)),
    "poisson": lambda k: jax.random.poisson(k, 3.0, (3,)),
    "truncated_normal": lambda k: jax.random.truncated_normal(k, -1.0, 1.0, (3,)),
    "gumbel": lambda k: jax.random.gumbel(k, (3,)),
    "laplace": lambda k: jax.random.laplace(k, (3,)),
    "orthogonal": lambda k: jax.random.orthogonal(k, 3),
    "binomial": lambda k: jax.random.binomial(k, 5.0, 0.5, (3,)),
    "ball": lambda k: jax.random.ball(k, 3),
    "wrap_key_data": lambda k: jax.random.key_data(
        jax.random.wrap_key_data(jax.random.key_data(k))
    ),
    "clone": lambda k: jax.random.key_data(jax.random.clone(k)),
    "raw_key": lambda k: jax.random.uniform(jax.random.PRNGKey(1), (2,)),
    "rbg": lambda k: jax.random.key_data(jax.random.split(jax.random.key(1, impl="rbg"))),
    "rng_bit_generator": lambda k: lax.rng_bit_generator(jnp.zeros(4, jnp.uint32), (2,))[1],
}
GROUPS: dict[str, tuple[dict[str, Callable[[jax.Array], Any]], jax.Array]] = {
    "float": (FLOAT, F),
    "nn": (NN, F),
    "arrays": (ARRAYS, F),
    "control": (CONTROL, F),
    "integer": (INTEGER, INTS),
    "linalg": (LINALG, SQUARE),
    "random": (RANDOM, KEY),
}

#: Primitives in jax's tables that no example here emits, and why none can or need be
#: in a MoX file. Names a jax version lacks are harmless here.
_PLACEMENT = "its params hold devices, shardings or meshes of the machine that traced it"
_COLLECTIVE = (
    "a collective over a named mesh axis: bound only inside `shard_map`/`pmap` bodies, "
    "whose params hold a mesh (see `shard_map`)"
)
_CALLBACK = "its params hold a Python callable or a foreign function, which no file holds"
_REF = "a mutable-reference (state) primitive of Pallas and `jax.experimental` refs"
_INTERNAL = (
    "jax-internal: made and consumed inside one transformation or lowering, never in a traced jaxpr"
)
_EXPORT = "made by `jax.export` for shape polymorphism and its checks, not by tracing"
_GPU = "emitted only for GPU/TPU backends (cuDNN, Mosaic), never on this CPU test run"
EXCLUDED: dict[str, str] = {
    # values a file cannot hold
    "reduce": "`lax.reduce` with a Python computation: its `computation` param is a function",
    "reduce_window": (
        "`lax.reduce_window` with a Python computation: YSON reserves the name of its "
        "`consts` param (XML writes it; the monoid windows, `reduce_window_sum`/`max`/"
        "`min`, round-trip in both)"
    ),
    "mox_call_begin": "bryo's own marker: MoX turns each pair into a `module_call` node",
    "mox_call_end": "bryo's own marker: MoX turns each pair into a `module_call` node",
    "custom_linear_solve": (
        "not yet written: its `jaxprs` param is a named tuple of jaxprs with empty slots, "
        "which MoX does not convert to regions; `dumps` refuses it with a clear error "
        "(`jnp.linalg.solve`, `inv`, `det`, `slogdet`, `expm`, `pinv`, `lstsq` emit it)"
    ),
    "sharding_constraint": _PLACEMENT,
    "device_put": _PLACEMENT,
    "layout_constraint": _PLACEMENT,
    "with_memory_space_constraint": _PLACEMENT,
    "reshard": _PLACEMENT,
    "shard_map": _PLACEMENT,
    "inspect_sharding": _CALLBACK,
    "pin": _PLACEMENT,
    "unpin": _PLACEMENT,
    "pure_callback": _CALLBACK,
    "io_callback": _CALLBACK,
    "debug_callback": _CALLBACK,
    "debug_print": _CALLBACK,
    "ffi_call": _CALLBACK,
    "custom_partitioning": _CALLBACK,
    "custom_vmap_call": _CALLBACK,
    "linear_call": _CALLBACK,
    "composite": _CALLBACK,
    "call_exported": "`jax.export` of a serialized module: its param is compiled StableHLO",
    "custom_transpose_call": _CALLBACK,
    # jax 0.7: pmap and shard_map's own primitives
    "xla_pmap": _PLACEMENT,
    "full_to_shard": _PLACEMENT,
    "shard_to_full": _PLACEMENT,
    "pgather": _COLLECTIVE,
    # collectives
    **dict.fromkeys(
        (
            "psum pmax pmin ppermute all_gather all_to_all ragged_all_to_all axis_index "
            "reduce_scatter pbroadcast psum_invariant pvary all_gather_invariant preduced "
            "psend precv unreduced_psum unreduced_reduce_scatter all_gather_reduced "
            "reduced_vary_cast_p vary_unreduced_cast_p all_gather_start all_gather_done "
            "all_to_all_start all_to_all_done pbroadcast_start pbroadcast_done ppermute_start "
            "ppermute_done psum_start psum_done psum_invariant_start unreduced_psum_start "
            "unreduced_reduce_scatter_start reduce_scatter_start reduce_scatter_done "
            "all_gather_reduced_start"
        ).split(),
        _COLLECTIVE,
    ),
    # state
    **dict.fromkeys("get swap addupdate run_state create_linear".split(), _REF),
    # internal
    **dict.fromkeys(
        (
            "add_any custom_lin call core_call closed_call remat_opt name random_seed_p "
            "dce_sink tie stage check unreachable empty empty2 from_edtype to_edtype mulhi "
            "iota_2x32_shape threefry2x32 threefry4x32 philox2x32 philox4x32 random_bits_p "
            "eq_to le_to lt_to rng_uniform after_all create_token broadcast_to unstack "
            "lu_pivots_to_permutation geqrf geqp3 ormqr cholesky_update symmetric_product "
            "scatter-apply select_and_scatter cumred"
        ).split(),
        _INTERNAL,
    ),
    **dict.fromkeys("dim_as_value dimension_size shape_assertion".split(), _EXPORT),
    **dict.fromkeys(
        (
            "dot_product_attention_fwd dot_product_attention_bwd "
            "dot_product_attention_fwd_wrapper dot_product_attention_bwd_wrapper "
            "dot_product_attention_fp8_fwd dot_product_attention_fp8_bwd "
            "dot_product_attention_fp8_fwd_wrapper dot_product_attention_fp8_bwd_wrapper "
            "scaled_matmul scaled_matmul_wrapper scaled_dot cudnn_fusion core_map "
            "bias_fwd bias_bwd eigh_jacobi"
        ).split(),
        _GPU,
    ),
}


def _group_fn(examples: dict[str, Callable[[jax.Array], Any]]) -> Callable[[jax.Array], Any]:
    return lambda x: {name: fn(x) for name, fn in examples.items()}


def _primitives_in(jaxpr: Any, found: set[str]) -> set[str]:
    stack = [jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            found.add(eqn.primitive.name)
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    if isinstance(item, jex.ClosedJaxpr):
                        stack.append(item.jaxpr)
                    elif isinstance(item, jex.Jaxpr):
                        stack.append(item)
    return found


_LIST_PRIMITIVES = """
import json, jax
from jax.extend import core as jex
names = {v.name for v in vars(jex.primitives).values() if isinstance(v, jex.Primitive)}
try:
    from jax._src.interpreters import mlir
except ImportError:
    mlir = None
tables = [getattr(mlir, "_lowerings", {})]
tables += list(getattr(mlir, "_platform_specific_lowerings", {}).values())
for table in tables:
    names |= {getattr(p, "name", str(p)) for p in table}
print(json.dumps(sorted(names)))
"""


def _jax_primitive_names() -> set[str]:
    """The primitives jax exports (`jax.extend.core.primitives`) and, where this jax has
    the table (private, so looked up with care), those with an MLIR lowering: listed by
    a fresh interpreter that imports only jax (other libraries, Equinox say, register
    primitives of their own when imported)."""
    listed = subprocess.run(
        [sys.executable, "-c", _LIST_PRIMITIVES], capture_output=True, text=True, check=True
    )
    return set(json.loads(listed.stdout))


def _assert_same(got: Any, want: Any) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for path, (g, w) in zip(
        jax.tree_util.tree_flatten_with_path(want)[0],
        zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True),
        strict=True,
    ):
        np.testing.assert_array_equal(
            np.asarray(g), np.asarray(w), err_msg=jax.tree_util.keystr(path[0])
        )


@pytest.fixture(scope="module")
def traced() -> dict[str, tuple[mox_lib.Mox, Any]]:
    """Each group's MoX and its function's result (jitted), traced once for the module."""
    out = {}
    for group, (examples, arg) in GROUPS.items():
        fn = _group_fn(examples)
        out[group] = (mox_lib.make_mox(fn)(arg), jax.jit(fn)(arg))
    return out


@pytest.mark.slow  # about a minute of CPU: every group jitted twice, both formats
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("group", GROUPS)
def test_every_example_round_trips(traced, group, format):
    mox, want = traced[group]
    arg = GROUPS[group][1]
    loaded = mox_lib.loads(mox_lib.dumps(mox, format), format)
    _assert_same(jax.jit(lambda a: mox_lib.eval_mox(loaded, a))(arg), want)


def test_every_primitive_is_covered_or_excluded():
    covered: set[str] = set()
    for examples, arg in GROUPS.values():
        _primitives_in(jax.make_jaxpr(_group_fn(examples))(arg).jaxpr, covered)
    missing = sorted(_jax_primitive_names() - covered - set(EXCLUDED))
    assert not missing, (
        f"primitives of jax {jax.__version__} that no example emits and EXCLUDED does not "
        f"name: {missing}. Add an example that emits each (and make it round-trip), or "
        "exclude it with the reason it cannot be in a MoX file."
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: jnp.linalg.solve(SQUARE, x[:, :3].T),
        lambda x: lax.with_sharding_constraint(
            x, jax.sharding.SingleDeviceSharding(jax.devices()[0])
        ),
        lambda x: lax.reduce((x, x), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] * b[1]), (0,)),
    ],
    ids=["custom_linear_solve", "sharding_constraint", "reduce"],
)
@pytest.mark.parametrize("format", FORMATS)
def test_an_excluded_primitive_is_refused_clearly(fn, format):
    mox = mox_lib.make_mox(fn)(F)
    with pytest.raises(MoxSerializationError, match="cannot be serialized"):
        mox_lib.dumps(mox, format)
