"""Memory of a compiled step: flaxgraph, Flax NNX, Flax NNX with donation, and the floor.

What a large model feels is the device memory of one step: its arguments, its outputs,
XLA's temporaries, and how much of the outputs reuse (alias) the donated arguments'
buffers instead of a second copy. Each figure is read from the step's
``lower(...).compile().memory_analysis()`` (bytes), and the process's peak resident set
(``ru_maxrss``) is taken after three calls of the step, in a fresh Python process per
(case, contender), so no buffer of another contender is counted.

Contenders (the same model code on both libraries):

* ``flaxgraph``: ``nnx.jit`` with no annotation (it donates the arrays the step
  writes by default, see ``guides/performance.md``, "Donation");
* ``flax``: Flax NNX 0.12 ``nnx.jit`` with no annotation;
* ``flax_donate``: Flax NNX with ``donate_argnames`` naming the model and the optimizer
  (train steps only);
* ``floor``: plain ``jax.jit`` on the pure state (``nnx.split``), returning new state,
  with ``donate_argnums`` on the state for train steps: what a step cannot go below.

Cases (float32; the default sizes are those of issue #38's figures):

* ``grad``: ``nnx.jit(nnx.grad(loss))`` of an MLP of 8 Linear layers 1024 -> 1024 (33.6
  MB of parameters): the output is the gradients, nothing more;
* ``scan``: a forward pass over 24 stacked layers 512 -> 512 built by ``nnx.vmap`` and
  applied by ``nnx.scan`` (25 MB of weights): the output is the activations only;
* ``adam``: a train step of the MLP with ``nnx.Optimizer(adam)``: parameters and
  optimizer state (101 MB) should be aliased, not double-buffered;
* ``scan_adam``: the same train step on the scanned stack.

``aliased`` is also given as a fraction of ``state`` (parameters plus optimizer state,
the buffers a train step replaces).

Run from the repository root::

  python -m benchmarks.memory            # every case and contender
  python -m benchmarks.memory --quick    # tiny sizes; skips Flax if missing
  python -m benchmarks.memory --cases adam

Results are printed as a table and written as JSON to ``benchmarks/results/memory.json``
(``memory_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import importlib.util
import json
import resource
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from benchmarks.common import (
    base_parser,
    environment,
    format_number,
    format_table,
    json_path_from_args,
    load_average,
    run_json_child,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
CASES = ("grad", "scan", "adam", "scan_adam")
TRAIN = ("adam", "scan_adam")
CONTENDERS = ("flaxgraph", "flax", "flax_donate", "floor")
FIGURES = ("argument", "output", "temp", "alias")


class Size(NamedTuple):
    """The model sizes of one run (``--quick`` makes them tiny)."""

    width: int
    depth: int
    scan_width: int
    scan_depth: int
    batch: int


FULL = Size(width=1024, depth=8, scan_width=512, scan_depth=24, batch=8)
QUICK = Size(width=16, depth=2, scan_width=8, scan_depth=2, batch=2)


# -- the models, written once for either library ---------------------------------------------


class Work(NamedTuple):
    """A case built on one library: the step's objects and its pure-JAX floor."""

    objects: tuple[Any, ...]  # the step's object arguments (model, optimizer)
    x: Any
    y: Any
    step: Callable[..., Any]  # of (*objects, x, y), an nnx.jit
    floor: Callable[..., Any]  # of (*pure_states, x, y), a jax.jit
    floor_args: tuple[Any, ...]


def _mlp(nnx: ModuleType, size: Size) -> Any:
    import jax

    class MLP(nnx.Module):
        def __init__(self, rngs: Any):
            self.layers = nnx.List(
                [nnx.Linear(size.width, size.width, rngs=rngs) for _ in range(size.depth)]
            )

        def __call__(self, x: Any) -> Any:
            for layer in self.layers:
                x = jax.nn.tanh(layer(x))
            return x

    return MLP(nnx.Rngs(0))


def _stack(nnx: ModuleType, size: Size) -> Any:
    import jax

    @nnx.split_rngs(splits=size.scan_depth)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make(rngs: Any) -> Any:
        return nnx.Linear(size.scan_width, size.scan_width, rngs=rngs)

    class Stack(nnx.Module):
        def __init__(self, rngs: Any):
            self.layers = make(rngs)

        def __call__(self, x: Any) -> Any:
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def layer(carry: Any, lin: Any) -> Any:
                return jax.nn.tanh(lin(carry))

            return layer(x, self.layers)

    return Stack(nnx.Rngs(0))


def _loss(model: Any, x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.mean((model(x) - y) ** 2)


def build(nnx: ModuleType, case: str, size: Size, donate: bool) -> Work:
    """The case on ``nnx`` (flax.nnx or flaxgraph); ``donate``: name the objects in
    ``donate_argnames`` (Flax's way to alias them)."""
    import jax
    import jax.numpy as jnp
    import optax

    scanned = case.startswith("scan")
    width = size.scan_width if scanned else size.width
    model = (_stack if scanned else _mlp)(nnx, size)
    x = jnp.linspace(-1.0, 1.0, size.batch * width).reshape(size.batch, width)
    y = jnp.cos(x)
    kwargs: dict[str, Any] = {}
    if case in TRAIN:
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        if donate:
            kwargs["donate_argnames"] = ("model", "optimizer")

        @nnx.jit(**kwargs)
        def train(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
            loss, grads = nnx.value_and_grad(_loss)(model, x, y)
            optimizer.update(model, grads)
            return loss

        graphdef, params = nnx.split(model, nnx.Param)
        tx = optax.adam(1e-3)
        opt_state = tx.init(params)

        def pure_train(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
            def loss_of(p: Any) -> Any:
                return _loss(nnx.merge(graphdef, p), x, y)

            loss, grads = jax.value_and_grad(loss_of)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return loss, optax.apply_updates(params, updates), opt_state

        floor = jax.jit(pure_train, donate_argnums=(0, 1))
        return Work((model, optimizer), x, y, train, floor, (params, opt_state))
    if donate:
        kwargs["donate_argnames"] = ("model",)
    graphdef, params = nnx.split(model)
    if case == "grad":

        @nnx.jit(**kwargs)
        def grad(model: Any, x: Any, y: Any) -> Any:
            return nnx.grad(_loss)(model, x, y)

        def pure_grad(params: Any, x: Any, y: Any) -> Any:
            return jax.grad(lambda p: _loss(nnx.merge(graphdef, p), x, y))(params)

        return Work((model,), x, y, grad, jax.jit(pure_grad), (params,))

    @nnx.jit(**kwargs)
    def forward(model: Any, x: Any, y: Any) -> Any:
        return model(x)

    def pure_forward(params: Any, x: Any, y: Any) -> Any:
        return nnx.merge(graphdef, params)(x)

    return Work((model,), x, y, forward, jax.jit(pure_forward), (params,))


def _state_bytes(nnx: ModuleType, objects: Sequence[Any]) -> int:
    import jax

    return sum(a.nbytes for o in objects for a in jax.tree.leaves(nnx.state(o)))


def measure_child(contender: str, case: str, quick: bool) -> dict[str, Any]:
    """In this (fresh) process: build ``case`` for ``contender``, read the compiled
    step's memory analysis, call it three times and read the peak resident set."""
    import jax

    nnx: ModuleType
    if contender in ("flax", "flax_donate"):
        from flax import nnx
    else:
        import flaxgraph as nnx
    size = QUICK if quick else FULL
    work = build(nnx, case, size, donate=contender == "flax_donate")
    state = _state_bytes(nnx, work.objects)
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if contender == "floor":
        args: tuple[Any, ...] = (*work.floor_args, work.x, work.y)
        compiled = work.floor.lower(*args).compile()
        for _ in range(3):
            out = work.floor(*args)
            if case in TRAIN:  # the new state replaces the donated one
                args = (out[1], out[2], work.x, work.y)
            jax.block_until_ready(out)
    else:
        args = (*work.objects, work.x, work.y)
        compiled = work.step.lower(*args).compile()
        for _ in range(3):
            jax.block_until_ready(work.step(*args))
    stats = compiled.memory_analysis()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "contender": contender,
        "case": case,
        "state": state,
        "argument": stats.argument_size_in_bytes,
        "output": stats.output_size_in_bytes,
        "temp": stats.temp_size_in_bytes,
        "alias": stats.alias_size_in_bytes,
        "peak_rss_kb": peak,
        "step_rss_kb": peak - rss_built,
    }


def run_child(contender: str, case: str, quick: bool, timeout: float) -> dict[str, Any]:
    """One fresh process measuring ``case`` for ``contender``; its JSON result."""
    args = ["--child", contender, case, *(["--quick"] if quick else [])]
    return run_json_child("benchmarks.memory", args, f"{contender} process for {case}", timeout)


def _mb(n: float) -> str:
    return format_number(n / 1e6, 2)


def table(records: Sequence[dict[str, Any]]) -> str:
    """The results as a text table (MB; ``aliased/state`` a fraction)."""
    headers = [
        "case", "contender", "state MB", "argument MB", "output MB", "temp MB", "aliased MB",
        "aliased/state", "peak RSS MB", "step RSS MB",
    ]  # fmt: skip
    rows = [
        [
            r["case"],
            r["contender"],
            _mb(r["state"]),
            _mb(r["argument"]),
            _mb(r["output"]),
            _mb(r["temp"]),
            _mb(r["alias"]),
            format_number(r["alias"] / r["state"] if r["state"] else None, 2),
            _mb(r["peak_rss_kb"] * 1e3),
            _mb(r["step_rss_kb"] * 1e3),
        ]
        for r in records
    ]
    return format_table(headers, rows)


def _flax_installed() -> bool:
    try:
        return importlib.util.find_spec("flax") is not None
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; see the module docstring for the options."""
    parser = base_parser(__doc__.splitlines()[0], "memory.json")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "CASE"), help="internal")
    args = parser.parse_args(argv)

    if args.child is not None:
        contender, case = args.child
        print(json.dumps(measure_child(contender, case, args.quick)), flush=True)
        return 0

    contenders = list(args.contenders)
    if not _flax_installed():
        if not args.quick:
            raise SystemExit(
                "The comparator 'flax' is not installed.\n"
                'Fix: pip install -e ".[bench]", or pass --quick to skip missing comparators.'
            )
        print("Flax NNX skipped (not installed).")
        contenders = [c for c in contenders if c not in ("flax", "flax_donate")]
    start_load = load_average()
    records = []
    for case in args.cases:
        for contender in contenders:
            if contender == "flax_donate" and case not in TRAIN:
                continue
            record = run_child(contender, case, args.quick, args.timeout)
            records.append(record)
            print(f"  {case}: {contender} done", file=sys.stderr, flush=True)
    print(table(records))
    path = json_path_from_args(args)
    write_json(
        path,
        {
            "benchmark": "memory",
            "environment": environment(),
            "quick": args.quick,
            "load_average": {"start": start_load, "end": load_average()},
            "results": records,
        },
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
