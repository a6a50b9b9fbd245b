"""This checkout's transforms side by side with another checkout's, in one process.

A change to the lifting machine (a new check on the trace path, a hook in
Variable reads) must not slow the calls users repeat. This benchmark imports a
second copy of flaxgraph, from another checkout (e.g. ``/work/main``, or a
``git worktree`` of the commit before a change), under the name
``flaxgraph_baseline`` (a copy of its package with its imports renamed), and
times the ``benchmarks/transforms.py`` workloads with both, interleaved (see
``common.py``), plus an eager forward pass (every layer reads its Params
outside any transform), the train step on a model of Ref-backed Variables
(``ref_train``) and the engine's own ``split``, ``merge`` and ``update`` of the
model (per call; divide by the graph's objects for a per-object cost). The ratio column is this checkout over the baseline,
per round (``paired_ratio``): 1.00 is no change. Samples count this process's CPU
time (``time.process_time``), steadier than wall time on a machine other
processes keep busy. Read the ratios against an A/A run (the checkout against a
copy of itself: ``python benchmarks/baseline.py .``): the renamed copy has measured
up to 15% slower than the imported package on the same code (0.86-0.95 on the
workloads at 64 layers), so a change is a slowdown only above that run's ratios.

  python benchmarks/baseline.py /work/main --layers 8 64

Source: ``benchmarks/transforms.py`` (workloads), ``benchmarks/common.py`` (timing).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax

import flaxgraph
from benchmarks import common, transforms

WORKLOADS = (
    "train",
    "forward",
    "vmap",
    "vmap_jit",
    "scan",
    "scan_jit",
    "eager",
    "ref_train",
    "split",
    "merge",
    "update",
)
ENGINE = ("split", "merge", "update")
"""The engine's own calls on the model, outside any transform: ``split(model)``,
``merge(graphdef, state)`` and ``update(model, state)``."""
_NAME = re.compile(r"\bflaxgraph\b")


def load_baseline(checkout: Path) -> ModuleType:
    """Imports ``checkout/flaxgraph`` as ``flaxgraph_baseline`` (a renamed copy)."""
    target = Path(tempfile.mkdtemp(prefix="flaxgraph-baseline-"))
    shutil.copytree(checkout / "flaxgraph", target / "flaxgraph_baseline")
    for path in (target / "flaxgraph_baseline").rglob("*.py"):
        path.write_text(_NAME.sub("flaxgraph_baseline", path.read_text()))
    sys.path.insert(0, str(target))
    try:
        return importlib.import_module("flaxgraph_baseline")
    finally:
        sys.path.remove(str(target))


def runner(lib: ModuleType, workload: str, num_layers: int) -> Any:
    """The zero-argument call of ``workload`` with ``lib``, blocking on its result."""
    arrays, data = transforms.make_arrays(num_layers), transforms.inputs()
    _, mlp_cls = transforms.nnx_style_classes(lib)
    if workload == "eager":
        model, x = mlp_cls(arrays), data["x"]
        return lambda: model(x).block_until_ready()
    if workload in ENGINE:
        model = mlp_cls(arrays)
        graphdef, state = lib.split(model)
        if workload == "split":
            return lambda: lib.split(model)
        if workload == "merge":
            return lambda: lib.merge(graphdef, state)
        return lambda: lib.update(model, state)
    if workload == "ref_train":  # Ref-backed Variables: the fast path installs new arrays
        with lib.var_defaults(ref=True):
            model = mlp_cls(arrays)
        x = data["x"]

        @lib.jit
        def step(m: Any, x: Any) -> Any:
            def loss(m: Any) -> Any:
                return (m(x) ** 2).mean()

            value, grads = lib.value_and_grad(loss)(m)
            lib.update(m, jax.tree.map(lambda p, g: p - 0.1 * g, lib.state(m, lib.Param), grads))
            return value

        return lambda: step(model, x).block_until_ready()
    return transforms.blocking(transforms.nnx_style(lib, workload, arrays, data))


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0], "baseline.json")
    parser.add_argument("baseline", type=Path, help="the other checkout (holds flaxgraph/)")
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    args = parser.parse_args(argv)
    settings = common.settings_from_args(args)
    baseline = load_baseline(args.baseline)
    rows, records = [], []
    for workload in args.workloads:
        for num_layers in args.layers:
            timings = common.measure(
                {
                    "baseline": runner(baseline, workload, num_layers),
                    "this": runner(flaxgraph, workload, num_layers),
                },
                settings,
                clock=time.process_time,  # this process's CPU time: steadier on a busy machine
            )
            b, t = timings["baseline"], timings["this"]
            records.append(
                {
                    "workload": workload,
                    "layers": num_layers,
                    "baseline": b.to_json(),
                    "this": t.to_json(),
                    "ratio": common.paired_ratio(t, b),
                }
            )
            rows.append(
                [
                    workload,
                    str(num_layers),
                    f"{b.median * 1e6:.1f}",
                    f"{t.median * 1e6:.1f}",
                    f"{common.paired_ratio(t, b):.2f}",
                ]
            )
            print(f"  {workload} L={num_layers} done", file=sys.stderr, flush=True)
    print(f"baseline: {args.baseline.resolve()}; this: {Path(flaxgraph.__file__).parent.parent}")
    print(
        common.format_table(
            ["workload", "layers", "baseline µs", "this µs", "this / baseline"], rows
        )
    )
    path = common.json_path_from_args(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"baseline": str(args.baseline), "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
