"""MaxText's own trainer end to end, on flaxgraph and on real Flax: the same losses, the same checkpoint.

``make clients`` runs this after MaxText's test files (``run_clients.py``; alone:
``python tests/clients/maxtext_trainer.py``). It runs ``maxtext.trainers.pre_train.train``, unchanged,
from MaxText's tree in ``.venv-clients-maxtext`` (``DECOUPLE_GCLOUD=TRUE``, CPU) with a tiny decoupled
configuration (``TINY``: 2 decoder layers, embedding 64, vocabulary 256, sequence 64, synthetic data,
``init_weights_seed`` 0), twice per library, each run in its own process:

1. ``steps=3`` with checkpointing to a local folder every 2 steps (synchronous): steps 0, 1, 2,
   checkpoints of steps 0 and 2;
2. ``steps=5`` with the same run name: MaxText restores the step-2 checkpoint ("restoring from this
   run's directory step 2") and runs steps 3 and 4.

Real Flax runs as ``python -m maxtext.trainers.pre_train.train ...``, flaxgraph as ``python -m
flaxgraph.run -m maxtext.trainers.pre_train.train ...`` (``flax.nnx`` bound by the drop-in). The
per-step losses come from MaxText's own ``metrics_file`` (JSON lines, full float32 precision).

Checked: both libraries complete the five steps; the second run of each restored step 2; flaxgraph's
loss at each step equals real Flax's (``rtol`` 1e-5), steps 3 and 4 being computed from the restored
checkpoint; and the step-2 checkpoints the two libraries wrote hold the same tree: the same paths,
shapes, dtypes and values (key arrays compared by their key data), read back with orbax.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from environments import CLIENTS, ENVIRONMENTS, REPO, build  # noqa: E402

OUTPUTS = REPO / "outputs" / "clients" / "maxtext_trainer"
RTOL = 1e-5
LIBRARIES = ("flax", "flaxgraph")

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
    "tokenizer_path=src/maxtext/assets/tokenizers/tokenizer.llama2",
)
CHECKPOINTS = ("enable_checkpointing=True", "async_checkpointing=False", "checkpoint_period=2")


class TrainerRun(NamedTuple):
    """One process of MaxText's trainer and what it reported."""

    library: str  # "flax" or "flaxgraph"
    returncode: int
    seconds: float
    losses: dict[int, float]  # step -> loss
    step_seconds: dict[int, float]  # step -> MaxText's own step time
    restored: int | None  # the step MaxText restored from, if it did
    log: Path


def command(venv: Path, library: str, args: list[str]) -> list[str]:
    """The trainer's command line for ``library`` (flaxgraph through ``python -m flaxgraph.run``)."""
    python = str(venv / "bin" / "python")
    trainer = [
        "-m",
        "maxtext.trainers.pre_train.train",
        "src/maxtext/configs/decoupled_base_test.yml",
    ]
    drop_in = ["-m", "flaxgraph.run"] if library == "flaxgraph" else []
    return [python, *drop_in, *trainer, *args]


def train(
    venv: Path, root: Path, library: str, out: Path, name: str, args: list[str], timeout: int
) -> TrainerRun:
    """Runs the trainer once in its own process; the losses from its metrics file."""
    out.mkdir(parents=True, exist_ok=True)
    metrics, log = out / f"{name}.jsonl", out / f"{name}.log"
    metrics.unlink(missing_ok=True)
    args = [*args, f"base_output_directory={out}", f"metrics_file={metrics}"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **CLIENTS["maxtext"].environ(root)}
    env.pop("XLA_FLAGS", None)
    start = time.time()
    with log.open("w", encoding="utf-8") as sink:
        try:
            returncode = subprocess.run(
                command(venv, library, args),
                cwd=root,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = -9
    seconds = time.time() - start
    losses, step_seconds = {}, {}
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        record = json.loads(line)
        step = int(record["step"])
        losses[step] = record["learning/loss"]
        step_seconds[step] = record.get("perf/step_time_seconds", math.nan)
    restored = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "restoring from this run's directory step" in line:
            restored = int(line.rsplit("step", 1)[1])
    return TrainerRun(library, returncode, seconds, losses, step_seconds, restored, log)


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


def compare_checkpoints(venv: Path, flax_items: Path, flaxgraph_items: Path) -> list[str]:
    """Differences between two orbax checkpoints' trees (read back in MaxText's venv)."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", COMPARE, str(flax_items), str(flaxgraph_items)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )
    if done.returncode != 0:
        return [f"reading the checkpoints failed: {done.stderr.strip().splitlines()[-1:]}"]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  step-2 checkpoints: {result['leaves']} leaves compared", flush=True)
    return list(result["problems"])


def check(venv: Path, root: Path, timeout: int = 1800) -> list[str]:
    """Runs both libraries (write at step 2, restore, continue) and returns what differs."""
    shutil.rmtree(OUTPUTS, ignore_errors=True)
    runs: dict[str, list[TrainerRun]] = {}
    for library in LIBRARIES:
        out = OUTPUTS / library
        base = [*TINY, *CHECKPOINTS, "run_name=tiny"]
        first = train(venv, root, library, out, "steps_0_2", [*base, "steps=3"], timeout)
        second = train(venv, root, library, out, "steps_3_4", [*base, "steps=5"], timeout)
        runs[library] = [first, second]
        for run in (first, second):
            print(
                f"  {library}: {run.log.name}: exit {run.returncode} in {run.seconds:.0f} s",
                flush=True,
            )
    problems = []
    losses = {}
    for library, (first, second) in runs.items():
        for run in (first, second):
            if run.returncode != 0:
                problems.append(f"{library}: the trainer exited {run.returncode}; see {run.log}")
        if second.restored != 2:
            problems.append(f"{library}: the second run did not restore step 2 ({second.restored})")
        losses[library] = {**first.losses, **second.losses}
        if sorted(losses[library]) != list(range(5)):
            problems.append(f"{library}: losses for steps {sorted(losses[library])}, not 0-4")
    print(f"  {'step':>4s} {'real Flax':>12s} {'flaxgraph':>12s}")
    for step in range(5):
        a, b = (losses[lib].get(step, math.nan) for lib in LIBRARIES)
        print(f"  {step:4d} {a:12.7f} {b:12.7f}", flush=True)
        if not math.isclose(a, b, rel_tol=RTOL):
            problems.append(f"step {step}: loss {b!r} on flaxgraph, {a!r} on real Flax")
    items = [OUTPUTS / lib / "tiny" / "checkpoints" / "2" / "items" for lib in LIBRARIES]
    if all(path.is_dir() for path in items):
        problems += compare_checkpoints(venv, *items)
    else:
        problems.append(f"a step-2 checkpoint is missing: {[str(p) for p in items]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(os.environ.get("CLIENTS_SRC") or REPO.parent / "shared" / "clients" / "src"),
    )
    args = parser.parse_args(argv)
    src = (args.src if args.src.is_absolute() else REPO / args.src).resolve()
    roots = build(ENVIRONMENTS["maxtext"], [CLIENTS["maxtext"]], src)
    venv = (REPO / ENVIRONMENTS["maxtext"].venv).resolve()
    problems = check(venv, roots["maxtext"])
    for problem in problems:
        print(f"TRAINER: {problem}")
    print("maxtext trainer: OK" if not problems else "maxtext trainer: FAILED (see above)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
