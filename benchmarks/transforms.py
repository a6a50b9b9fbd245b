"""Per-call overhead of the transforms: jit, vmap and scan over tiny MLPs.

Every contender computes the same thing on the same arrays: an MLP of L tiny
layers (width 4, ``x -> tanh(x @ kernel + bias)``), so the time a call takes is
almost all framework overhead. The contenders, timed side by side in one process
(interleaved rounds, medians; see ``benchmarks/common.py``):

* ``jax``: the floor, plain JAX on a params pytree of dicts and lists of arrays
  (``jax.jit``, ``jax.vmap``, ``jax.lax.scan``), written as pure functions;
* ``flaxgraph``: ``nnx.jit`` / ``nnx.vmap`` / ``nnx.scan`` on a Module, written the
  plain way (decorators, in-place updates, no split/merge ceremony);
* ``flaxgraph_tree``: the same in flaxgraph's tree mode (``graph=False``);
* ``nnx``: the same code with Flax NNX (graph mode, its default);
* ``nnx_tree``: Flax NNX tree mode (``graph=False``), where Flax 0.12 has it;
* ``eqx``: Equinox (``eqx.filter_jit``, ``eqx.filter_vmap``, ``lax.scan`` with
  ``eqx.partition``/``combine``) on an ``eqx.Module`` returning new models.

Workloads (each call blocks until its output is ready):

* ``train``: a jitted train step, ``value_and_grad`` of ``mean(mlp(x)**2)`` and an
  SGD update (flaxgraph/NNX update the model in place; jax/eqx return new params);
* ``forward``: a jitted forward pass;
* ``vmap`` / ``vmap_jit``: the forward vmapped over a batch of inputs with the
  model broadcast (``in_axes=(None, 0)``), eager and inside an outer jit;
* ``scan`` / ``scan_jit``: the forward as a scan over L stacked layers (made by
  vmapping the layer constructor), eager and inside an outer jit;
* ``shard_map``: the forward under ``shard_map`` (model replicated, ``x`` split by
  rows over a one-device mesh ``('data',)``) inside an outer jit; Equinox, which has
  no ``shard_map`` of its own, uses ``jax.shard_map`` inside ``eqx.filter_jit``.

Before timing, every contender's output is checked once against the floor's
(``allclose``). Ratios are medians of per-round ratios to the floor. The NNX-style
layers read their Params with ``get_value()`` (not ``p[...]``, which outside jit
is an eager indexing op per read and would time the model code, not the transform).

Run from the repository root::

  python -m benchmarks.transforms            # L in 1, 8, 64, 256 (scan: 8, 64)
  python -m benchmarks.transforms --quick    # a few seconds; skips missing comparators
  python -m benchmarks.transforms --profile train --layers 256   # cProfile flaxgraph

Results are printed as tables and written as JSON to
``benchmarks/results/transforms.json`` (``transforms_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

import flaxgraph
from benchmarks.common import (
    Settings,
    base_parser,
    busy_warning,
    environment,
    format_number,
    format_table,
    json_path_from_args,
    load_average,
    measure,
    optional_import,
    paired_ratio,
    print_load,
    profile_calls,
    settings_from_args,
    write_json,
)

WIDTH = 4
BATCH = 2  # rows of x for train / forward / scan
VMAP_SIZE = 8  # vmapped inputs, each a single row
LR = 0.1
FULL_LAYERS = (1, 8, 64, 256)
QUICK_LAYERS = (1, 8)
FULL_SCAN_LAYERS = (8, 64)
QUICK_SCAN_LAYERS = (8,)
GOAL = 1.2  # issue 6: flaxgraph / jax at most this, for every workload and L

WORKLOADS = {
    "train": "jitted train step (value_and_grad + SGD)",
    "forward": "jitted forward",
    "vmap": "vmap over inputs, eager (model broadcast)",
    "vmap_jit": "vmap over inputs inside an outer jit",
    "scan": "scan over stacked layers, eager",
    "scan_jit": "scan over stacked layers inside an outer jit",
    "shard_map": "shard_map (1-device mesh, x split by rows) inside an outer jit",
}
SCAN_WORKLOADS = ("scan", "scan_jit")
CONTENDERS = ("jax", "flaxgraph", "flaxgraph_tree", "nnx", "nnx_tree", "eqx")
SHORT = {"jax": "jax", "flaxgraph": "fg", "flaxgraph_tree": "fg_tree", "nnx": "nnx",
         "nnx_tree": "tree", "eqx": "eqx"}  # fmt: skip
TRAIN_GOAL = 1.1  # issue 10: the jitted train step, graph and tree mode alike


# -- data ------------------------------------------------------------------------------------


def shard_map_options() -> dict[str, Any]:
    """The ``shard_map`` workload's mesh and specs: a one-device mesh (the benchmark
    runs on one device), the model replicated and ``x`` split by rows."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    rows = PartitionSpec("data")
    return dict(mesh=mesh, in_specs=(PartitionSpec(), rows), out_specs=rows)


def make_arrays(num_layers: int, width: int = WIDTH) -> list[dict[str, jax.Array]]:
    """The arrays of an L-layer MLP (one ``{'kernel', 'bias'}`` dict per layer),
    random but fixed, small enough that tanh does not saturate."""
    rng = np.random.default_rng(num_layers)
    return [
        {
            "kernel": jnp.asarray(rng.normal(size=(width, width)) / np.sqrt(width), jnp.float32),
            "bias": jnp.asarray(rng.normal(size=(width,)) * 0.1, jnp.float32),
        }
        for _ in range(num_layers)
    ]


def stack(arrays: Sequence[dict[str, jax.Array]]) -> dict[str, jax.Array]:
    """The layers' arrays stacked on a leading axis (for scan)."""
    return {k: jnp.stack([a[k] for a in arrays]) for k in ("kernel", "bias")}


def inputs() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    return {
        "x": jnp.asarray(rng.normal(size=(BATCH, WIDTH)), jnp.float32),
        "xs": jnp.asarray(rng.normal(size=(VMAP_SIZE, WIDTH)), jnp.float32),
    }


# -- the floor: plain JAX ----------------------------------------------------------------------


def jax_layer(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ p["kernel"] + p["bias"])


def jax_mlp(params: dict[str, Any], x: jax.Array) -> jax.Array:
    for p in params["layers"]:
        x = jax_layer(p, x)
    return x


def jax_loss(params: dict[str, Any], x: jax.Array) -> jax.Array:
    return jnp.mean(jax_mlp(params, x) ** 2)


def jax_train(params: dict[str, Any], x: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
    loss, grads = jax.value_and_grad(jax_loss)(params, x)
    return loss, jax.tree.map(lambda p, g: p - LR * g, params, grads)


def jax_scan_body(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
    return jax_layer(p, x), None


def jax_scan(stacked: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return jax.lax.scan(jax_scan_body, x, stacked)[0]


@dataclasses.dataclass(frozen=True)
class Runner:
    """One contender on one workload.

    Attributes:
      step: one call (the timed operation); returns its output.
      observe: ``step``'s output -> what is compared with the floor (for a train
        step: the loss and the parameters after the step). Not timed.
    """

    step: Callable[[], Any]
    observe: Callable[[Any], Any] = lambda out: out


# -- the NNX-style libraries: flaxgraph and Flax NNX (the same code) -----------------------------


@functools.cache
def nnx_style_classes(lib: ModuleType) -> tuple[type, type]:
    """``Linear`` and ``MLP`` for ``flaxgraph`` or ``flax.nnx`` (same source)."""

    class Linear(lib.Module):
        def __init__(self, kernel: jax.Array, bias: jax.Array):
            self.kernel = lib.Param(kernel)
            self.bias = lib.Param(bias)

        def __call__(self, x: jax.Array) -> jax.Array:
            return jnp.tanh(x @ self.kernel.get_value() + self.bias.get_value())

    class MLP(lib.Module):
        def __init__(self, arrays: Sequence[dict[str, jax.Array]]):
            # A plain list; `nnx.data` marks it as data for Flax 0.12 (a no-op in
            # flaxgraph, where lists of Modules are data anyway).
            self.layers = lib.data([Linear(a["kernel"], a["bias"]) for a in arrays])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    return Linear, MLP


def nnx_params(lib: ModuleType, model: Any) -> dict[str, Any]:
    """An NNX-style MLP's arrays in the floor's layout."""
    return {
        "layers": [
            {"kernel": layer.kernel.get_value(), "bias": layer.bias.get_value()}
            for layer in model.layers
        ]
    }


def nnx_style(
    lib: ModuleType, workload: str, arrays: Any, data: dict[str, jax.Array], **mode: Any
) -> Runner:
    """The timed call of ``workload`` for ``flaxgraph`` or ``flax.nnx`` (``mode`` is
    ``graph=False`` for Flax's tree mode, passed to every transform)."""
    linear_cls, mlp_cls = nnx_style_classes(lib)
    x, xs = data["x"], data["xs"]

    def loss_fn(model: Any, x: jax.Array) -> jax.Array:
        return jnp.mean(model(x) ** 2)

    if workload == "train":
        model = mlp_cls(arrays)

        @lib.jit(**mode)
        def train_step(model: Any, x: jax.Array) -> jax.Array:
            # Graph-mode value_and_grad in both Flax modes (its grads are a State):
            # inside jit it only costs trace time.
            loss, grads = lib.value_and_grad(loss_fn)(model, x)
            params = lib.state(model, lib.Param)
            lib.update(model, jax.tree.map(lambda p, g: p - LR * g, params, grads))
            return loss

        step = lambda: train_step(model, x)
        return Runner(step, lambda loss: (loss, nnx_params(lib, model)))

    if workload == "forward":
        model = mlp_cls(arrays)

        @lib.jit(**mode)
        def forward(model: Any, x: jax.Array) -> jax.Array:
            return model(x)

        return Runner(lambda: forward(model, x))

    if workload in ("vmap", "vmap_jit"):
        model = mlp_cls(arrays)
        vmapped = lib.vmap(lambda m, x: m(x), in_axes=(None, 0), **mode)
        if workload == "vmap_jit":
            vmapped = lib.jit(vmapped, **mode)
        return Runner(lambda: vmapped(model, xs))

    if workload in ("scan", "scan_jit"):
        # Scan over layers: the stack is made by vmapping the layer's constructor.
        stacked = stack(arrays)
        layers = lib.vmap(lambda k, b: linear_cls(k, b), in_axes=0, out_axes=0, **mode)(
            stacked["kernel"], stacked["bias"]
        )
        scanned = lib.scan(
            lambda x, layer: layer(x), in_axes=(lib.Carry, 0), out_axes=lib.Carry, **mode
        )
        if workload == "scan_jit":
            scanned = lib.jit(scanned, **mode)
        return Runner(lambda: scanned(x, layers))

    if workload == "shard_map":
        model = mlp_cls(arrays)
        sharded = lib.jit(lib.shard_map(lambda m, x: m(x), **shard_map_options(), **mode), **mode)
        return Runner(lambda: sharded(model, x))

    raise ValueError(workload)


# -- Equinox --------------------------------------------------------------------------------------


@functools.cache
def eqx_classes(eqx: ModuleType) -> tuple[type, type]:
    class EqxLinear(eqx.Module):
        kernel: jax.Array
        bias: jax.Array

        def __call__(self, x: jax.Array) -> jax.Array:
            return jnp.tanh(x @ self.kernel + self.bias)

    class EqxMLP(eqx.Module):
        layers: list[Any]

        def __init__(self, arrays: Sequence[dict[str, jax.Array]]):
            self.layers = [EqxLinear(a["kernel"], a["bias"]) for a in arrays]

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    return EqxLinear, EqxMLP


def eqx_style(eqx: ModuleType, workload: str, arrays: Any, data: dict[str, jax.Array]) -> Runner:
    """The timed call of ``workload`` for Equinox (see ``nnx_style``)."""
    linear_cls, mlp_cls = eqx_classes(eqx)
    x, xs = data["x"], data["xs"]

    def params_of(model: Any) -> dict[str, Any]:
        return {"layers": [{"kernel": la.kernel, "bias": la.bias} for la in model.layers]}

    if workload == "train":
        box = [mlp_cls(arrays)]

        def loss_fn(model: Any, x: jax.Array) -> jax.Array:
            return jnp.mean(model(x) ** 2)

        @eqx.filter_jit
        def train_step(model: Any, x: jax.Array) -> tuple[jax.Array, Any]:
            loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x)
            return loss, jax.tree.map(lambda p, g: p - LR * g, model, grads)

        def step() -> Any:
            loss, box[0] = train_step(box[0], x)
            return loss

        return Runner(step, lambda loss: (loss, params_of(box[0])))

    if workload == "forward":
        model = mlp_cls(arrays)
        forward = eqx.filter_jit(lambda m, x: m(x))
        return Runner(lambda: forward(model, x))

    if workload in ("vmap", "vmap_jit"):
        model = mlp_cls(arrays)
        vmapped = eqx.filter_vmap(lambda m, x: m(x), in_axes=(None, 0))
        if workload == "vmap_jit":
            vmapped = eqx.filter_jit(vmapped)
        return Runner(lambda: vmapped(model, xs))

    if workload in ("scan", "scan_jit"):
        stacked = stack(arrays)
        layers = eqx.filter_vmap(lambda k, b: linear_cls(k, b))(stacked["kernel"], stacked["bias"])

        def scanned(layers: Any, x: jax.Array) -> jax.Array:
            params, static = eqx.partition(layers, eqx.is_array)

            def body(x: jax.Array, p: Any) -> tuple[jax.Array, None]:
                return eqx.combine(p, static)(x), None

            return jax.lax.scan(body, x, params)[0]

        if workload == "scan_jit":
            scanned = eqx.filter_jit(scanned)
        return Runner(lambda: scanned(layers, x))

    if workload == "shard_map":
        model = mlp_cls(arrays)
        sharded = eqx.filter_jit(jax.shard_map(lambda m, x: m(x), **shard_map_options()))
        return Runner(lambda: sharded(model, x))

    raise ValueError(workload)


def jax_style(workload: str, arrays: Any, data: dict[str, jax.Array]) -> Runner:
    """The floor's timed call of ``workload`` (see ``nnx_style``)."""
    x, xs = data["x"], data["xs"]
    if workload == "train":
        box = [{"layers": list(arrays)}]
        step = jax.jit(jax_train)

        def train() -> Any:
            loss, box[0] = step(box[0], x)
            return loss

        return Runner(train, lambda loss: (loss, box[0]))
    params = {"layers": list(arrays)}
    if workload == "forward":
        forward = jax.jit(jax_mlp)
        return Runner(lambda: forward(params, x))
    if workload in ("vmap", "vmap_jit"):
        vmapped = jax.vmap(jax_mlp, in_axes=(None, 0))
        if workload == "vmap_jit":
            vmapped = jax.jit(vmapped)
        return Runner(lambda: vmapped(params, xs))
    if workload in ("scan", "scan_jit"):
        stacked = stack(arrays)
        scanned = jax.jit(jax_scan) if workload == "scan_jit" else jax_scan
        return Runner(lambda: scanned(stacked, x))
    if workload == "shard_map":
        sharded = jax.jit(jax.shard_map(jax_mlp, **shard_map_options()))
        return Runner(lambda: sharded(params, x))
    raise ValueError(workload)


# -- contenders -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Libraries:
    """The comparator modules that are installed (``None`` otherwise)."""

    nnx: ModuleType | None
    eqx: ModuleType | None
    nnx_tree: bool  # Flax's jit has graph=False (tree mode)

    def has(self, name: str) -> bool:
        """Whether the contender ``name`` runs."""
        present = {"nnx": self.nnx is not None, "nnx_tree": self.nnx_tree,
                   "eqx": self.eqx is not None}  # fmt: skip
        return present.get(name, True)


def contenders(workload: str, num_layers: int, libs: Libraries) -> dict[str, Runner]:
    """name -> the contender's ``Runner`` for ``workload``, floor first."""
    arrays, data = make_arrays(num_layers), inputs()
    calls = {
        "jax": jax_style(workload, arrays, data),
        "flaxgraph": nnx_style(flaxgraph, workload, arrays, data),
        "flaxgraph_tree": nnx_style(flaxgraph, workload, arrays, data, graph=False),
    }
    if libs.nnx is not None:
        calls["nnx"] = nnx_style(libs.nnx, workload, arrays, data)
    if libs.nnx is not None and libs.nnx_tree:
        calls["nnx_tree"] = nnx_style(libs.nnx, workload, arrays, data, graph=False)
    if libs.eqx is not None:
        calls["eqx"] = eqx_style(libs.eqx, workload, arrays, data)
    return calls


def check(calls: dict[str, Runner], workload: str, num_layers: int) -> None:
    """Calls every contender once (compiling it) and checks its output against the
    floor's: same structure, ``allclose`` leaves.

    Raises:
      AssertionError: a contender's output differs from the floor's.
    """
    expected = calls["jax"].observe(calls["jax"].step())
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    for name, call in calls.items():
        if name == "jax":
            continue
        leaves, tree = jax.tree.flatten(call.observe(call.step()))
        where = f"{name} on {workload}, L={num_layers}"
        assert tree == expected_tree, f"{where}: output structure {tree} != {expected_tree}"
        for got, want in zip(leaves, expected_leaves, strict=True):
            np.testing.assert_allclose(
                np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6, err_msg=where
            )


def blocking(runner: Runner) -> Callable[[], Any]:
    """``runner.step`` that waits for its output (so a sample counts execution, not just
    dispatch, and no work is left queued for the next contender)."""
    step = runner.step
    return lambda: jax.block_until_ready(step())


# -- run ----------------------------------------------------------------------------------------------


def run_one(workload: str, num_layers: int, libs: Libraries, settings: Settings) -> dict[str, Any]:
    """Checks and times every contender of one workload and size, interleaved."""
    calls = contenders(workload, num_layers, libs)
    check(calls, workload, num_layers)
    timings = measure({name: blocking(c) for name, c in calls.items()}, settings)
    floor = timings["jax"]
    ratios = {name: paired_ratio(t, floor) for name, t in timings.items() if name != "jax"}
    return {
        "workload": workload,
        "layers": num_layers,
        "contenders": {name: t.to_json() for name, t in timings.items()},
        # Medians of the per-round ratios to the floor (see common.paired_ratio).
        "ratio_to_jax": ratios,
        "goal_ratio": GOAL,
        "goal_met": ratios["flaxgraph"] <= GOAL and ratios["flaxgraph_tree"] <= GOAL,
        # issue 10: the train step within TRAIN_GOAL of jax.jit in both modes.
        "train_goal_met": None
        if workload != "train"
        else max(ratios["flaxgraph"], ratios["flaxgraph_tree"]) <= TRAIN_GOAL,
    }


def table(workload: str, records: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """One workload's results: µs per call and ratio to the floor per contender."""
    headers = ["L", "jax"]
    for name in names[1:]:
        headers += [name, f"{SHORT[name]}/jax"]
    headers += ["goal", "spread"]
    rows = []
    for r in records:
        if r["workload"] != workload:
            continue
        c = r["contenders"]
        row = [str(r["layers"]), format_number(c["jax"]["median_us"], 1)]
        for name in names[1:]:
            entry = c.get(name)
            row += [
                format_number(entry["median_us"] if entry else None, 1),
                format_number(r["ratio_to_jax"].get(name)),
            ]
        spread = max(e["iqr_us"] / e["median_us"] for e in c.values())
        row += [f"{GOAL:.1f} " + ("ok" if r["goal_met"] else "--"), f"{100 * spread:.0f}%"]
        rows.append(row)
    return format_table(headers, rows)


def installed(quick: bool) -> Libraries:
    nnx = optional_import("flax.nnx", required=not quick)
    eqx = optional_import("equinox", required=not quick)
    if nnx is None:
        print("flax is not installed: Flax NNX skipped (pip install -e '.[bench]').")
    if eqx is None:
        print("equinox is not installed: Equinox skipped (pip install -e '.[bench]').")
    tree = nnx is not None and "graph" in inspect.signature(nnx.jit).parameters
    return Libraries(nnx, eqx, tree)


def profile(workload: str, num_layers: int, calls: int, top: int, sort: str) -> None:
    """cProfile of the flaxgraph contender (after a check against the floor)."""
    libs = Libraries(None, None, False)
    timed = contenders(workload, num_layers, libs)
    check(timed, workload, num_layers)
    fn = blocking(timed["flaxgraph"])
    print(f"=== flaxgraph {workload}, L={num_layers}: {calls} calls ===")
    print(profile_calls(fn, calls, top=top, sort=sort))


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; see the module docstring for the options."""
    parser = base_parser(__doc__.splitlines()[0], "transforms.json")
    parser.add_argument(
        "--layers", type=int, nargs="+", default=None, help="model sizes (default 1 8 64 256)"
    )
    parser.add_argument(
        "--scan-layers", type=int, nargs="+", default=None, help="scan sizes (default 8 64)"
    )
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument(
        "--profile",
        choices=list(WORKLOADS),
        default=None,
        help="instead of timing, cProfile flaxgraph on this workload (at each --layers)",
    )
    parser.add_argument("--calls", type=int, default=200, help="calls profiled (--profile)")
    parser.add_argument("--top", type=int, default=25, help="lines printed (--profile)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (--profile)")
    args = parser.parse_args(argv)

    if args.profile is not None:
        for num_layers in args.layers or (256,):
            profile(args.profile, num_layers, args.calls, args.top, args.sort)
        return 0

    settings = settings_from_args(args)
    layers = tuple(args.layers or (QUICK_LAYERS if args.quick else FULL_LAYERS))
    scan_layers = tuple(args.scan_layers or (QUICK_SCAN_LAYERS if args.quick else FULL_SCAN_LAYERS))
    libs = installed(args.quick)
    names = [n for n in CONTENDERS if libs.has(n)]

    start_load = load_average()
    start_warning = busy_warning()
    records: list[dict[str, Any]] = []
    for workload in args.workloads:
        for num_layers in scan_layers if workload in SCAN_WORKLOADS else layers:
            records.append(run_one(workload, num_layers, libs, settings))
            print(f"  {workload} L={num_layers} done", file=sys.stderr, flush=True)
    end_load = load_average()

    print(
        f"\nµs per call (blocking on the output), median of {settings.repeat} interleaved "
        "rounds; <name>/jax = median of per-round ratios to the jax floor;\ngoal = issue 6: "
        f"flaxgraph/jax and fg_tree/jax <= {GOAL} (ok = met); spread = largest IQR/median of the row.\n"
        f"Contenders: {', '.join(names)}. Width {WIDTH}, batch {BATCH}, vmap size {VMAP_SIZE}."
    )
    for workload in args.workloads:
        print(f"\n{workload}: {WORKLOADS[workload]}")
        print(table(workload, records, names))
    print_load(start_load, end_load, busy_warning() or start_warning)
    met = [r for r in records if r["goal_met"]]
    print(f"goals met: {len(met)} of {len(records)}")
    train = [r for r in records if r["train_goal_met"] is not None]
    if train:
        ok = sum(r["train_goal_met"] for r in train)
        print(
            f"train step within {TRAIN_GOAL} of jax.jit in graph and tree mode (issue 10): "
            f"{ok} of {len(train)}"
        )
    path = write_json(
        json_path_from_args(args),
        {
            "benchmark": "transforms",
            "unit": "us_per_call",
            "settings": {
                "repeat": settings.repeat, "min_time_s": settings.min_time,
                "quick": args.quick, "layers": list(layers), "scan_layers": list(scan_layers),
                "width": WIDTH, "batch": BATCH, "vmap_size": VMAP_SIZE,
                "workloads": list(args.workloads), "contenders": names,
            },
            "environment": {
                **environment(), "load_average_1m_at_start": start_load,
                "load_average_1m_at_end": end_load,
            },
            "results": records,
        },
    )  # fmt: skip
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
