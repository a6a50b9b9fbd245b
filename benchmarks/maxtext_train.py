"""MaxText's own trainer per step: real Flax NNX against flaxgraph, the first step timed apart.

MaxText's release (installed in ``.venv-clients-maxtext`` as ``make clients`` builds it;
``python tests/clients/maxtext_trainer.py`` builds it too) runs
``maxtext.trainers.pre_train.train`` with the tiny decoupled configuration of
``tests/clients/maxtext_trainer.py`` (2 decoder layers, embedding 64, vocabulary 256, sequence 64,
synthetic data, scanned layers, no checkpointing) for ``--steps`` steps; real Flax as ``python -m
maxtext.trainers.pre_train.train``, flaxgraph as ``python -m flaxgraph.run -m ...``.

``flax.nnx`` is bound for a whole process, so each side is a process of its own: in every round
one trainer process per side, the order alternating from round to round, so load drift hits both
alike. The times are MaxText's own ``perf/step_time_seconds`` from its metrics file (wall time
from one step's completion to the next, data loading included). Reported per side: step 0 (trace,
compile and the first run of the train step), and the steady state: the median step time over
steps ``--warmup`` to the last; and the median over rounds of the per-round ratio flaxgraph / Flax.

    python -m benchmarks.maxtext_train [--quick] [--repeat 3] [--steps 40] [--json PATH]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    base_parser,
    busy_warning,
    format_table,
    json_path_from_args,
    write_json,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "clients"))

import maxtext_trainer  # noqa: E402
from environments import ENVIRONMENTS  # noqa: E402

SIDES = ("flax", "flaxgraph")


def one_run(
    venv: Path, found: maxtext_trainer.Package, side: str, steps: int, warmup: int, out: Path
) -> dict[str, Any]:
    """One trainer process: step 0's time and the median of the steady steps."""
    where = out / side
    metrics = where / "bench.jsonl"
    program = maxtext_trainer.trainer_program(
        found,
        True,
        "enable_checkpointing=False",
        f"steps={steps}",
        "run_name=bench",
        f"base_output_directory={where}",
        f"metrics_file={metrics}",
    )
    run = maxtext_trainer.launch(venv, side, program, where, "bench")
    step_seconds = maxtext_trainer.metrics_of(metrics, "perf/step_time_seconds")
    losses = maxtext_trainer.losses_of(metrics)
    if run.returncode != 0 or sorted(step_seconds) != list(range(steps)):
        raise SystemExit(f"the {side} trainer failed (exit {run.returncode}); see {run.log}")
    steady = [step_seconds[s] for s in range(warmup, steps)]
    return {
        "first_step_s": step_seconds[0],
        "steady_step_ms": 1e3 * statistics.median(steady),
        "process_s": run.seconds,
        "losses": [losses[s] for s in range(steps)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.split("\n\n")[0], "maxtext_train.json")
    parser.add_argument("--steps", type=int, default=None, help="steps per trainer process")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the steady state")
    args = parser.parse_args(argv)
    rounds = args.repeat or (1 if args.quick else 3)
    steps = args.steps or (10 if args.quick else 40)
    venv = (REPO / ENVIRONMENTS["maxtext"].venv).resolve()
    if not (venv / "bin" / "python").exists():
        raise SystemExit(
            f"{venv} is missing: build it with `make clients` or "
            "`python tests/clients/maxtext_trainer.py` first."
        )
    found = maxtext_trainer.package(venv)
    warning = busy_warning()
    if warning:
        print(warning)
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="maxtext_bench_") as tmp:
        for r in range(rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                result = one_run(venv, found, side, steps, args.warmup, Path(tmp) / str(r))
                results[side].append(result)
                print(
                    f"round {r}: {side}: step 0 {result['first_step_s']:.2f} s, steady "
                    f"{result['steady_step_ms']:.2f} ms/step",
                    flush=True,
                )
    ratios = [
        g["steady_step_ms"] / f["steady_step_ms"]
        for f, g in zip(results["flax"], results["flaxgraph"], strict=True)
    ]
    first_ratios = [
        g["first_step_s"] / f["first_step_s"]
        for f, g in zip(results["flax"], results["flaxgraph"], strict=True)
    ]
    same = all(f["losses"] == g["losses"] for f, g in zip(*results.values(), strict=True))

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    rows = [
        [
            "steady step (ms)",
            f"{med('flax', 'steady_step_ms'):.2f}",
            f"{med('flaxgraph', 'steady_step_ms'):.2f}",
            f"{statistics.median(ratios):.2f}",
        ],
        [
            "step 0: trace + compile (s)",
            f"{med('flax', 'first_step_s'):.2f}",
            f"{med('flaxgraph', 'first_step_s'):.2f}",
            f"{statistics.median(first_ratios):.2f}",
        ],
    ]
    print(format_table(["MaxText tiny trainer", "Flax NNX", "flaxgraph", "ratio"], rows))
    print(f"{rounds} rounds of {steps} steps, {time.time() - start:.0f} s; same losses: {same}")
    payload = {"rounds": rounds, "steps": steps, "results": results, "ratios": ratios}
    print(f"wrote {write_json(json_path_from_args(args), payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
