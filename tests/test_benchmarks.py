"""The benchmarks run: ``python -m benchmarks.graph --quick``, ``python -m
benchmarks.transforms --quick`` and the others complete and print their tables. Only the output's
shape is checked, never the timings. The comparators (Flax NNX, Equinox) are
optional: one run of each hides them to check they are skipped."""

from __future__ import annotations

import inspect
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


def _benchmark(tmp_path: Path, *args: str) -> tuple[str, dict]:
    """Runs ``python *args --json FILE`` from the repository root (hard timeout) and
    returns its stdout and the JSON results it wrote."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def _run(tmp_path: Path, *prefix: str) -> tuple[str, dict]:
    return _benchmark(tmp_path, *prefix, "--quick")


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


# -- benchmarks.transforms ------------------------------------------------------------------

TRANSFORM_WORKLOADS = {  # workload -> model sizes run by --quick
    "train": ("1", "8"),
    "forward": ("1", "8"),
    "vmap": ("1", "8"),
    "vmap_jit": ("1", "8"),
    "scan": ("8",),
    "scan_jit": ("8",),
    "shard_map": ("1", "8"),
}

# Runs the transforms benchmark with flax and equinox made unimportable.
TRANSFORMS_WITHOUT_COMPARATORS = (
    "import sys\n"
    "for name in ('flax', 'flax.nnx', 'equinox'): sys.modules[name] = None\n"
    "from benchmarks.transforms import main; sys.exit(main(sys.argv[1:]))"
)


def _check_transform_tables(stdout: str, results: dict, contenders: set[str]) -> None:
    lines = stdout.splitlines()
    for workload, sizes in TRANSFORM_WORKLOADS.items():
        title = next(i for i, line in enumerate(lines) if line.startswith(f"{workload}: "))
        header = lines[title + 1].split()
        assert header[:2] == ["L", "jax"]
        assert "goal" in header and "spread" in header
        for name in contenders - {"jax"}:
            assert name in header
        assert ("fg/jax" in header) and ("flaxgraph" in header)
        assert set(lines[title + 2].replace(" ", "")) == {"-"}
        rows = [line.split() for line in lines[title + 3 : title + 3 + len(sizes)]]
        assert tuple(r[0] for r in rows) == sizes
        assert all(len(r) == len(header) + 1 for r in rows)  # "1.2 ok": two words
    assert "load average" in stdout
    assert results["benchmark"] == "transforms"
    records = results["results"]
    assert [(r["workload"], str(r["layers"])) for r in records] == [
        (w, n) for w, sizes in TRANSFORM_WORKLOADS.items() for n in sizes
    ]
    for record in records:
        assert set(record["contenders"]) == contenders
        assert set(record["ratio_to_jax"]) == contenders - {"jax"}
        assert all(r > 0 for r in record["ratio_to_jax"].values())
        assert isinstance(record["goal_met"], bool)


def _run_transforms(tmp_path: Path, *prefix: str) -> tuple[str, dict]:
    return _benchmark(tmp_path, *prefix, "--quick")


def test_transforms_benchmark_quick_runs(tmp_path: Path) -> None:
    nnx = pytest.importorskip("flax.nnx")
    pytest.importorskip("equinox")
    stdout, results = _run_transforms(tmp_path, "-m", "benchmarks.transforms")
    contenders = {"jax", "flaxgraph", "flaxgraph_tree", "nnx", "eqx"}
    if "graph" in inspect.signature(nnx.jit).parameters:  # Flax's tree mode
        contenders.add("nnx_tree")
    _check_transform_tables(stdout, results, contenders)


def test_transforms_benchmark_quick_skips_missing_comparators(tmp_path: Path) -> None:
    stdout, results = _run_transforms(tmp_path, "-c", TRANSFORMS_WITHOUT_COMPARATORS)
    assert "Flax NNX skipped" in stdout and "Equinox skipped" in stdout
    _check_transform_tables(stdout, results, {"jax", "flaxgraph", "flaxgraph_tree"})


PYTREE_WITHOUT_COMPARATORS = (
    "import sys; sys.modules['flax'] = None; sys.modules['flax.nnx'] = None; "
    "sys.modules['equinox'] = None; "
    "from benchmarks.pytree import main; sys.exit(main(sys.argv[1:]))"
)


def _check_pytree_tables(stdout: str, results: dict, names: set[str]) -> None:
    assert "x the floor" in stdout and "Per object at L=8" in stdout
    workloads = {r["workload"] for r in results["records"]}
    assert workloads == {
        "module_train",
        "module_forward",
        "split_train",
        "split_forward",
        "ref_train",
        "ref_forward",
    }
    for r in results["records"]:
        assert r["layers"] in (1, 8)
        if r["workload"].startswith("ref"):
            assert r["general_calls_after_first"] <= 1  # the fast path took the rest
        else:
            expected = names - ({"eqx"} if r["workload"].startswith("split") else set())
            assert set(r["ratios"]) == expected
    assert "flatten/flaxgraph" in results["per_object"]["us_per_object"]
    floor = results["protocol_floor"]
    assert set(floor) == {"python node", "C-level flatten", "dataclass kind", "dict", "tuple"}
    assert all(row["flatten"] > 0 and row["unflatten"] > 0 for row in floor.values())
    assert "JAX's pytree protocol" in stdout


@pytest.mark.parametrize("comparators", [True, False])
def test_pytree_benchmark_quick_runs(tmp_path: Path, comparators: bool) -> None:
    if comparators:
        pytest.importorskip("flax.nnx")
        pytest.importorskip("equinox")
        prefix = ["-m", "benchmarks.pytree"]
    else:
        prefix = ["-c", PYTREE_WITHOUT_COMPARATORS]
    stdout, results = _benchmark(tmp_path, *prefix, "--quick")
    names = {"flaxgraph", "nnx", "eqx"} if comparators else {"flaxgraph"}
    _check_pytree_tables(stdout, results, names)


def test_baseline_benchmark_quick_runs(tmp_path: Path) -> None:
    """This checkout against itself (a renamed copy), two workloads."""
    stdout, results = _benchmark(
        tmp_path, "-m", "benchmarks.baseline", str(ROOT), "--quick", "--layers", "1",
        "--workloads", "forward", "eager",
    )  # fmt: skip
    assert "this / baseline" in stdout
    records = results["records"]
    assert [(r["workload"], r["layers"]) for r in records] == [("forward", 1), ("eager", 1)]
    assert all(r["ratio"] > 0 for r in records)


# -- benchmarks.first_step ------------------------------------------------------------------

FIRST_STEP_WITHOUT_FLAX = (
    "import sys; sys.modules['flax'] = None; sys.modules['flax.nnx'] = None; "
    "from benchmarks.first_step import main; sys.exit(main(sys.argv[1:]))"
)


def _run_first_step(tmp_path: Path, prefix: list[str], cases: list[str]) -> tuple[str, dict]:
    return _benchmark(tmp_path, *prefix, "--quick", "--cases", *cases)


def _check_first_step(stdout: str, results: dict, labels: list[str], libraries: set[str]) -> None:
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("case "))
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    rows = [line.split() for line in lines[header + 2 : header + 2 + len(labels)]]
    assert [" ".join(r[:2]) for r in rows] == labels
    assert results["benchmark"] == "first_step"
    for summary in results["results"]:
        for library in libraries:
            stages = summary[library]["seconds"]
            assert set(stages) == {"trace", "lower", "compile", "run"}
            assert all(t > 0 for t in stages.values())
            assert summary[library]["stablehlo_ops"] > 0
        assert ("ratios" in summary) == ("flax" in libraries)
        assert ("ratios_donate" in summary) == ("flax_donate" in libraries)
    assert [s["case"] for s in results["results"]] == labels


def test_first_step_benchmark_quick_runs(tmp_path: Path) -> None:
    """Every contender, each case in its own processes: the same first loss on all."""
    pytest.importorskip("flax.nnx")
    stdout, results = _run_first_step(tmp_path, ["-m", "benchmarks.first_step"], ["blocks"])
    _check_first_step(stdout, results, ["blocks 2"], {"flax", "flax_donate", "flaxgraph"})
    for summary in results["results"]:
        assert summary["same_loss"], summary
        assert summary["flax_donate"]["losses"] == summary["flaxgraph"]["losses"]
        assert all(r > 0 for r in summary["ratios"].values())
        assert all(r > 0 for r in summary["ratios_donate"].values())


def test_first_step_benchmark_quick_skips_missing_flax(tmp_path: Path) -> None:
    stdout, results = _run_first_step(tmp_path, ["-c", FIRST_STEP_WITHOUT_FLAX], ["ensemble"])
    assert "Flax NNX skipped" in stdout
    _check_first_step(stdout, results, ["ensemble 2"], {"flaxgraph"})


# -- benchmarks.compile_paired --------------------------------------------------------------


def test_compile_paired_benchmark_quick_runs(tmp_path: Path) -> None:
    """Every contender compiled in one process: the table, positive times and ratios, and
    the programs' shapes (flaxgraph's default step aliases its state as Flax's donating
    step does, with the same instruction count; undonated, neither aliases anything)."""
    pytest.importorskip("flax.nnx")
    stdout, results = _benchmark(
        tmp_path, "-m", "benchmarks.compile_paired", "--quick", "--cases", "ensemble"
    )
    assert "flaxgraph_undonated" in stdout and "q1-q3" in stdout
    assert results["benchmark"] == "compile_paired" and results["rounds"] == 2
    (summary,) = results["results"]
    assert summary["case"] == "ensemble 2"
    records = summary["contenders"]
    assert set(records) == {"flax", "flax_donate", "flaxgraph", "flaxgraph_undonated"}
    for record in records.values():
        assert record["median"] > 0 and record["ratio"] > 0
        assert record["ratio_q1"] <= record["ratio"] <= record["ratio_q3"]
        assert record["optimized_hlo_instructions"] > 0
    assert records["flax"]["ratio"] == 1.0
    assert records["flax"]["aliased_outputs"] == 0
    assert records["flaxgraph_undonated"]["aliased_outputs"] == 0
    assert records["flaxgraph"]["aliased_outputs"] > 0
    assert records["flax_donate"]["aliased_outputs"] >= records["flaxgraph"]["aliased_outputs"]
    assert (
        records["flaxgraph"]["optimized_hlo_instructions"]
        == records["flax_donate"]["optimized_hlo_instructions"]
    )
    (run,) = results["runs"]
    assert all(len(r["seconds"]) == 2 for r in run["contenders"].values())


# -- benchmarks.memory ----------------------------------------------------------------------


def test_memory_benchmark_quick_runs(tmp_path: Path) -> None:
    """The smallest train step on every contender: the table, and the aliasing it shows
    (flaxgraph by default and the floor alias the whole state, Flax's
    default nothing)."""
    pytest.importorskip("flax.nnx")
    stdout, results = _benchmark(tmp_path, "-m", "benchmarks.memory", "--quick", "--cases", "adam")
    assert "aliased/state" in stdout
    records = {r["contender"]: r for r in results["results"]}
    assert set(records) == {"flaxgraph", "flax", "flax_donate", "floor"}
    assert all(r["case"] == "adam" and r["peak_rss_kb"] > 0 for r in records.values())
    assert records["flaxgraph"]["alias"] >= 0.95 * records["flaxgraph"]["state"]
    assert records["flax"]["alias"] == 0
