"""The benchmarks run: ``python -m benchmarks.graph --quick`` completes and prints its
table. Only the output's shape is checked, never the timings. The comparators (Flax
NNX) are optional: one run hides them to check they are skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OPS = ("split", "merge", "update")

# Runs the benchmark with `flax` made unimportable, as if the bench extra were missing.
WITHOUT_FLAX = (
    "import sys; sys.modules['flax'] = None; sys.modules['flax.nnx'] = None; "
    "from benchmarks.graph import main; sys.exit(main(sys.argv[1:]))"
)


def _run(tmp_path: Path, *prefix: str) -> tuple[str, dict]:
    out = tmp_path / "graph.json"
    proc = subprocess.run(
        [sys.executable, *prefix, "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def _check_table(stdout: str, results: dict) -> None:
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["op", "L", "objects"])
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    for name in ("floor", "flaxgraph", "nnx", "fg/nnx"):
        assert name in lines[header].split()
    rows = [line.split() for line in lines[header + 2 : header + 2 + 2 * len(OPS)]]
    assert [(r[0], r[1]) for r in rows] == [(op, str(n)) for op in OPS for n in (1, 8)]
    # 3L + 1 graph objects: the root, L Linear modules and 2L Params.
    assert [r[2] for r in rows] == ["4", "25"] * len(OPS)
    assert results["benchmark"] == "graph"
    assert len(results["results"]) == 2 * len(OPS)


def test_graph_benchmark_quick_runs(tmp_path: Path) -> None:
    pytest.importorskip("flax")
    stdout, results = _run(tmp_path, "-m", "benchmarks.graph")
    _check_table(stdout, results)
    for record in results["results"]:
        assert set(record["contenders"]) == {"flaxgraph", "nnx"}
        assert record["ratio_flaxgraph_over_nnx"] > 0


def test_graph_benchmark_quick_skips_missing_comparators(tmp_path: Path) -> None:
    stdout, results = _run(tmp_path, "-c", WITHOUT_FLAX)
    assert "Flax NNX skipped" in stdout
    _check_table(stdout, results)
    for record in results["results"]:
        assert set(record["contenders"]) == {"flaxgraph"}
        assert record["ratio_flaxgraph_over_nnx"] is None
