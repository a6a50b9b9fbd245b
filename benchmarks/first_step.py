"""The first train step: trace, XLA compile and the first run, flaxgraph against Flax NNX.

The wait before a model's first step is a one-time cost a user feels on every start. Each
case is a train step written the plain way, the same code on both libraries: an
``nnx.Optimizer`` with Adam, the loss by ``nnx.value_and_grad``, an ``nnx.jit`` step that
updates the model and the optimizer in place. The step goes through its stages explicitly,
each timed apart (seconds, wall clock)::

  traced = step.trace(model, optimizer, x, y)    # trace: Python, the graph, the jaxpr
  lowered = traced.lower()                       # lower: jaxpr -> StableHLO
  compiled = lowered.compile()                   # compile: XLA
  loss = compiled(model, optimizer, x, y)        # run: the first execution (blocked on)

``first step`` is their sum, what the first ``step(...)`` call costs. Every (case, library)
runs in a fresh Python process, so no trace or compile cache is shared; in each round the
contenders alternate (Flax first in even rounds, flaxgraph first in odd ones) and the
figures are medians over rounds, the ratios medians of per-round ratios flaxgraph / Flax.
The contenders: ``flax`` (Flax NNX's default ``nnx.jit``, which donates nothing),
``flax_donate`` (the same with ``donate_argnames`` naming the model and the optimizer:
the like-for-like step, as flaxgraph's ``nnx.jit`` donates the state it writes by
default; XLA takes longer to compile a program whose outputs alias its inputs) and
``flaxgraph``; the ``/donate`` ratios are flaxgraph / ``flax_donate``.
Each process also reports the first step's loss (both libraries must give the same), the
StableHLO op count and the size of XLA's optimized module in lines.

Cases (width 32, batch 4 unless said):

* ``blocks N``: N residual blocks ``x + Dropout(gelu(Linear(LayerNorm(x))))`` in an
  ``nnx.List``, then ``Linear(32, 1)``; mean squared error. N in 8, 32, 64, 128.
* ``scanned``: the same block, 64 layers made by ``nnx.vmap`` over the constructor
  (``nnx.split_rngs``) and applied by ``nnx.scan``.
* ``transformer``: 2 pre-norm Transformer blocks (``MultiHeadAttention`` with 4 heads,
  Dropout, a gelu MLP of width 128) on sequences of 16 tokens of width 64.
* ``cnn``: two ``Conv`` 3x3 → ``BatchNorm`` → relu → ``avg_pool`` stages, a ``Linear``
  classifier on 16x16x3 images, batch 8, softmax cross-entropy; the step also updates
  the ``BatchStat`` running averages.
* ``ensemble``: 8 MLPs (32 → 64 → 64 → 1, gelu) made by ``nnx.vmap`` over the
  constructor, applied by ``nnx.vmap`` over the members.

Run from the repository root::

  python -m benchmarks.first_step                  # every case, 3 rounds
  python -m benchmarks.first_step --repeat 5 --cases blocks
  python -m benchmarks.first_step --quick          # tiny sizes, 1 round; skips Flax if missing

Results are printed as a table and written as JSON to ``benchmarks/results/first_step.json``
(``first_step_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from benchmarks.common import (
    base_parser,
    busy_warning,
    environment,
    format_number,
    format_table,
    json_path_from_args,
    load_average,
    print_load,
    run_json_child,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("flax", "flax_donate", "flaxgraph")
STAGES = ("trace", "lower", "compile", "run")
INSTRUCTION = re.compile(r"\s+(ROOT )?%\S+ = ")
WIDTH = 32
BATCH = 4


class Case(NamedTuple):
    """One measured train step: the kind of model and its size parameter."""

    kind: str
    size: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.size}"


FULL_CASES = (
    Case("blocks", 8),
    Case("blocks", 32),
    Case("blocks", 64),
    Case("blocks", 128),
    Case("scanned", 64),
    Case("transformer", 2),
    Case("cnn", 2),
    Case("ensemble", 8),
)
QUICK_CASES = (
    Case("blocks", 2),
    Case("scanned", 2),
    Case("transformer", 1),
    Case("cnn", 1),
    Case("ensemble", 2),
)
KINDS = tuple(dict.fromkeys(c.kind for c in FULL_CASES))


# -- the models, written once for either library (``nnx`` is flax.nnx or flaxgraph) ----------


class Workload(NamedTuple):
    """What a child process times: the model, its optimizer, the batch and the loss."""

    model: Any
    optimizer: Any
    x: Any
    y: Any
    loss: Callable[[Any, Any, Any], Any]  # (model, x, y) -> scalar


def _mse(model: Any, x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.mean((model(x) - y) ** 2)


def _block_class(nnx: ModuleType) -> type:
    import jax

    class Block(nnx.Module):
        def __init__(self, width: int, rngs: Any):
            self.norm = nnx.LayerNorm(width, rngs=rngs)
            self.linear = nnx.Linear(width, width, rngs=rngs)
            self.dropout = nnx.Dropout(0.1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return x + self.dropout(jax.nn.gelu(self.linear(self.norm(x))))

    return Block


def _blocks(nnx: ModuleType, size: int) -> Workload:
    import jax.numpy as jnp

    block = _block_class(nnx)

    class Model(nnx.Module):
        def __init__(self, depth: int, rngs: Any):
            self.blocks = nnx.List([block(WIDTH, rngs) for _ in range(depth)])
            self.head = nnx.Linear(WIDTH, 1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    model = Model(size, nnx.Rngs(0, dropout=1))
    x = jnp.linspace(-1.0, 1.0, BATCH * WIDTH).reshape(BATCH, WIDTH)
    return _with_adam(nnx, model, x, jnp.ones((BATCH, 1)), _mse)


def _scanned(nnx: ModuleType, size: int) -> Workload:
    import jax.numpy as jnp

    block = _block_class(nnx)

    @nnx.split_rngs(splits=size)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_stack(rngs: Any) -> Any:
        return block(WIDTH, rngs)

    class Model(nnx.Module):
        def __init__(self, rngs: Any):
            self.stack = make_stack(rngs)
            self.head = nnx.Linear(WIDTH, 1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def layer(carry: Any, b: Any) -> Any:
                return b(carry)

            return self.head(layer(x, self.stack))

    model = Model(nnx.Rngs(0, dropout=1))
    x = jnp.linspace(-1.0, 1.0, BATCH * WIDTH).reshape(BATCH, WIDTH)
    return _with_adam(nnx, model, x, jnp.ones((BATCH, 1)), _mse)


def _transformer(nnx: ModuleType, size: int) -> Workload:
    import jax
    import jax.numpy as jnp

    width, heads, seq = 64, 4, 16

    class Block(nnx.Module):
        def __init__(self, rngs: Any):
            self.norm1 = nnx.LayerNorm(width, rngs=rngs)
            self.attention = nnx.MultiHeadAttention(
                num_heads=heads,
                in_features=width,
                dropout_rate=0.1,
                decode=False,
                deterministic=False,
                rngs=rngs,
            )
            self.norm2 = nnx.LayerNorm(width, rngs=rngs)
            self.up = nnx.Linear(width, 2 * width, rngs=rngs)
            self.down = nnx.Linear(2 * width, width, rngs=rngs)
            self.dropout = nnx.Dropout(0.1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            x = x + self.attention(self.norm1(x))
            return x + self.dropout(self.down(jax.nn.gelu(self.up(self.norm2(x)))))

    class Model(nnx.Module):
        def __init__(self, depth: int, rngs: Any):
            self.blocks = nnx.List([Block(rngs) for _ in range(depth)])
            self.head = nnx.Linear(width, 1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    model = Model(size, nnx.Rngs(0, dropout=1))
    x = jnp.sin(jnp.arange(BATCH * seq * width, dtype=jnp.float32)).reshape(BATCH, seq, width)
    return _with_adam(nnx, model, x, jnp.ones((BATCH, seq, 1)), _mse)


def _cnn(nnx: ModuleType, size: int) -> Workload:
    import jax.numpy as jnp
    import optax

    class Model(nnx.Module):
        def __init__(self, stages: int, rngs: Any):
            channels = [3] + [16 * 2**i for i in range(stages)]
            self.convs = nnx.List(
                [nnx.Conv(a, b, (3, 3), rngs=rngs) for a, b in itertools.pairwise(channels)]
            )
            self.norms = nnx.List([nnx.BatchNorm(b, rngs=rngs) for b in channels[1:]])
            self.head = nnx.Linear(channels[-1], 10, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            for conv, norm in zip(self.convs, self.norms):
                x = nnx.avg_pool(nnx.relu(norm(conv(x))), (2, 2), strides=(2, 2))
            return self.head(jnp.mean(x, axis=(1, 2)))

    def cross_entropy(model: Any, x: Any, y: Any) -> Any:
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    model = Model(size, nnx.Rngs(0))
    images = jnp.cos(jnp.arange(8 * 16 * 16 * 3, dtype=jnp.float32)).reshape(8, 16, 16, 3)
    labels = jnp.arange(8) % 10
    return _with_adam(nnx, model, images, labels, cross_entropy)


def _ensemble(nnx: ModuleType, size: int) -> Workload:
    import jax
    import jax.numpy as jnp

    class MLP(nnx.Module):
        def __init__(self, rngs: Any):
            self.layers = nnx.List(
                [
                    nnx.Linear(WIDTH, 64, rngs=rngs),
                    nnx.Linear(64, 64, rngs=rngs),
                    nnx.Linear(64, 1, rngs=rngs),
                ]
            )

        def __call__(self, x: Any) -> Any:
            for layer in self.layers[:-1]:
                x = jax.nn.gelu(layer(x))
            return self.layers[-1](x)

    @nnx.split_rngs(splits=size)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_members(rngs: Any) -> Any:
        return MLP(rngs)

    class Ensemble(nnx.Module):
        def __init__(self, rngs: Any):
            self.members = make_members(rngs)

        def __call__(self, x: Any) -> Any:
            @nnx.vmap(in_axes=(0, None), out_axes=0)
            def each(member: Any, x: Any) -> Any:
                return member(x)

            return each(self.members, x)  # (members, batch, 1)

    model = Ensemble(nnx.Rngs(0))
    x = jnp.linspace(-1.0, 1.0, BATCH * WIDTH).reshape(BATCH, WIDTH)
    return _with_adam(nnx, model, x, jnp.ones((BATCH, 1)), _mse)


def _with_adam(
    nnx: ModuleType, model: Any, x: Any, y: Any, loss: Callable[[Any, Any, Any], Any]
) -> Workload:
    import optax

    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    return Workload(model, optimizer, x, y, loss)


BUILDERS: dict[str, Callable[[ModuleType, int], Workload]] = {
    "blocks": _blocks,
    "scanned": _scanned,
    "transformer": _transformer,
    "cnn": _cnn,
    "ensemble": _ensemble,
}


def train_step(
    nnx: ModuleType,
    loss: Callable[[Any, Any, Any], Any],
    donate: bool = False,
    options: dict[str, Any] | None = None,
) -> Any:
    """The ``nnx.jit`` train step: loss and gradients, an optimizer update, the loss out
    (``donate``: with ``donate_argnames`` naming the model and the optimizer; ``options``:
    more keyword arguments of ``nnx.jit``)."""
    jit_options = dict(options or {})
    if donate:
        jit_options["donate_argnames"] = ("model", "optimizer")

    @nnx.jit(**jit_options)
    def step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        value, grads = nnx.value_and_grad(lambda m: loss(m, x, y))(model)
        optimizer.update(model, grads)
        return value

    return step


def measure_child(library: str, case: Case) -> dict[str, Any]:
    """In this (fresh) process: build the case on ``library`` and time the step's stages."""
    import jax

    nnx: ModuleType
    if library.startswith("flax_") or library == "flax":
        from flax import nnx
    else:
        import flaxgraph as nnx
    work = BUILDERS[case.kind](nnx, case.size)
    step = train_step(nnx, work.loss, donate=library == "flax_donate")
    args = (work.model, work.optimizer, work.x, work.y)
    wall: list[float] = []
    cpu: list[float] = []

    def tick() -> None:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())

    tick()
    traced = step.trace(*args)
    tick()
    lowered = traced.lower()
    tick()
    compiled = lowered.compile()
    tick()
    loss = jax.block_until_ready(compiled(*args))
    tick()
    stablehlo = lowered.as_text()
    optimized = (compiled.as_text() or "").splitlines()
    return {
        "library": library,
        "case": case.label,
        "seconds": {s: wall[i + 1] - wall[i] for i, s in enumerate(STAGES)},
        "cpu_seconds": {s: cpu[i + 1] - cpu[i] for i, s in enumerate(STAGES)},
        "loss": float(loss),
        "stablehlo_ops": stablehlo.count(" = stablehlo.") + stablehlo.count(" = chlo."),
        # instructions of the optimized module's computations (not its debug tables)
        "optimized_hlo_instructions": sum(bool(INSTRUCTION.match(line)) for line in optimized),
    }


# -- the parent: fresh processes, alternating, medians ----------------------------------------


def run_child(library: str, case: Case, timeout: float) -> dict[str, Any]:
    """One fresh process measuring ``case`` on ``library``; its JSON result."""
    args = ["--child", library, case.kind, str(case.size)]
    return run_json_child(
        "benchmarks.first_step", args, f"{library} process for {case.label}", timeout
    )


def first_step(record: dict[str, Any], clock: str = "seconds") -> float:
    """The sum of the stages (wall ``seconds`` or ``cpu_seconds``): what the first
    ``step(...)`` call costs."""
    return sum(record[clock][s] for s in STAGES)


def _paired(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], measure: Callable[..., float]
) -> float:
    return statistics.median(measure(g) / measure(f) for g, f in pairs)


def summarize(case: Case, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per library and stage, per-round ratios flaxgraph / Flax (wall and CPU)."""
    summary: dict[str, Any] = {"case": case.label, "rounds": len(runs["flaxgraph"])}
    for library, records in runs.items():
        summary[library] = {
            "seconds": {s: statistics.median(r["seconds"][s] for r in records) for s in STAGES},
            "cpu_seconds": {
                s: statistics.median(r["cpu_seconds"][s] for r in records) for s in STAGES
            },
            "first_step": statistics.median(first_step(r) for r in records),
            "first_step_cpu": statistics.median(first_step(r, "cpu_seconds") for r in records),
            "losses": [r["loss"] for r in records],
            "stablehlo_ops": records[0]["stablehlo_ops"],
            "optimized_hlo_instructions": records[0]["optimized_hlo_instructions"],
        }
    if "flax" in runs:
        pairs = list(zip(runs["flaxgraph"], runs["flax"], strict=True))
        summary["ratios"] = {
            "first_step": _paired(pairs, first_step),
            "compile": _paired(pairs, lambda r: r["seconds"]["compile"]),
            "trace": _paired(pairs, lambda r: r["seconds"]["trace"] + r["seconds"]["lower"]),
            "first_step_cpu": _paired(pairs, lambda r: first_step(r, "cpu_seconds")),
            "compile_cpu": _paired(pairs, lambda r: r["cpu_seconds"]["compile"]),
        }
        summary["same_loss"] = all(g["loss"] == f["loss"] for g, f in pairs)
    if "flax_donate" in runs:  # the like-for-like step: both donate the state
        pairs = list(zip(runs["flaxgraph"], runs["flax_donate"], strict=True))
        summary["ratios_donate"] = {
            "first_step": _paired(pairs, first_step),
            "compile": _paired(pairs, lambda r: r["seconds"]["compile"]),
            "first_step_cpu": _paired(pairs, lambda r: first_step(r, "cpu_seconds")),
            "compile_cpu": _paired(pairs, lambda r: r["cpu_seconds"]["compile"]),
        }
    return summary


def table(summaries: Sequence[dict[str, Any]], libraries: Sequence[str]) -> str:
    """The printed table: per case, each library's first step and compile time (wall,
    medians), and the ratios flaxgraph / Flax (wall and CPU)."""
    compare = "flax" in libraries
    headers = ["case"]
    for library in libraries:
        short = "fg" if library == "flaxgraph" else library
        headers += [f"{short} trace", f"{short} compile", f"{short} first"]
    if compare:
        headers += ["first", "compile", "trace", "first cpu", "compile cpu", "loss"]
    donate = "flax_donate" in libraries
    if donate:
        headers += ["first/donate", "compile/donate", "first cpu/donate", "compile cpu/donate"]
    rows = []
    for s in summaries:
        row = [s["case"]]
        for library in libraries:
            m = s[library]
            row += [
                format_number(m["seconds"]["trace"] + m["seconds"]["lower"]),
                format_number(m["seconds"]["compile"]),
                format_number(m["first_step"]),
            ]
        if compare:
            r = s["ratios"]
            row += [
                format_number(r[k])
                for k in ("first_step", "compile", "trace", "first_step_cpu", "compile_cpu")
            ]
            row.append("same" if s["same_loss"] else "DIFFERENT")
        if donate:
            d = s["ratios_donate"]
            row += [
                format_number(d[k])
                for k in ("first_step", "compile", "first_step_cpu", "compile_cpu")
            ]
        rows.append(row)
    return format_table(headers, rows)


def write_results(
    path: Path,
    rounds: int,
    start_load: float | None,
    runs: dict[Case, dict[str, list[dict[str, Any]]]],
) -> list[dict[str, Any]]:
    """Writes the JSON record of ``rounds`` complete rounds; returns the summaries."""
    summaries = [summarize(c, r) for c, r in runs.items()]
    write_json(
        path,
        {
            "benchmark": "first_step",
            "environment": environment(),
            "rounds": rounds,
            "load_average": {"start": start_load, "end": load_average()},
            "results": summaries,
            "runs": {c.label: r for c, r in runs.items()},
        },
    )
    return summaries


def _flax_installed() -> bool:
    """Whether Flax can be imported (``sys.modules['flax'] = None`` hides it, as in the
    smoke test)."""
    try:
        return importlib.util.find_spec("flax") is not None
    except ValueError:
        return False


def parse_case(kind: str, size: str) -> Case:
    if kind not in BUILDERS:
        raise SystemExit(f"unknown case kind {kind!r}; the kinds are {', '.join(BUILDERS)}")
    return Case(kind, int(size))


def add_case_options(parser: argparse.ArgumentParser) -> None:
    """``--cases`` (kinds) and ``--blocks`` (depths of the blocks case)."""
    parser.add_argument("--cases", nargs="+", choices=KINDS, default=None, help="case kinds")
    parser.add_argument(
        "--blocks", type=int, nargs="+", default=None, help="depths of the blocks case"
    )


def selected_cases(args: argparse.Namespace) -> list[Case]:
    """The cases ``--quick``, ``--blocks`` and ``--cases`` select, in table order."""
    cases = list(QUICK_CASES if args.quick else FULL_CASES)
    if args.blocks:
        cases = [c for c in cases if c.kind != "blocks"] + [Case("blocks", n) for n in args.blocks]
        cases.sort(key=lambda c: (KINDS.index(c.kind), c.size))
    if args.cases:
        cases = [c for c in cases if c.kind in args.cases]
    return cases


def flax_available(args: argparse.Namespace) -> bool:
    """Whether Flax is installed; without it only ``--quick`` runs (``SystemExit`` otherwise)."""
    has_flax = _flax_installed()
    if not has_flax and not args.quick:
        raise SystemExit(
            "The comparator 'flax' is not installed.\n"
            'Fix: pip install -e ".[bench]", or pass --quick to skip missing comparators.'
        )
    return has_flax


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; see the module docstring for the options."""
    parser = base_parser(__doc__.splitlines()[0], "first_step.json")
    add_case_options(parser)
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds one child process may take"
    )
    parser.add_argument("--child", nargs=3, metavar=("LIBRARY", "KIND", "SIZE"), help="internal")
    args = parser.parse_args(argv)

    if args.child is not None:
        library, kind, size = args.child
        print(json.dumps(measure_child(library, parse_case(kind, size))), flush=True)
        return 0

    cases = selected_cases(args)
    rounds = args.repeat or (1 if args.quick else 3)
    has_flax = flax_available(args)
    libraries = LIBRARIES if has_flax else ("flaxgraph",)
    if not has_flax:
        print("Flax NNX skipped (not installed): flaxgraph only, no ratios.")

    start_load = load_average()
    warning = busy_warning()
    runs: dict[Case, dict[str, list[dict[str, Any]]]] = {
        c: {lib: [] for lib in libraries} for c in cases
    }
    path = json_path_from_args(args)
    # The cheap cases first in every round, so an interrupted run has them all.
    by_cost = sorted(cases, key=lambda c: c.size if c.kind == "blocks" else 16)
    for r in range(rounds):
        order = libraries if r % 2 == 0 else libraries[::-1]
        for case in by_cost:
            for library in order:
                record = run_child(library, case, args.timeout)
                runs[case][library].append(record)
                print(
                    f"  round {r}: {case.label}: {library} first step "
                    f"{first_step(record):.2f} s (compile {record['seconds']['compile']:.2f} s; "
                    f"CPU {first_step(record, 'cpu_seconds'):.2f} s, compile "
                    f"{record['cpu_seconds']['compile']:.2f} s), "
                    f"load {format_number(load_average(), 1)}",
                    file=sys.stderr,
                    flush=True,
                )
        done = {c: {lib: v[: r + 1] for lib, v in runs[c].items()} for c in cases}
        write_results(path, r + 1, start_load, done)  # after every round: a partial record
    end_load = load_average()
    summaries = write_results(path, rounds, start_load, runs)

    print(
        f"\nThe first train step, seconds (median of {rounds} rounds, each case and library a "
        "fresh process, the libraries alternating):\ntrace = trace + lower to StableHLO; "
        "compile = XLA; run = the first execution; first = their sum. Ratios: medians of "
        "per-round flaxgraph / Flax\n(first, compile, trace: wall clock; first cpu, compile cpu: "
        "the process's CPU time, steadier on a busy machine); loss: the first step's loss on "
        "both; /donate: flaxgraph / Flax with donate_argnames."
    )
    print(table(summaries, libraries))
    print_load(start_load, end_load, warning)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
