"""Sharded runs on several host CPU devices, as a script: the tests launch it in a subprocess.

JAX fixes its device count when it starts, so these runs cannot share the test process
(one device). `python sharding_worker.py single` runs the 8-device checks (data parallel,
2x4 model parallel, Stacked, the graph-level scan, eval_mox, NamedArrays);
`python sharding_worker.py multiprocess ID PORT` is one of two processes (4 devices
each) joined through `jax.distributed`. The launcher sets
`XLA_FLAGS=--xla_force_host_platform_device_count=N`. Every check asserts; the exit code
is nonzero on any failure. The last stdout line is a JSON summary.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import bryo_graph as bg
import bryo_transforms as bt
from bryo import parse_mesh_spec
from bryo_graph import Object, Param, Variable

RULES_DP = {"embed": None, "mlp": None, "batch": "data"}
RULES_MP = {"embed": None, "mlp": "model", "batch": "data"}
STEPS = 3


class MLP(Object):
    """A two-layer perceptron whose Params name their logical axes."""

    def __init__(self, seed: int = 0, embed: int = 4, hidden: int = 16):
        k1, k2 = jax.random.split(jax.random.key(seed))
        self.w1 = Param(jax.random.normal(k1, (embed, hidden)) * 0.5, sharding=("embed", "mlp"))
        self.b1 = Param(jnp.zeros(hidden), sharding=("mlp",))
        self.w2 = Param(jax.random.normal(k2, (hidden, embed)) * 0.5, sharding=("mlp", "embed"))
        self.steps = Variable(jnp.array(0))

    def __call__(self, x):
        return jnp.tanh(x @ self.w1 + self.b1) @ self.w2


def loss_fn(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def make_step(mesh=None, rules=None):
    @bt.jit
    def train_step(model, x, y):
        loss, grads = bt.value_and_grad(loss_fn)(model, x, y)
        params = bg.state(model, Param)
        bg.update(model, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads))
        model.steps.value += 1
        if mesh is not None:
            bg.shard(model, mesh, rules)  # keep the parameters where the rules put them
        return loss

    return train_step


def batch(n: int = 16, embed: int = 4):
    kx, ky = jax.random.split(jax.random.key(42))
    return jax.random.normal(kx, (n, embed)), jax.random.normal(ky, (n, embed))


def train(model, step, x, y) -> list[float]:
    return [float(np.asarray(step(model, x, y).addressable_data(0))) for _ in range(STEPS)]


def reference_losses() -> list[float]:
    """The unsharded run, on one (local) device."""
    device = jax.local_devices()[0]
    with jax.default_device(device):
        x, y = batch()
        return train(MLP(), make_step(), x, y)


def placed(array, mesh, spec: P) -> bool:
    return array.sharding.is_equivalent_to(NamedSharding(mesh, spec), array.ndim)


def check_close(got, want, what):
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6), f"{what}: {got} != {want}"


def data_parallel(want):
    mesh = parse_mesh_spec("data=8")
    model = bg.sharded_init(lambda: MLP(), mesh, RULES_DP)
    x, y = batch()
    x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
    assert len(x.sharding.device_set) == 8
    losses = train(model, make_step(mesh, RULES_DP), x, y)
    check_close(losses, want, "data parallel losses")
    assert placed(model.w1.value, mesh, P()), model.w1.value.sharding
    assert int(model.steps.value) == STEPS
    return losses


def model_parallel(want):
    mesh = parse_mesh_spec("data=2,model=4")
    model = bg.sharded_init(lambda: MLP(), mesh, RULES_MP)
    assert placed(model.w1.value, mesh, P(None, "model")), model.w1.value.sharding
    assert placed(model.w2.value, mesh, P("model", None))
    assert model.w1.value.addressable_shards[0].data.shape == (4, 4)  # never whole on a device
    x, y = batch()
    x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
    losses = train(model, make_step(mesh, RULES_MP), x, y)
    check_close(losses, want, "model parallel losses")
    assert placed(model.w1.value, mesh, P(None, "model")), model.w1.value.sharding
    assert model.w1.out_sharding == ("embed", "mlp")
    return losses


def stacked_blocks():
    """Stacked with sharded stacked weights: the fold equals the unsharded one, and the
    stacked Variables' sharding metadata gained the layers axis."""
    from bryo_graph import VariableState
    from bryo_pytree import pytree_dataclass
    from bryo_scan import AxisInfo, Stacked

    @pytree_dataclass
    class Block:
        w: VariableState

        @classmethod
        def make(cls, key):
            w = jax.random.normal(key, (8, 8)) * 0.3
            return cls(VariableState(Param, w, sharding=("embed", "mlp")))

        def __call__(self, x):
            return jnp.tanh(x @ self.w.value)

    layers = AxisInfo(name=None, size=4, position=0)
    stacked = Stacked.init(layers, Block.make)(jax.random.split(jax.random.key(1), 4))
    assert stacked.stacked.w.out_sharding == (None, "embed", "mlp"), stacked.stacked.w.out_sharding
    mesh = parse_mesh_spec("data=2,model=4")
    rules = {"embed": None, "mlp": "model"}
    shardings = bg.get_named_sharding(stacked, mesh, rules)
    sharded = jax.device_put(stacked, shardings)
    assert placed(sharded.stacked.w.value, mesh, P(None, None, "model"))
    x = jnp.ones((2, 8))
    fold = jax.jit(lambda s, x: s.fold(x))
    check_close(np.asarray(fold(sharded, x)), np.asarray(fold(stacked, x)), "Stacked fold")
    grads = jax.jit(jax.grad(lambda s, x: s.fold(x).sum()))(sharded, x)
    want = jax.grad(lambda s, x: s.fold(x).sum())(stacked, x)
    check_close(np.asarray(grads.stacked.w.value), np.asarray(want.stacked.w.value), "Stacked grad")


def graph_scan():
    """The graph-level `scan` (under bryo's jit) over a sharded model and inputs."""

    @bt.jit
    def run(model, xs):
        @bt.scan(in_axes=(None, bt.Carry, 0), out_axes=(bt.Carry, 0))
        def step(model, total, x):
            y = model(x)
            return total + y.sum(), y

        return step(model, jnp.zeros(()), xs)

    xs = batch()[0].reshape(4, 4, 4)
    want_total, want_ys = run(MLP(), xs)
    mesh = parse_mesh_spec("data=2,model=4")
    model = bg.sharded_init(lambda: MLP(), mesh, RULES_MP)
    sharded_xs = jax.device_put(xs, NamedSharding(mesh, P(None, "data")))
    total, ys = run(model, sharded_xs)
    check_close(float(total), float(want_total), "graph-level scan total")
    check_close(np.asarray(ys), np.asarray(want_ys), "graph-level scan outputs")


def mox_eval():
    """eval_mox of a traced loss, on sharded parameters and batch, under jit."""
    from bryo_mox import eval_mox, make_mox

    model = MLP()
    graphdef, params, rest = bg.split(model, Param, ...)

    def pure_loss(params, x, y):
        return loss_fn(bg.merge(graphdef, params, rest), x, y)

    x, y = batch()
    mox = make_mox(pure_loss)(params, x, y)
    mesh = parse_mesh_spec("data=2,model=4")
    sharded_params = bg.shard(params, mesh, RULES_MP)
    xs, ys = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
    got = jax.jit(lambda p, x, y: eval_mox(mox, p, x, y))(sharded_params, xs, ys)
    check_close(float(got), float(pure_loss(params, x, y)), "eval_mox on sharded arrays")


def named_arrays():
    """NamedArrays placed by a Haliax-style axis mapping; a named op under jit agrees."""
    import bryo_named as hax

    mesh = parse_mesh_spec("data=2,model=4")
    mapping = {"Batch": "data", "Mlp": "model"}
    x = hax.NamedArray(jax.random.normal(jax.random.key(3), (4, 8)), {"Batch": 4, "Mlp": 8})
    sharded = hax.shard(x, mapping, mesh)
    assert placed(sharded.array, mesh, P("data", "model")), sharded.array.sharding
    total = jax.jit(lambda a: hax.sum(a * 2.0, "Mlp").array)
    check_close(np.asarray(total(sharded)), np.asarray(total(x)), "named sum on sharded arrays")


def single() -> dict:
    assert jax.device_count() == 8, f"expected 8 host devices, got {jax.device_count()}"
    want = reference_losses()
    summary = {"reference": want, "data": data_parallel(want), "model": model_parallel(want)}
    stacked_blocks()
    graph_scan()
    mox_eval()
    named_arrays()
    return summary


def multiprocess(process_id: int, port: int) -> dict:
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=60,
    )
    assert jax.process_count() == 2 and jax.device_count() == 8
    assert jax.local_device_count() == 4
    want = reference_losses()
    mesh = parse_mesh_spec("data=2,model=4")
    model = bg.sharded_init(lambda: MLP(), mesh, RULES_MP)
    x_all, y_all = batch()
    data = NamedSharding(mesh, P("data"))
    x, y = (
        jax.make_array_from_callback(a.shape, data, lambda index, a=a: np.asarray(a)[index])
        for a in (x_all, y_all)
    )
    assert not x.is_fully_addressable  # the batch spans both processes
    losses = train(model, make_step(mesh, RULES_MP), x, y)
    check_close(losses, want, f"process {process_id} losses")
    assert placed(model.w1.value, mesh, P(None, "model"))
    return {"process": process_id, "losses": losses, "reference": want}


def main(argv: list[str]) -> int:
    if argv[:1] == ["single"]:
        summary = single()
    elif argv[:1] == ["multiprocess"] and len(argv) == 3:
        summary = multiprocess(int(argv[1]), int(argv[2]))
    else:
        print("usage: sharding_worker.py single | multiprocess ID PORT", file=sys.stderr)
        return 2
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
