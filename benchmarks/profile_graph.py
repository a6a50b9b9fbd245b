"""cProfile of flaxgraph's ``split``, ``merge`` and ``update`` on the benchmark MLP.

Run from the repository root::

  python -m benchmarks.profile_graph                      # all ops, L=256
  python -m benchmarks.profile_graph --op merge --top 15 --sort cumulative

For each op, prints the functions that take the most time over ``--calls`` calls,
with the per-call and per-graph-object cost of each line's ``tottime``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Sequence

import flaxgraph
from benchmarks.graph import OPS, FgMLP, Library, count_graph_objects, make_arrays


def profile_op(library: Library, op: str, calls: int) -> pstats.Stats:
    """Runs ``op`` of ``library`` ``calls`` times under cProfile; returns the stats."""
    fn = library.calls()[op]
    for _ in range(3):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    return pstats.Stats(profiler)


def report(stats: pstats.Stats, calls: int, objects: int, top: int, sort: str) -> str:
    """The ``top`` lines of ``stats`` (sorted by ``sort``) with µs per call and per object."""
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats(sort).print_stats(top)
    total = stats.total_tt  # type: ignore[attr-defined]
    head = (
        f"total {total / calls * 1e6:.0f} µs per call, {total / calls / objects * 1e6:.2f} µs "
        f"per graph object ({objects} objects; profiler overhead included)"
    )
    body = out.getvalue()
    start = body.find("   ncalls")
    return head + "\n" + (body[start:] if start >= 0 else body)


def main(argv: Sequence[str] | None = None) -> int:
    """Profiles the chosen ops and prints the hot spots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=256, help="model size L (default 256)")
    parser.add_argument("--op", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--calls", type=int, default=200, help="calls profiled per op")
    parser.add_argument("--top", type=int, default=20, help="lines printed per op")
    parser.add_argument(
        "--sort", default="tottime", help="pstats sort key (tottime, cumulative, ncalls…)"
    )
    args = parser.parse_args(argv)
    arrays = make_arrays(args.layers)
    library = Library("flaxgraph", flaxgraph, FgMLP(arrays))
    library.check(arrays)
    objects = count_graph_objects(flaxgraph, library.model)
    for op in args.op:
        stats = profile_op(library, op, args.calls)
        print(f"\n=== flaxgraph.{op}, L={args.layers} ===")
        print(report(stats, args.calls, objects, args.top, args.sort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
