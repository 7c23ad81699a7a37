"""`bryo demo`: the whole stack doing real work on a small model, in about a minute.

1. build a model with a `Stacked` trunk, dropout and a norm layer (NNX-style or Equinox);
2. train it with optax on every JAX device (data parallel, or a `--mesh`), with a `rich`
   progress bar showing the loss, steps/s after compilation, and the ETA (`--quiet`: none);
3. trace it to MoX and print a few XPath queries;
4. swap its activation (ReLU -> GELU), wrap every Linear in a LoRA adapter and fine-tune
   only the LoRA parameters, selected with a filter;
5. save the MoX as XML and YSON and the whole state as an orbax checkpoint, reload the
   three (the state into an abstract state) and check that the outputs match.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

import bryo_mox as mox
from bryo_filters import Not
from bryo_graph import Param, State, VariableState, merge, shard, split, state
from bryo_pytree import Key

from ._checkpoint import restore_state, save_state
from ._demo_args import SAMPLES, TEST_SAMPLES, DemoConfig, DemoError, config_from_args
from ._demo_models import BACKENDS, Backend, Batch, Sizes, teacher
from ._demo_progress import TrainingProgress
from ._mesh_spec import parse_mesh_spec

SHARDING_RULES = {"embed": None, "mlp": "model", "layers": None}


class LoRAParam(Param):
    """A low-rank adapter's parameter: the only state the fine-tuning step trains."""


def _adam(learning_rate: float) -> optax.GradientTransformation:
    """`optax.adam`, its update run under JAX's standard dtype promotion.

    optax's bias correction (`optax.tree.bias_correction`, called by `optax.adam`'s update)
    computes `1 - decay**count`, a float to the power of the int32 step count, which
    `jax_numpy_dtype_promotion="strict"` refuses; the rest of the demo is strict-clean.
    """
    adam = optax.adam(learning_rate)

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        with jax.numpy_dtype_promotion("standard"):
            return adam.update(updates, state, params)

    return optax.GradientTransformation(adam.init, update)


def _mse(pred: jax.Array, target: jax.Array) -> jax.Array:
    return jnp.mean((pred - target) ** 2)


def _batches(x: jax.Array, y: jax.Array, size: int, key: jax.Array) -> Iterator[tuple]:
    n = x.shape[0]
    while True:
        key, sub = jax.random.split(key)
        order = jax.random.permutation(sub, n)
        for start in range(0, n - size + 1, size):
            index = order[start : start + size]
            yield x[index], y[index], sub


def _mesh(config: DemoConfig, backend: Backend) -> jax.sharding.Mesh:
    if config.mesh is None:
        return parse_mesh_spec(f"data={len(jax.devices())}")
    try:
        mesh = parse_mesh_spec(config.mesh)
    except ValueError as error:
        raise DemoError(f"`--mesh {config.mesh}`: {error}") from None
    if "data" not in mesh.axis_names:
        raise DemoError(f"`--mesh {config.mesh}` needs a `data` axis for the batch.")
    if mesh.shape.get("model", 1) > 1 and not backend.supports_model_parallel():
        raise DemoError(
            f"`--mesh {config.mesh}`: the {backend.name} demo model carries no logical "
            "sharding axes; use a mesh with only a `data` axis, or `--backend nnx`."
        )
    return mesh


def run(config: DemoConfig, out: TextIO | None = None) -> dict[str, float]:
    """Run the demo; returns the headline numbers (losses and output differences)."""
    stream = out or sys.stdout
    say = lambda text="": print(text, file=stream, flush=True)
    backend = BACKENDS[config.backend]()
    mesh = _mesh(config, backend)
    sizes = Sizes(in_features=8, width=config.width, layers=config.layers, out_features=1)
    if config.batch % mesh.shape["data"]:
        raise DemoError(
            f"`--batch` ({config.batch}) must be divisible by the mesh's data axis "
            f"({mesh.shape['data']})."
        )
    key = jax.random.key(config.seed)
    model_key, data_key, batch_key, lora_key = jax.random.split(key, 4)

    say(
        f"bryo demo: {backend.name} backend, {len(jax.devices())} {jax.devices()[0].platform} "
        f"device(s), mesh {dict(mesh.shape)}"
    )
    model = backend.build(sizes, model_key)
    graphdef, params, rest = split(model, Param, ...)
    count = sum(int(np.prod(v.value.shape)) for v in params.flat_state().values())
    say(
        f"model: {sizes.layers} stacked blocks of width {sizes.width}, {count:,} parameters "
        f"in {len(params.flat_state())} Param arrays"
    )

    x, y = teacher(sizes, data_key, SAMPLES)
    x_test, y_test = x[-TEST_SAMPLES:], y[-TEST_SAMPLES:]
    x_train, y_train = x[:-TEST_SAMPLES], y[:-TEST_SAMPLES]
    data_sharding = NamedSharding(mesh, PartitionSpec("data"))
    rules = SHARDING_RULES if "model" in mesh.axis_names else {**SHARDING_RULES, "mlp": None}
    params = (
        shard(params, mesh, rules)
        if backend.supports_model_parallel()
        else jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    )

    # 1. Train ------------------------------------------------------------------------
    tx = _adam(config.learning_rate)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(
        params: State, rest: State, opt_state: Any, x: jax.Array, y: jax.Array, key: jax.Array
    ) -> tuple:
        def loss_fn(params: State) -> tuple[jax.Array, State]:
            model = merge(graphdef, params, rest)
            loss = _mse(backend.forward(model, x, train=True, key=key), y)
            return loss, state(model, Not(Param))  # rng counts advanced by dropout

        (loss, rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), rest, opt_state, loss

    def evaluate(params: State, rest: State) -> float:
        pred = backend.forward(merge(graphdef, params, rest), x_test, train=False, key=None)
        return float(_mse(pred, y_test))

    say(f"test loss before training: {evaluate(params, rest):.4f}")
    batches = _batches(x_train, y_train, config.batch, batch_key)
    with TrainingProgress(config.steps, "train   ", stream, quiet=config.quiet) as progress:
        for _ in range(config.steps):
            xb, yb, step_key = next(batches)
            xb, yb = jax.device_put((xb, yb), data_sharding)
            params, rest, opt_state, loss = train_step(params, rest, opt_state, xb, yb, step_key)
            progress.advance(float(loss))
    say(progress.summary())
    trained_loss = evaluate(params, rest)
    say(f"test loss after training:  {trained_loss:.4f}")

    # 2. Trace to MoX and query it -------------------------------------------------------
    def apply(params: State, x: Batch) -> jax.Array:
        return backend.forward(merge(graphdef, params, rest), x, train=False, key=None)

    # Trace on a host copy of the parameters: a MoX file records the computation, not the
    # placement of the arrays it was traced with.
    params = jax.tree.map(np.asarray, params)
    sample = np.asarray(x_test[: config.batch])
    traced = mox.make_mox(apply)(params, sample)
    say()
    say("MoX queries:")
    for query in (
        "//module_call",
        '//module_call[@type="Linear"]',
        "//module_call[@type='Block']/module_call",
        '//pjit[@name="relu"]',
    ):
        found = mox.query(query, traced)
        names = ", ".join(sorted({_label(n) for n in found}))
        names = names if len(names) <= 70 else names[:67] + "..."
        say(f"  {query:<45} {len(found):>3} node(s)  {names}")

    # 3. Swap the activation, wrap every Linear in LoRA, fine-tune the adapters ----------
    gelu = _swap_activation(traced)
    diff = float(jnp.max(jnp.abs(mox.eval_mox(gelu, params, sample) - apply(params, sample))))
    relu_left = len(mox.query('//pjit[@name="relu"]', gelu))
    say(f"\nReLU -> GELU: {relu_left} relu left, outputs moved by up to {diff:.4f}")
    adapted, lora = _wrap_linears_in_lora(gelu, model, backend, params, config.rank, lora_key)
    say(
        f"LoRA on every Linear: {len(lora.flat_state())} adapter arrays "
        f"({sum(int(np.prod(v.value.shape)) for v in lora.flat_state().values()):,} parameters)"
    )

    combined = State.merge(params, lora)
    trainable, frozen = combined.split(LoRAParam, ...)
    ft_tx = _adam(config.learning_rate)
    ft_state = ft_tx.init(trainable)

    def adapted_loss(trainable: State, frozen: State, x: jax.Array, y: jax.Array) -> jax.Array:
        return _mse(_eval_adapted(adapted, trainable, frozen, x), y)

    @jax.jit
    def finetune_step(
        trainable: State, frozen: State, ft_state: Any, x: jax.Array, y: jax.Array
    ) -> tuple:
        loss, grads = jax.value_and_grad(adapted_loss)(trainable, frozen, x, y)
        updates, ft_state = ft_tx.update(grads, ft_state, trainable)
        return optax.apply_updates(trainable, updates), ft_state, loss

    test_batch = (x_test[: config.batch], y_test[: config.batch])
    before = float(adapted_loss(trainable, frozen, *test_batch))
    with TrainingProgress(
        config.finetune_steps, "finetune", stream, quiet=config.quiet
    ) as progress:
        for _ in range(config.finetune_steps):
            xb, yb, _ = next(batches)
            trainable, ft_state, loss = finetune_step(trainable, frozen, ft_state, xb, yb)
            progress.advance(float(loss))
    say(progress.summary())
    after = float(adapted_loss(trainable, frozen, *test_batch))
    say(f"LoRA fine-tuning (only {LoRAParam.__name__}s trained): loss {before:.4f} -> {after:.4f}")

    # 4. Save, reload, compare -------------------------------------------------------------
    config.out.mkdir(parents=True, exist_ok=True)
    expected = _eval_adapted(adapted, trainable, frozen, sample)
    differences = {}
    for suffix in (".xml", ".yson"):
        path = config.out / f"model.mox{suffix}"
        write_new(path, mox.dumps(adapted, format=suffix[1:]))
        loaded = mox.load(path)
        restored = _eval_loaded(loaded, adapted, trainable, frozen, sample)
        differences[suffix] = float(jnp.max(jnp.abs(restored - expected)))
        say(
            f"saved {path} ({path.stat().st_size:,} bytes), reloaded: max difference "
            f"{differences[suffix]:.2e}"
        )
    checkpoint = config.out / "checkpoint"
    saved = State.merge(trainable, frozen)
    _clear_for_checkpoint(checkpoint)
    save_state(checkpoint, saved, force=True)
    # Restore into an abstract state (shapes, dtypes, Variable types; no arrays), as a
    # fresh process would after `eval_shape`.
    reloaded = restore_state(checkpoint, jax.eval_shape(lambda: saved))
    trainable_again, frozen_again = reloaded.split(LoRAParam, ...)
    differences["checkpoint"] = float(
        jnp.max(jnp.abs(_eval_adapted(adapted, trainable_again, frozen_again, sample) - expected))
    )
    say(
        f"saved {checkpoint}/ (orbax, {len(saved.flat_state())} arrays), restored into an "
        f"abstract state: max difference {differences['checkpoint']:.2e}"
    )
    worst = max(differences.values())
    if worst > 1e-4:
        raise RuntimeError(f"reloaded outputs differ from the originals by {worst:.2e}")
    say("all reloaded outputs match.")
    return {
        "trained_loss": trained_loss,
        "finetune_before": before,
        "finetune_after": after,
        **{f"difference{k}": v for k, v in differences.items()},
    }


def _label(node: Any) -> str:
    """A node's name for the query listing: the module path, or the root's type."""
    if isinstance(node, mox.ModuleCall):
        return node.name or f"<{node.type.rsplit('.', 1)[-1]}>"
    return str(getattr(node, "name", "") or type(node).__name__)


def _swap_activation(traced: mox.Mox) -> mox.Mox:
    """Replace every ReLU with GELU, one replacement per input shape."""
    swapped = traced
    shapes = {
        tuple(node.in_avals[0].shape): node.in_avals[0]
        for node in mox.query('//pjit[@name="relu"]', traced)
    }
    for shape, aval in shapes.items():
        gelu = mox.make_mox(jax.nn.gelu)(jnp.zeros(shape, aval.dtype))
        nodes = [
            n
            for n in mox.query('//pjit[@name="relu"]', swapped)
            if tuple(n.in_avals[0].shape) == shape
        ]
        swapped = mox.sub(nodes, gelu, swapped)
    return swapped


def _wrap_linears_in_lora(
    traced: mox.Mox, model: Any, backend: Backend, params: State, rank: int, key: jax.Array
) -> tuple[mox.Mox, State]:
    """Every Linear becomes `linear(x) + (x @ a) @ b`; returns the MoX and the adapters.

    The adapters' parameters are new inputs of the MoX (`mox.extra_params`), kept in a
    State as `LoRAParam`s; `b` starts at zero so the adapted model starts where it was.
    """
    adapted = traced
    for (fan_in, fan_out), linear in _linears_by_shape(model).items():
        nodes = [
            n
            for n in mox.query('//module_call[@type="Linear"]', adapted)
            if _linear_shape(n) == (fan_in, fan_out)
        ]
        if not nodes:
            continue
        # Stacked layers share one graphdef with a single layer; take the state's shapes
        # from the MoX node, which sees one layer even inside the trunk's scan.
        linear_graphdef, linear_state = split(linear)
        node = nodes[0]
        base = jax.tree.unflatten(
            jax.tree.structure(linear_state),
            [jnp.zeros(a.shape, a.dtype) for a in node.in_avals[: node.n_state]],
        )
        x_aval = node.in_avals[-1]

        def lora(
            a: jax.Array, b: jax.Array, base: State, x: jax.Array, graphdef: Any = linear_graphdef
        ) -> jax.Array:
            return backend.apply_linear(merge(graphdef, base), x) + (x @ a) @ b

        lora_mox = mox.make_mox(lora)(
            jnp.zeros((fan_in, rank)),
            jnp.zeros((rank, fan_out)),
            base,
            jnp.zeros(x_aval.shape, x_aval.dtype),
        )
        adapted = mox.sub(nodes, lora_mox, adapted, with_state=True)
    flat = {}
    for name, aval in adapted.extra_params:
        key, sub = jax.random.split(key)
        is_b = aval.shape[0] == rank and len(aval.shape) == 2 and name.endswith(":1")
        value = (
            jnp.zeros(aval.shape, aval.dtype)
            if is_b
            else 0.01 * jax.random.normal(sub, aval.shape, aval.dtype)
        )
        flat[("lora", name)] = VariableState(LoRAParam, value)
    return adapted, State.from_flat_path(flat)


def _linear_shape(node: Any) -> tuple[int, int]:
    attrs = node.attrs
    return int(attrs["in_features"]), int(attrs["out_features"])


def _linears_by_shape(model: Any) -> dict[tuple[int, int], Any]:
    from bryo_graph import iter_graph

    found: dict[tuple[int, int], Any] = {}
    for _, node in iter_graph(model):
        if type(node).__name__ == "Linear" and hasattr(node, "in_features"):
            shape = (int(node.in_features), int(node.out_features))
            found.setdefault(shape, node)
    return found


def _extra(trainable: State) -> dict[Key, jax.Array]:
    return {path[1]: leaf.value for path, leaf in trainable.flat_state().items()}


def _eval_adapted(adapted: mox.Mox, trainable: State, frozen: State, x: Batch) -> jax.Array:
    return mox.eval_mox(adapted, frozen, x, _extra(trainable))


def _eval_loaded(
    loaded: mox.Mox, adapted: mox.Mox, trainable: State, frozen: State, x: Batch
) -> jax.Array:
    """A loaded MoX takes the arguments the traced one took (its file records their
    structure)."""
    return mox.eval_mox(loaded, frozen, x, _extra(trainable))


def write_new(path: Path, data: str | bytes) -> None:
    """Write `path` as a new file: through a fresh temporary file in the same folder,
    renamed over `path`. A symlink at `path` is replaced, never written through, so the
    demo cannot overwrite a file it did not create."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(raw)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _clear_for_checkpoint(path: Path) -> None:
    """A file or symlink where the checkpoint folder goes is removed, never followed."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()


def main(args: argparse.Namespace) -> int:
    """The `bryo demo` subcommand."""
    try:
        config = config_from_args(args)
        started = time.perf_counter()
        run(config)
    except DemoError as error:
        print(f"bryo demo: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"bryo demo: cannot write to `--out {args.out}`: {error}", file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - started:.1f} s.")
    return 0
