"""XLA compile time of the first train step, every contender paired in one process.

``benchmarks.first_step`` times each (case, library) in its own fresh process. Its XLA
compile ratios therefore carry the spread between processes, 10-15 % per run on a 2-CPU
machine, which is more than the differences they should resolve. This benchmark times the
XLA compile stage alone, more precisely:

* one fresh process per case traces ``benchmarks.first_step``'s train step (the same
  cases and the same ``train_step``) on every contender;
* it then compiles each contender's program ``--repeat`` times, round-robin, the order
  rotating from round to round. Before each compile it calls ``jax.clear_caches()`` and
  lowers the trace again, so XLA compiles from scratch every time (seconds, wall clock);
* the first round is a warm-up (XLA's and LLVM's one-time set-up in the process) and is
  left out. Ratios are medians of the per-round ratios against Flax's default step, with
  their interquartile range.

The contenders:

* ``flax``: Flax NNX's ``nnx.jit``, which donates nothing;
* ``flax_donate``: the same with ``donate_argnames`` naming the model and the optimizer;
* ``flaxgraph``: flaxgraph's ``nnx.jit`` as a user gets it, which donates the state it
  writes (``docs/design.md``, "Automatic donation");
* ``flaxgraph_undonated``: flaxgraph with ``donate_variables=False``.

Each contender's row also gives the optimized module's instruction count and how many of
its outputs alias an input (``input_output_alias``): two contenders with the same counts
compile the same program up to names and order.

Run from the repository root::

  python -m benchmarks.compile_paired                     # every case, 7 rounds
  python -m benchmarks.compile_paired --cases cnn --repeat 15
  python -m benchmarks.compile_paired --quick             # tiny sizes, 2 rounds

Results are printed as a table and written as JSON to
``benchmarks/results/compile_paired.json`` (``compile_paired_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Sequence
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
from benchmarks.first_step import (
    BUILDERS,
    INSTRUCTION,
    Case,
    add_case_options,
    flax_available,
    parse_case,
    selected_cases,
    train_step,
)

BASE = "flax"
ALIAS = re.compile(r"\{[0-9, ]*\}: \(\d+, \{[0-9, ]*\}, (?:may|must)-alias\)")


class Contender(NamedTuple):
    """One way of writing the train step: the library and the ``nnx.jit`` options."""

    name: str
    library: str  # "flax" or "flaxgraph"
    donate_argnames: bool
    options: dict[str, Any]


CONTENDERS = (
    Contender("flax", "flax", False, {}),
    Contender("flax_donate", "flax", True, {}),
    Contender("flaxgraph", "flaxgraph", False, {}),
    Contender("flaxgraph_undonated", "flaxgraph", False, {"donate_variables": False}),
)


def _library(name: str) -> ModuleType:
    if name == "flax":
        from flax import nnx

        return nnx
    import flaxgraph

    return flaxgraph


def measure_child(case: Case, rounds: int, names: Sequence[str]) -> dict[str, Any]:
    """In this (fresh) process: trace ``case`` on each contender, then compile every
    program ``rounds`` times, round-robin, from scratch each time."""
    import jax

    contenders = [c for c in CONTENDERS if c.name in names]
    traced = {}
    for c in contenders:
        nnx = _library(c.library)
        work = BUILDERS[case.kind](nnx, case.size)
        step = train_step(nnx, work.loss, donate=c.donate_argnames, options=c.options)
        traced[c.name] = step.trace(work.model, work.optimizer, work.x, work.y)
    seconds: dict[str, list[float]] = {c.name: [] for c in contenders}
    texts: dict[str, str] = {}
    for r in range(rounds):
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        if r % 2:
            order.reverse()
        for c in order:
            jax.clear_caches()
            lowered = traced[c.name].lower()
            start = time.perf_counter()
            compiled = lowered.compile()
            seconds[c.name].append(time.perf_counter() - start)
            texts[c.name] = compiled.as_text() or ""
    result: dict[str, Any] = {"case": case.label, "contenders": {}}
    for c in contenders:
        lines = texts[c.name].splitlines()
        result["contenders"][c.name] = {
            "seconds": seconds[c.name],
            "optimized_hlo_instructions": sum(bool(INSTRUCTION.match(x)) for x in lines),
            "aliased_outputs": len(ALIAS.findall(lines[0])) if lines else 0,
        }
    return result


def run_child(case: Case, rounds: int, names: Sequence[str], timeout: float) -> dict[str, Any]:
    """One fresh process measuring ``case``; its JSON result."""
    args = ["--child", case.kind, str(case.size), str(rounds), ",".join(names)]
    return run_json_child("benchmarks.compile_paired", args, f"process for {case.label}", timeout)


def _timed(samples: list[float]) -> list[float]:
    """The rounds after the warm-up (all of them if there is only one)."""
    return samples[1:] or samples


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """Per contender: the median compile and, against ``flax``, the median per-round
    ratio with its interquartile range."""
    contenders = record["contenders"]
    summary: dict[str, Any] = {"case": record["case"], "contenders": {}}
    base = _timed(contenders[BASE]["seconds"]) if BASE in contenders else None
    for name, m in contenders.items():
        timed = _timed(m["seconds"])
        entry: dict[str, Any] = {
            "median": statistics.median(timed),
            "optimized_hlo_instructions": m["optimized_hlo_instructions"],
            "aliased_outputs": m["aliased_outputs"],
        }
        if base is not None:
            ratios = [x / b for x, b in zip(timed, base, strict=True)]
            entry["ratio"] = statistics.median(ratios)
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            entry["ratio_q1"], entry["ratio_q3"] = quartiles[0], quartiles[-1]
        summary["contenders"][name] = entry
    return summary


def table(summaries: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """The printed table: a row per case and contender."""
    compare = BASE in names
    headers = ["case", "contender", "compile (s)", "instructions", "aliased outputs"]
    if compare:
        headers += ["/ flax", "q1-q3"]
    rows = []
    for s in summaries:
        for name in names:
            m = s["contenders"][name]
            row = [s["case"], name, format_number(m["median"])]
            row += [str(m["optimized_hlo_instructions"]), str(m["aliased_outputs"])]
            if compare:
                row += [
                    format_number(m["ratio"], 3),
                    f"{format_number(m['ratio_q1'], 3)}-{format_number(m['ratio_q3'], 3)}",
                ]
            rows.append(row)
    return format_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; see the module docstring for the options."""
    parser = base_parser(__doc__.splitlines()[0], "compile_paired.json")
    add_case_options(parser)
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds one case's process may take"
    )
    parser.add_argument("--child", nargs=4, metavar=("KIND", "SIZE", "ROUNDS", "NAMES"))
    args = parser.parse_args(argv)

    if args.child is not None:
        kind, size, rounds, names = args.child
        record = measure_child(parse_case(kind, size), int(rounds), names.split(","))
        print(json.dumps(record), flush=True)
        return 0

    cases = selected_cases(args)
    rounds = args.repeat or (2 if args.quick else 7)
    has_flax = flax_available(args)
    names = [c.name for c in CONTENDERS if has_flax or c.library == "flaxgraph"]
    if not has_flax:
        print("Flax NNX skipped (not installed): flaxgraph only, no ratios.")

    start_load = load_average()
    warning = busy_warning()
    summaries = []
    records = []
    for case in cases:
        record = run_child(case, rounds, names, args.timeout)
        records.append(record)
        summaries.append(summarize(record))
        print(f"  {case.label}: done, load {format_number(load_average(), 1)}", file=sys.stderr)
    end_load = load_average()
    path = write_json(
        json_path_from_args(args),
        {
            "benchmark": "compile_paired",
            "environment": environment(),
            "rounds": rounds,
            "load_average": {"start": start_load, "end": end_load},
            "results": summaries,
            "runs": records,
        },
    )
    print(
        f"\nXLA compile of the first train step, seconds (median of {rounds - 1 or 1} timed "
        "rounds after a warm-up; all contenders in one process per case, round-robin, from "
        "scratch each time).\n/ flax: median of per-round ratios against Flax's default "
        "step, q1-q3 their interquartile range; instructions: the optimized module's; "
        "aliased outputs: outputs written into a donated input."
    )
    print(table(summaries, names))
    print_load(start_load, end_load, warning)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
