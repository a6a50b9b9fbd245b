"""MaxText's trainer and inference engine, from its release, on real Flax and on flaxgraph.

The MaxText scenarios of the client contract (``tests/clients/contract.py`` calls :func:`check`;
alone: ``python tests/clients/maxtext_trainer.py [--subset all|ci]``). Everything runs from the
``maxtext`` release installed in ``.venv-clients-maxtext`` (``maxtext-requirements.txt``): the
configuration file is the package's own ``configs/decoupled_base_test.yml`` and the tokenizer
path its ``assets/tokenizers/tokenizer.llama2`` (found in the installed package; the data is
synthetic, so no token is read from it), with ``DECOUPLE_GCLOUD=TRUE`` on CPU. The model is
tiny (``TINY``: 2 decoder layers, embedding 64, vocabulary 256, sequence 64,
``init_weights_seed`` 0). Each run is its own process: real Flax as ``python -m
maxtext.trainers.pre_train.train ...``, flaxgraph as ``python -m flaxgraph.run -m
maxtext.trainers.pre_train.train ...`` (``flax.nnx`` bound by the drop-in).

Scenarios (``SCENARIOS``), each with ``scan_layers=True`` (MaxText's default: the decoder
stack scanned through ``nnx.vmap``/``nnx.scan``) and ``scan_layers=False`` (one module per
layer):

* ``trainer``: ``maxtext.trainers.pre_train.train`` twice per library: ``steps=3`` with a
  synchronous checkpoint every 2 steps (steps 0, 1, 2; checkpoints of steps 0 and 2), then
  ``steps=5`` with the same run name, which restores the step-2 checkpoint ("restoring from this
  run's directory step 2") and runs steps 3 and 4. Agreed when both libraries complete, the
  second run of each restored step 2, the loss of every step (MaxText's own ``metrics_file``,
  full float32) is equal at ``rtol`` 1e-5, and the two step-2 checkpoints hold the same tree
  (paths, shapes, dtypes, values; key arrays by their key data), read back with orbax.
* ``decode``: MaxText's serving engine on the same tiny model (``maxtext_decode.py``: prefill of
  a 12-token prompt, then 6 greedy ``generate`` steps). Agreed when the generated tokens are equal
  and the logits of every position equal at ``rtol`` 1e-5.

``SUBSETS["ci"]`` (``make clients-ci``) runs the scanned trainer and the scanned decode; ``all``
runs the four scenarios. The two libraries' processes of a step run side by side (``jobs``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from environments import CLIENTS, ENVIRONMENTS, REPO, build  # noqa: E402
from scenario_outcomes import ScenarioOutcome  # noqa: E402

OUTPUTS = REPO / "outputs" / "clients" / "maxtext"
RTOL = 1e-5
LIBRARIES = ("flax", "flaxgraph")
TIMEOUT = 1200  # seconds per process

# The tiny decoupled configuration (MaxText's key=value overrides of decoupled_base_test.yml).
TINY = (
    "dataset_type=synthetic",
    "base_emb_dim=64",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "base_mlp_dim=128",
    "base_num_decoder_layers=2",
    "head_dim=16",
    "vocab_size=256",
    "max_target_length=64",
    "per_device_batch_size=1",
    "log_period=1",
    "learning_rate_schedule_steps=5",
    "init_weights_seed=0",
    "enable_goodput_recording=False",
    "monitor_goodput=False",
    "skip_jax_distributed_system=True",
    "attention=dot_product",
)
CHECKPOINTS = ("enable_checkpointing=True", "async_checkpointing=False", "checkpoint_period=2")
DECODE = ("max_prefill_predict_length=16", "decode_sampling_strategy=greedy")


class Scenario(NamedTuple):
    """One MaxText scenario: what it runs and with which layer layout."""

    kind: str  # "trainer" or "decode"
    scan_layers: bool

    @property
    def name(self) -> str:
        return f"{self.kind}, scan_layers={self.scan_layers}"

    @property
    def folder(self) -> str:
        return f"{self.kind}_{'scanned' if self.scan_layers else 'unscanned'}"


SCENARIOS = [Scenario(k, s) for k in ("trainer", "decode") for s in (True, False)]
SUBSETS = {
    "all": SCENARIOS,
    "ci": [Scenario("trainer", True), Scenario("decode", True)],
}


class Package(NamedTuple):
    """Where the installed MaxText release keeps what the scenarios read."""

    version: str
    config: Path  # configs/decoupled_base_test.yml inside the installed package
    tokenizer: Path  # assets/tokenizers/tokenizer.llama2 inside the installed package


def package(venv: Path) -> Package:
    """The installed ``maxtext`` package of ``venv`` (its version, config file and tokenizer).

    Raises:
      SystemExit: MaxText is not installed there, or the release lacks a file the scenarios need.
    """
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, importlib.util as u\n"
            "print(m.version('maxtext')); print(u.find_spec('maxtext').submodule_search_locations[0])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise SystemExit(f"maxtext: no maxtext package in {venv}: {done.stderr.strip()[-500:]}")
    version, where = done.stdout.split()
    found = Package(
        version,
        Path(where) / "configs" / "decoupled_base_test.yml",
        Path(where) / "assets" / "tokenizers" / "tokenizer.llama2",
    )
    for path in (found.config, found.tokenizer):
        if not path.is_file():
            raise SystemExit(
                f"maxtext: the installed release {version} has no {path}; the contract needs a "
                "release that ships its configs and assets (pin one in maxtext-requirements.txt)."
            )
    return found


class Run(NamedTuple):
    """One process of a MaxText scenario and what it reported."""

    library: str  # "flax" or "flaxgraph"
    returncode: int
    seconds: float
    log: Path


def environ() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **CLIENTS["maxtext"].environ()}
    env.pop("XLA_FLAGS", None)
    return env


def launch(venv: Path, library: str, program: list[str], out: Path, name: str) -> Run:
    """Runs ``program`` (after ``python``) in its own process in ``out``; flaxgraph by the drop-in."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{name}.log"
    drop_in = ["-m", "flaxgraph.run"] if library == "flaxgraph" else []
    start = time.time()
    with log.open("w", encoding="utf-8") as sink:
        try:
            returncode = subprocess.run(
                [str(venv / "bin" / "python"), *drop_in, *program],
                cwd=out,
                env=environ(),
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=TIMEOUT,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = -9
    return Run(library, returncode, time.time() - start, log)


T = TypeVar("T")


def side_by_side(jobs: int, work: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Calls each of ``work``'s functions (library -> no-argument callable), ``jobs`` at a time."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {library: pool.submit(fn) for library, fn in work.items()}
        return {library: future.result() for library, future in futures.items()}


def trainer_program(found: Package, scan_layers: bool, *overrides: str) -> list[str]:
    """``python``'s arguments for MaxText's trainer on the tiny model, ``overrides`` appended."""
    return [
        "-m",
        "maxtext.trainers.pre_train.train",
        str(found.config),
        *TINY,
        f"tokenizer_path={found.tokenizer}",
        f"scan_layers={scan_layers}",
        *overrides,
    ]


def metrics_of(metrics: Path, key: str) -> dict[int, float]:
    """step -> the value of ``key``, from MaxText's metrics file (JSON lines); {} if absent."""
    values = {}
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        record = json.loads(line)
        values[int(record["step"])] = float(record.get(key, math.nan))
    return values


def losses_of(metrics: Path) -> dict[int, float]:
    """step -> loss, from MaxText's metrics file."""
    return metrics_of(metrics, "learning/loss")


def restored_step(log: Path) -> int | None:
    restored = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "restoring from this run's directory step" in line:
            restored = int(line.rsplit("step", 1)[1])
    return restored


COMPARE = """
import json, sys
import jax, numpy as np
import orbax.checkpoint as ocp

def leaves(path):
    tree = ocp.PyTreeCheckpointer().restore(path)
    out = {}
    for keys, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out[jax.tree_util.keystr(keys)] = np.asarray(leaf)
    return out

a, b = leaves(sys.argv[1]), leaves(sys.argv[2])
problems = [f"only in the real Flax checkpoint: {k}" for k in sorted(a.keys() - b.keys())]
problems += [f"only in flaxgraph's checkpoint: {k}" for k in sorted(b.keys() - a.keys())]
for k in sorted(a.keys() & b.keys()):
    x, y = a[k], b[k]
    if x.shape != y.shape or x.dtype != y.dtype:
        problems.append(f"{k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
    elif not np.allclose(x, y, rtol=1e-5, atol=0, equal_nan=True):
        problems.append(f"{k}: values differ (max |diff| {np.max(np.abs(x - y))})")
print(json.dumps({"leaves": len(a), "problems": problems}))
"""


def compare_checkpoints(
    venv: Path, flax_items: Path, flaxgraph_items: Path
) -> tuple[int, list[str]]:
    """The number of leaves and the differences between two orbax checkpoints' trees."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", COMPARE, str(flax_items), str(flaxgraph_items)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )
    if done.returncode != 0:
        return 0, [f"reading the checkpoints failed: {done.stderr.strip().splitlines()[-1:]}"]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return int(result["leaves"]), list(result["problems"])


def run_trainer(
    venv: Path, found: Package, scenario: Scenario, out: Path, jobs: int
) -> tuple[list[str], str]:
    """The trainer scenario: (what differs, the summary of what was compared)."""
    base = trainer_program(found, scenario.scan_layers, *CHECKPOINTS, "run_name=tiny")

    def both_runs(library: str) -> list[Run]:
        where = out / library
        runs = []
        for name, steps in (("steps_0_2", 3), ("steps_3_4", 5)):
            extra = [
                f"steps={steps}",
                f"base_output_directory={where}",
                f"metrics_file={where / (name + '.jsonl')}",
            ]
            runs.append(launch(venv, library, [*base, *extra], where, name))
        return runs

    runs = side_by_side(jobs, {lib: (lambda lib=lib: both_runs(lib)) for lib in LIBRARIES})
    problems, losses = [], {}
    for library in LIBRARIES:
        first, second = runs[library]
        for run in (first, second):
            if run.returncode != 0:
                problems.append(f"{library}: the trainer exited {run.returncode}; see {run.log}")
        if restored_step(second.log) != 2:
            problems.append(f"{library}: the second run did not restore step 2; see {second.log}")
        where = out / library
        losses[library] = {
            **losses_of(where / "steps_0_2.jsonl"),
            **losses_of(where / "steps_3_4.jsonl"),
        }
        if sorted(losses[library]) != list(range(5)):
            problems.append(f"{library}: losses for steps {sorted(losses[library])}, not 0-4")
    print(f"    {'step':>4s} {'real Flax':>12s} {'flaxgraph':>12s}", flush=True)
    for step in range(5):
        a, b = (losses[lib].get(step, math.nan) for lib in LIBRARIES)
        print(f"    {step:4d} {a:12.7f} {b:12.7f}", flush=True)
        if not math.isclose(a, b, rel_tol=RTOL):
            problems.append(f"step {step}: loss {b!r} on flaxgraph, {a!r} on real Flax")
    items = [out / lib / "tiny" / "checkpoints" / "2" / "items" for lib in LIBRARIES]
    leaves = 0
    if all(path.is_dir() for path in items):
        leaves, differences = compare_checkpoints(venv, *items)
        problems += differences
    else:
        problems.append(f"a step-2 checkpoint is missing: {[str(p) for p in items]}")
    shown = ", ".join(f"{losses['flax'].get(s, math.nan):.6f}" for s in range(5))
    return (
        problems,
        f"losses of steps 0-4 equal ({shown}); step-2 checkpoint: {leaves} leaves equal",
    )


def run_decode(
    venv: Path, found: Package, scenario: Scenario, out: Path, jobs: int
) -> tuple[list[str], str]:
    """The decode scenario: (what differs, the summary of what was compared)."""
    program = str(HERE / "maxtext_decode.py")
    config = [
        str(found.config),
        *TINY,
        f"tokenizer_path={found.tokenizer}",
        f"scan_layers={scenario.scan_layers}",
        *DECODE,
        "run_name=decode",
    ]

    def one(library: str) -> Run:
        where = out / library
        args = [program, str(where / "decode.json"), *config, f"base_output_directory={where}"]
        return launch(venv, library, args, where, "decode")

    runs = side_by_side(jobs, {lib: (lambda lib=lib: one(lib)) for lib in LIBRARIES})
    problems, records = [], {}
    for library in LIBRARIES:
        run = runs[library]
        result = out / library / "decode.json"
        if run.returncode != 0 or not result.exists():
            problems.append(f"{library}: decode exited {run.returncode}; see {run.log}")
        else:
            records[library] = json.loads(result.read_text())
    if problems:
        return problems, ""
    a, b = records["flax"], records["flaxgraph"]
    if b["flax.nnx"] != "flaxgraph" or a["flax.nnx"] != "flax.nnx":
        problems.append(f"flax.nnx was {a['flax.nnx']} / {b['flax.nnx']}, not flax.nnx / flaxgraph")
    print(f"    tokens: real Flax {a['tokens']}, flaxgraph {b['tokens']}", flush=True)
    if a["tokens"] != b["tokens"]:
        problems.append(f"generated tokens {b['tokens']} on flaxgraph, {a['tokens']} on real Flax")
    worst = 0.0
    for position, (x, y) in enumerate(zip(a["logits"], b["logits"], strict=True)):
        diff = [abs(u - v) - RTOL * abs(u) for u, v in zip(x, y, strict=True)]
        if max(diff) > 0:
            problems.append(f"logits of position {position} differ (max |diff| {max(diff):.3g})")
        worst = max(worst, max(abs(u - v) for u, v in zip(x, y, strict=True)))
    summary = (
        f"{len(a['tokens'])} greedy tokens equal ({a['tokens']}); logits of "
        f"{len(a['logits'])} positions x {len(a['logits'][0])} equal (max |diff| {worst:.3g})"
    )
    return problems, summary


RUNNERS = {"trainer": run_trainer, "decode": run_decode}


def check(venv: Path, subset: str, jobs: int = 2) -> list[ScenarioOutcome]:
    """Runs the MaxText scenarios of ``subset`` ("all" or "ci") from the release in ``venv``.

    Each scenario runs on real Flax 0.12.8 and on flaxgraph (``flax.nnx`` bound by the drop-in),
    ``jobs`` processes at a time; its outcome is agreed when the numbers (and the checkpoint
    trees) agree. Outputs and logs go to ``outputs/clients/maxtext/<scenario>/<library>/``.

    Raises:
      KeyError: ``subset`` is neither "all" nor "ci".
      SystemExit: the venv has no MaxText release with its configs and assets.
    """
    found = package(venv)
    outcomes = []
    for scenario in SUBSETS[subset]:
        out = OUTPUTS / scenario.folder
        shutil.rmtree(out, ignore_errors=True)
        print(f"  maxtext {found.version}: {scenario.name}", flush=True)
        start = time.time()
        problems, summary = RUNNERS[scenario.kind](venv, found, scenario, out, jobs)
        seconds = time.time() - start
        detail = "; ".join(problems) if problems else summary
        outcomes.append(ScenarioOutcome("maxtext", scenario.name, not problems, detail, seconds))
        print(
            f"    {'agreed' if not problems else 'DIFFERS'} in {seconds:.0f} s: {detail}",
            flush=True,
        )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=sorted(SUBSETS), default="all")
    parser.add_argument("--jobs", type=int, default=2, help="processes at a time")
    args = parser.parse_args(argv)
    start = time.time()
    venv = build(ENVIRONMENTS["maxtext"])
    print(f"maxtext: environment ready in {time.time() - start:.0f} s", flush=True)
    outcomes = check(venv, args.subset, args.jobs)
    failed = [o for o in outcomes if not o.agreed]
    print(f"maxtext: {len(outcomes) - len(failed)} of {len(outcomes)} scenarios agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
