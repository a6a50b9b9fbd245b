# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Multi-process training: FSDP x tensor parallelism on CPU processes
#
# One training program that runs as N processes joined with `jax.distributed`
# (`make demo-distributed`: 2 processes x 2 CPU devices on 127.0.0.1, CPU
# collectives over gloo). Every process runs the same code on its own devices:
#
# * a global `('data', 'model')` mesh over all processes' devices;
# * an MLP whose kernels are named with `nnx.with_partitioning`: the first layer's
#   kernel is sharded `('data', 'model')` (FSDP over `data`, tensor parallel over
#   `model`), the second `('model', 'data')`; the optimizer state follows;
# * the model and optimizer are initialised already sharded, from
#   `nnx.get_abstract_model` (no process ever holds the whole model);
# * each process builds its slice of the global batch with
#   `jax.make_array_from_process_local_data`;
# * training runs with `nnx.jit`, `nnx.value_and_grad` and `nnx.Optimizer`;
# * an orbax checkpoint is written by all processes (each writes its shards) and
#   restored straight onto the mesh (each reads only its shards);
# * the final loss is printed.
#
# Modes:
#
#     python guides/distributed_train.py --launch 2            # starts 2 local processes
#     python guides/distributed_train.py --num-processes 2 --process-id 0 --coordinator 127.0.0.1:PORT
#     python guides/distributed_train.py --num-processes 1 --devices-per-process 4
#
# See guides/distributed.md for the walk-through.

# %%
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROXY_VARIABLES = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy", "grpc_proxy")
"""Environment variables removed from the workers' environment (in either case):
gRPC, which jax.distributed uses, would route 127.0.0.1 through a proxy."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Multi-process FSDP x TP training on CPU.")
    parser.add_argument("--launch", type=int, metavar="N", help="start N local processes")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--coordinator", default=None, help="host:port of process 0")
    parser.add_argument("--devices-per-process", type=int, default=2)
    parser.add_argument("--model-axis", type=int, default=2, help="size of the 'model' axis")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=20.0, help="jax.distributed timeouts (s)")
    parser.add_argument("--hard-timeout", type=float, default=120.0, help="launcher: kill after (s)")
    parser.add_argument("--json", action="store_true", help="print a RESULT= line per process")
    return parser.parse_args(argv)


# %% [markdown]
# ## Launching N local processes
#
# The launcher picks a free port on 127.0.0.1, starts the workers with the same
# arguments plus their `--process-id`, `XLA_FLAGS` giving each one its CPU devices,
# and no proxy variables. A worker that fails, or the hard timeout, stops all of
# them.


# %%
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_env(devices: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: ``base`` (default ``os.environ``) without proxy
    variables, with ``devices`` CPU devices and CPU as the only platform."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k.lower() not in PROXY_VARIABLES
    }
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def without_launch(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--launch":
            skip = True
        elif not a.startswith("--launch="):
            out.append(a)
    return out


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    n = args.launch
    port = free_port()
    ckpt = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="flaxgraph_distributed_"))
    procs = []
    for pid in range(n):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            *without_launch(argv),
            "--num-processes",
            str(n),
            "--process-id",
            str(pid),
            "--coordinator",
            f"127.0.0.1:{port}",
            "--checkpoint-dir",
            str(ckpt),
        ]
        procs.append(subprocess.Popen(cmd, env=worker_env(args.devices_per_process)))
    deadline = time.monotonic() + args.hard_timeout
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return 0
        failed = any(c not in (None, 0) for c in codes)
        if failed or time.monotonic() > deadline:
            reason = f"exit codes {codes}" if failed else f"{args.hard_timeout:g} s passed"
            print(f"launcher: stopping all workers ({reason})", file=sys.stderr, flush=True)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            return 1
        time.sleep(0.05)


# %% [markdown]
# ## One worker
#
# JAX reads `XLA_FLAGS` when it starts, so the worker sets it (if the launcher did
# not) *before* importing JAX. Processes other than 0 first check that the
# coordinator's port answers within `--timeout`, so a wrong address fails with a
# clear message instead of a native abort.


# %%
def wait_for_coordinator(address: str, timeout: float) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as error:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"process cannot reach the coordinator at {address} within {timeout:g} s "
                    f"({error}).\nFix: start process 0 with the same --coordinator, check the "
                    "address and port, and that no proxy variable is set."
                ) from None
            time.sleep(0.1)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault(
        "XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices_per_process}"
    )
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.num_processes > 1:
        if args.coordinator is None:
            raise SystemExit("--num-processes > 1 needs --coordinator host:port")
        if args.process_id != 0:
            wait_for_coordinator(args.coordinator, args.timeout)
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=max(1, int(args.timeout)),
            heartbeat_timeout_seconds=max(2, int(args.timeout)),
            shutdown_timeout_seconds=max(1, int(args.timeout)),
        )
    try:
        return train(args)
    finally:
        if args.num_processes > 1:
            jax.distributed.shutdown()


# %% [markdown]
# ## The model, the mesh and the data
#
# The mesh is built over `jax.devices()`, the devices of *all* processes. Names in
# `with_partitioning` are the mesh's axes; `nnx.get_abstract_model` turns them into
# `NamedSharding`s without allocating anything, and a `jax.jit` with those
# `out_shardings` creates every array directly in its shards.


# %%
def train(args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import flaxgraph as nnx

    class MLP(nnx.Module):
        def __init__(self, din: int, hidden: int, dout: int, rngs: nnx.Rngs) -> None:
            init = jax.nn.initializers.lecun_normal()
            zeros = jax.nn.initializers.zeros
            self.l1 = nnx.Linear(
                din,
                hidden,
                rngs=rngs,
                kernel_init=nnx.with_partitioning(init, ("data", "model")),
                bias_init=nnx.with_partitioning(zeros, ("model",)),
            )
            self.l2 = nnx.Linear(
                hidden, dout, rngs=rngs, kernel_init=nnx.with_partitioning(init, ("model", "data"))
            )
            self.rngs = rngs  # its typed keys are checkpointed too

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.l2(jax.nn.relu(self.l1(x)))

    devices = jax.devices()
    mesh = jax.make_mesh(
        (len(devices) // args.model_axis, args.model_axis),
        ("data", "model"),
        axis_types=(AxisType.Auto, AxisType.Auto),
        devices=devices,
    )
    tx = optax.adam(0.05)

    def create() -> tuple[MLP, nnx.Optimizer[MLP]]:
        model = MLP(8, 16, 4, nnx.Rngs(0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

    graphdef, abstract = nnx.get_abstract_model(create, mesh)
    shardings = nnx.get_named_sharding(abstract, mesh)
    with nnx.use_eager_sharding(False):  # placement comes from out_shardings
        state = jax.jit(lambda: nnx.state(create()), out_shardings=shardings)()
    model, optimizer = nnx.merge(graphdef, state)

    # The global batch is the same on every process (a fixed seed); each process
    # hands over only the rows its devices hold.
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(32, 8)).astype(np.float32)
    y_all = np.tanh(x_all @ rng.normal(size=(8, 4))).astype(np.float32)
    batch_sharding = NamedSharding(mesh, P("data", None))

    def global_batch(array: np.ndarray) -> jax.Array:
        index_map = batch_sharding.addressable_devices_indices_map(array.shape)
        rows = sorted({idx[0].indices(array.shape[0])[:2] for idx in index_map.values()})
        local = np.concatenate([array[a:b] for a, b in rows])
        return jax.make_array_from_process_local_data(batch_sharding, local, array.shape)

    x, y = global_batch(x_all), global_batch(y_all)

    @nnx.jit
    def train_step(model: MLP, optimizer: nnx.Optimizer[MLP], x: jax.Array, y: jax.Array):
        def loss_fn(model: MLP) -> jax.Array:
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    def scalar(a: jax.Array) -> float:
        return float(a.addressable_data(0))  # replicated: every shard holds the value

    losses = [scalar(train_step(model, optimizer, x, y)) for _ in range(args.steps)]

    # Checkpoint: every process writes its shards, then restores onto the mesh
    # (the abstract State carries the NamedShardings; each process reads its shards).
    ckpt_dir = (args.checkpoint_dir or Path(tempfile.mkdtemp())).resolve() / "state"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(ckpt_dir, nnx.state((model, optimizer)), force=True)
    with ocp.StandardCheckpointer() as checkpointer:
        nnx.check_checkpoint(checkpointer.metadata(ckpt_dir), abstract)
        restored_state = checkpointer.restore(ckpt_dir, abstract)
    restored_model, restored_opt = nnx.merge(graphdef, restored_state)

    def local_values(tree: Any) -> list[np.ndarray]:
        out = []
        for _, v in nnx.state(tree).flat_state():
            a = v.value
            if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
                a = jax.random.key_data(a)
            out += [np.asarray(s.data) for s in a.addressable_shards]
        return out

    pairs = zip(local_values((model, optimizer)), local_values((restored_model, restored_opt)))
    restored_equal = all(np.array_equal(a, b) for a, b in pairs)
    final_loss = scalar(train_step(restored_model, restored_opt, x, y))

    kernel = restored_model.l1.kernel.value
    mu = restored_opt.opt_state[0].mu["l1"]["kernel"].value
    return {
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "devices": len(devices),
        "mesh": dict(mesh.shape),
        "losses": losses,
        "final_loss": final_loss,
        "restored_equal": restored_equal,
        "kernel_devices": len(kernel.sharding.device_set),
        "kernel_spec": str(kernel.sharding.spec),
        "kernel_local_shards": [list(s.data.shape) for s in kernel.addressable_shards],
        "adam_mu_spec": str(mu.sharding.spec),
    }


# %%
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.launch:
        return launch(args, argv)
    result = worker(args)
    tag = f"[process {result['process']}/{result['processes']}]"
    if args.json:
        print("RESULT=" + json.dumps(result), flush=True)
    else:
        print(f"{tag} mesh {result['mesh']} over {result['devices']} devices")
        print(
            f"{tag} l1.kernel {result['kernel_spec']} on {result['kernel_devices']} devices, "
            f"local shards {result['kernel_local_shards']}; adam mu {result['adam_mu_spec']}"
        )
        print(f"{tag} losses: {', '.join(f'{v:.4f}' for v in result['losses'])}")
        print(
            f"{tag} checkpoint restored onto the mesh: {result['restored_equal']}; "
            f"final loss: {result['final_loss']:.4f}",
            flush=True,
        )
    return 0 if result["restored_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
