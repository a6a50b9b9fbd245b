"""``make clients``: Tunix's, qwix's and MaxText's own test suites on flaxgraph, as a contract.

Tunix (google/tunix), qwix (google/qwix) and MaxText (AI-Hypercomputer/maxtext) are written
against Flax NNX. This runner

1. builds their environments (``environments.py``): ``.venv-clients`` for Tunix and qwix
   (jax/jaxlib 0.10.2, flax 0.12.8 and their test dependencies pinned: ``requirements.txt``,
   ``constraints.txt``) and ``.venv-clients-maxtext`` for MaxText on Python 3.12 (its decoupled,
   no-Google-Cloud closure pinned in ``maxtext-requirements.txt``, installed ``--no-deps``); each
   client's source tree unpacked once from its archive in ``CLIENTS_SRC`` (``--src``; default
   ``../shared/clients/src`` from the repository root: ``tunix.tar.gz``, ``qwix.tar.gz``,
   ``maxtext.tar.gz``; none of the projects publishes its tests to the package index) and
   installed ``--no-deps``, flaxgraph from this checkout (``--no-deps``, editable);
2. runs each selected test file (``selection.py``) in its own pytest process, ``--jobs`` at a
   time, with a per-test and a per-file timeout, with the client's own pytest configuration and
   ``flax.nnx`` bound to flaxgraph by the drop-in (``pytest -p flaxgraph.pytest_plugin
   --flax-nnx=flaxgraph``); MaxText's with ``DECOUPLE_GCLOUD=TRUE`` and ``MAXTEXT_REPO_ROOT``
   (its tree, which has no ``.git`` to find it by); all with
   ``JAX_PLATFORMS=cpu``; ``client_outcomes.py`` records each test's outcome and proves the
   binding (no module of the real ``flax/nnx`` was loaded);
3. compares with ``expectations.txt`` (tests expected not to pass, each with a category and
   a reason) and ``flax_baseline.txt`` (each test's outcome on real Flax 0.12.8), prints a
   per-file table (tests passing on Flax, of those passing on flaxgraph, the share) and exits
   1 on a test that fails but is not listed, on a listed test that passes, and on a file
   whose binding is not proven;
4. when MaxText's files are judged (and no ``--only``; ``--trainer on|off`` overrides), runs
   MaxText's trainer end to end on real Flax and on flaxgraph (``maxtext_trainer.py``: the same
   per-step losses, a checkpoint written at step 2 and restored, the same checkpoint) and
   exits 1 on a difference.

``--baseline`` runs the same files on the real Flax (no binding) and compares with
``flax_baseline.txt``; ``--write`` then rewrites the baseline (after a baseline run) or the
expectations (after a flaxgraph run: new failures are added as ``flax`` when they fail on real
Flax too, else as ``gap``; entries that now pass are dropped; the reasons of the others kept),
for the files that ran.

Usage::

    python tests/clients/run_clients.py [--subset all|ci] [--only NAME ...] [--jobs 2]
        [--baseline] [--write] [--src DIR] [--trainer auto|on|off] [--list]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import maxtext_trainer  # noqa: E402
from environments import CLIENTS, ENVIRONMENTS, REPO, build  # noqa: E402
from expectations import (  # noqa: E402
    CATEGORIES,
    Expectation,
    format_expectations,
    parse_baseline,
    parse_expectations,
)
from selection import ALL, EXCLUDED, SUBSETS, TestFile  # noqa: E402

EXPECTATIONS = HERE / "expectations.txt"
BASELINE = HERE / "flax_baseline.txt"
OUTPUTS = REPO / "outputs" / "clients"


class FileRun(NamedTuple):
    """What one test file's process reported."""

    file: TestFile
    status: str  # "ran", "timeout", "crashed", "binding-not-proven"
    seconds: float
    outcomes: dict[str, tuple[str, str]]  # test id -> (outcome, message)
    note: str


def run_file(
    file: TestFile, venv: Path, root: Path, flaxgraph: bool, test_timeout: int, timeout: int
) -> FileRun:
    """Runs one test file in its own pytest process and reads back its outcomes.

    ``venv`` is the file's environment, ``root`` its client's source tree (the working folder).
    """
    client = CLIENTS[file.client]
    logs = OUTPUTS / ("flaxgraph" if flaxgraph else "flax")
    logs.mkdir(parents=True, exist_ok=True)
    stem = file.name.replace("/", "_")
    results, log = logs / f"{stem}.jsonl", logs / f"{stem}.log"
    results.unlink(missing_ok=True)
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(HERE),
        "PYTHONPYCACHEPREFIX": str(venv / "pycache"),
        "CLIENT_OUTCOMES": str(results),
        **client.environ(root),
    }
    env.pop("XLA_FLAGS", None)
    cmd = [
        str(venv / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "client_outcomes",
        "-p",
        "flaxgraph.pytest_plugin",
        f"--flax-nnx={'flaxgraph' if flaxgraph else 'flax'}",
        f"--timeout={test_timeout}",
        # the client's own pytest configuration, never this repository's (.venv-clients sits
        # inside the checkout, whose pyproject.toml would otherwise be found first)
        f"--rootdir={root}",
        "-c",
        str(root / client.pytest_config),
        file.path,
    ]
    start, status = time.time(), "ran"
    with log.open("w", encoding="utf-8") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        process = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
            status = "timeout"
    seconds = time.time() - start
    outcomes: dict[str, tuple[str, str]] = {}
    started, binding = [], None
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        record = json.loads(line)
        if record.get("event") == "start":
            started.append(record["id"])
        elif record.get("event") == "binding":
            binding = record
        else:
            outcomes[f"{file.client}/{record['id']}"] = (record["outcome"], record["message"])
    collection = [m for t, (o, m) in outcomes.items() if "::" not in t and o == "error"]
    note = collection[0] if collection else ""
    died = [f"{file.client}/{i}" for i in started if f"{file.client}/{i}" not in outcomes]
    if died:
        status = "timeout" if status == "timeout" else "crashed"
        note = f"{status} (exit {returncode}) in {died[0]}"
        for test in died:
            outcomes[test] = ("error", note)
    if status == "ran":
        if binding is None:
            status, note = "crashed", f"exit {returncode} before the session ended; see {log}"
        elif flaxgraph and (
            binding["real_flax_nnx_modules"] or binding["flax.nnx"] not in (None, "flaxgraph")
        ):
            status = "binding-not-proven"
            note = f"flax.nnx was {binding['flax.nnx']}, real modules loaded: " + ", ".join(
                binding["real_flax_nnx_modules"][:3]
            )
    if status != "ran" and not outcomes:  # died before any test reported: the file fails
        outcomes[file.name] = ("error", note or f"{status} (exit {returncode}); see {log}")
    return FileRun(file, status, seconds, outcomes, note)


def python_version(venv: Path) -> tuple[int, int]:
    """The (major, minor) version of the venv's interpreter."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


class Verdict(NamedTuple):
    """A run judged against the expectations (and, for the shares, the Flax baseline)."""

    unexpected: list[tuple[str, str, str]]  # (test id, outcome, message): not listed, not passing
    now_passing: list[str]  # listed, but passed
    not_run: list[str]  # listed, but neither run nor in the baseline
    bad_files: list[str]  # binding not proven


def judge(
    runs: list[FileRun],
    expectations: dict[str, Expectation],
    baseline: dict[str, str],
) -> Verdict:
    unexpected, now_passing, not_run, bad_files = [], [], [], []
    for run in runs:
        prefix = run.file.name + "::"
        if run.status == "binding-not-proven":
            bad_files.append(f"{run.file.name}: {run.note}")
        ids = {t for t in baseline if t.startswith(prefix)} | set(run.outcomes)
        for test in sorted(ids):
            outcome, message = run.outcomes.get(test, ("missing", run.note or "not collected"))
            listed = test in expectations
            if outcome == "passed" and listed:
                now_passing.append(test)
            elif outcome == "skipped" and not listed and baseline.get(test) != "passed":
                continue
            elif outcome != "passed" and not listed:
                unexpected.append((test, outcome, message))
        for test in expectations:
            if test.startswith(prefix) and test not in ids:
                not_run.append(test)
    return Verdict(unexpected, now_passing, not_run, bad_files)


def table(
    runs: list[FileRun], expectations: dict[str, Expectation], baseline: dict[str, str]
) -> str:
    """Per file: outcomes here, tests passing on Flax, of those passing here, the share."""
    head = f"{'file':62s} {'pass':>5s} {'fail':>5s} {'err':>5s} {'skip':>5s} {'listed':>6s}"
    head += f" {'flax':>5s} {'both':>5s} {'share':>6s} {'secs':>5s}  status"
    lines, totals = [head], Counter()
    for run in sorted(runs, key=lambda r: r.file.name):
        prefix = run.file.name + "::"
        c = Counter(o for o, _ in run.outcomes.values())
        on_flax = [t for t, o in baseline.items() if t.startswith(prefix) and o == "passed"]
        both = [t for t in on_flax if run.outcomes.get(t, ("",))[0] == "passed"]
        listed = sum(1 for t in expectations if t.startswith(prefix))
        c.update({"listed": listed, "flax": len(on_flax), "both": len(both)})
        totals.update(c)
        lines.append(_row(run.file.name, c, run.seconds, run.status))
    lines.append(_row(f"TOTAL ({len(runs)} files)", totals, sum(r.seconds for r in runs), ""))
    return "\n".join(lines)


def _row(name: str, c: Counter, seconds: float, status: str) -> str:
    share = f"{100 * c['both'] / c['flax']:5.1f}%" if c["flax"] else "    - "
    cells = [c[k] for k in ("passed", "failed", "error", "skipped")]
    return (
        f"{name[:62]:62s} " + " ".join(f"{n:5d}" for n in cells) + f" {c['listed']:6d}"
        f" {c['flax']:5d} {c['both']:5d} {share:>6s} {seconds:5.0f}  {status}"
    )


def rewrite_expectations(
    runs: list[FileRun],
    expectations: dict[str, Expectation],
    flax_outcomes: dict[str, tuple[str, str]],
    baseline: dict[str, str],
) -> dict[str, Expectation]:
    """The expectations after a flaxgraph run, for the files that ran (others kept as they are)."""
    ran = {run.file.name for run in runs}
    out = {t: e for t, e in expectations.items() if t.split("::", 1)[0] not in ran}
    for run in runs:
        prefix = run.file.name + "::"
        ids = {t for t in baseline if t.startswith(prefix)} | set(run.outcomes)
        for test in sorted(ids):
            outcome, message = run.outcomes.get(test, ("missing", run.note or "not collected"))
            if outcome == "passed" or (outcome == "skipped" and baseline.get(test) != "passed"):
                continue
            if test in expectations:
                out[test] = expectations[test]
            elif baseline.get(test, "passed") != "passed":
                why = flax_outcomes.get(test, ("", ""))[1] or baseline.get(test, "")
                out[test] = Expectation("flax", f"fails on real Flax 0.12.8 too: {why}")
            else:
                out[test] = Expectation("gap", f"known gap, being fixed: {outcome}: {message}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=sorted(SUBSETS), default="all")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="files whose name contains NAME")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--baseline", action="store_true", help="run on the real Flax")
    parser.add_argument("--write", action="store_true", help="rewrite the baseline/expectations")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(os.environ.get("CLIENTS_SRC") or REPO.parent / "shared" / "clients" / "src"),
    )
    parser.add_argument("--test-timeout", type=int, default=900, help="seconds per test")
    parser.add_argument("--timeout", type=int, default=2400, help="seconds per file")
    parser.add_argument("--list", action="store_true", help="print the selection and exit")
    parser.add_argument(
        "--trainer",
        choices=("auto", "on", "off"),
        default="auto",
        help="MaxText's trainer on both libraries (maxtext_trainer.py); auto: when MaxText files "
        "are judged without --only",
    )
    args = parser.parse_args(argv)
    names = SUBSETS[args.subset]
    files = [f for f in ALL if f.name in names]
    if args.only:
        files = [f for f in files if any(o in f.name for o in args.only)]
    if args.list:
        for f in files:
            print(
                "run     ", f.name, "" if f.min_python == (3, 11) else f"(Python >= {f.min_python})"
            )
        for e in EXCLUDED:
            print("excluded", f"{e.client}: {e.files}\n         -> {e.reason}")
        return 0
    src = (args.src if args.src.is_absolute() else (REPO / args.src)).resolve()
    venvs, roots, skipped = {}, {}, []
    for environment in ENVIRONMENTS.values():
        clients = [c for c in CLIENTS.values() if c.environment == environment.name]
        if any(CLIENTS[f.client] in clients for f in files):
            roots.update(build(environment, clients, src))
            venvs.update({c.name: (REPO / environment.venv).resolve() for c in clients})
    for f in files:
        version = python_version(venvs[f.client])
        if version < f.min_python:
            print(
                f"clients: skipping {f.name}: needs Python >= {f.min_python}, its venv has {version}"
            )
            skipped.append(f)
    files = [f for f in files if f not in skipped]
    expectations = parse_expectations(EXPECTATIONS.read_text(encoding="utf-8"))
    baseline = parse_baseline(BASELINE.read_text(encoding="utf-8")) if BASELINE.exists() else {}
    side = "real Flax 0.12.8" if args.baseline else "flaxgraph (flax.nnx bound by the drop-in)"
    print(f"clients: {len(files)} test files on {side}, {args.jobs} at a time", flush=True)
    start = time.time()
    runs: list[FileRun] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(
                run_file,
                f,
                venvs[f.client],
                roots[f.client],
                not args.baseline,
                args.test_timeout,
                args.timeout,
            )
            for f in files
        ]
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            runs.append(run)
            c = Counter(o for o, _ in run.outcomes.values())
            print(f"  {run.file.name}: {dict(c)} in {run.seconds:.0f} s ({run.status})", flush=True)
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    record = {
        r.file.name: {"status": r.status, "seconds": round(r.seconds, 1), "outcomes": r.outcomes}
        for r in runs
    }
    (OUTPUTS / ("flax.json" if args.baseline else "flaxgraph.json")).write_text(
        json.dumps(record, indent=0)
    )
    print(table(runs, expectations, baseline))
    print(f"clients: {time.time() - start:.0f} s in all")
    if args.baseline:
        return baseline_report(runs, baseline, args.write)
    if args.write:
        flax_run = OUTPUTS / "flax.json"
        flax_outcomes = {}
        if flax_run.exists():
            for entry in json.loads(flax_run.read_text()).values():
                flax_outcomes.update({t: tuple(v) for t, v in entry["outcomes"].items()})
        new = rewrite_expectations(runs, expectations, flax_outcomes, baseline)
        EXPECTATIONS.write_text(format_expectations(EXPECTATIONS.read_text(), new))
        print(f"clients: wrote {EXPECTATIONS} ({len(new)} entries)")
        return 0
    verdict = judge(runs, expectations, baseline)
    trainer = []
    wanted = any(f.client == "maxtext" for f in files) and not args.only
    if args.trainer == "on" or (args.trainer == "auto" and wanted):
        print("clients: MaxText's trainer on real Flax and on flaxgraph", flush=True)
        if "maxtext" not in roots:
            roots.update(build(ENVIRONMENTS["maxtext"], [CLIENTS["maxtext"]], src))
        trainer = maxtext_trainer.check(
            (REPO / ENVIRONMENTS["maxtext"].venv).resolve(), roots["maxtext"]
        )
        print(f"clients: {time.time() - start:.0f} s in all, with the trainer")
    for problem in trainer:
        print(f"TRAINER: {problem}")
    for test, outcome, message in verdict.unexpected:
        print(f"UNEXPECTED {outcome}: {test}\n    {message}")
    for test in verdict.now_passing:
        print(f"LISTED BUT PASSES: {test} ({expectations[test].category}): remove it")
    for test in verdict.not_run:
        print(f"LISTED BUT NOT RUN: {test} (no such test: remove or correct it)")
    for line in verdict.bad_files:
        print(f"BINDING NOT PROVEN: {line}")
    counts = Counter(e.category for t, e in expectations.items())
    print("expectations: " + ", ".join(f"{counts[c]} {c}" for c in CATEGORIES))
    ok = not (
        verdict.unexpected or verdict.now_passing or verdict.not_run or verdict.bad_files or trainer
    )
    print("clients: OK" if ok else "clients: FAILED (see above)")
    return 0 if ok else 1


def baseline_report(runs: list[FileRun], baseline: dict[str, str], write: bool) -> int:
    """After a real-Flax run: differences from ``flax_baseline.txt``, or the rewritten file."""
    ran = {run.file.name for run in runs}
    new = {t: o for t, o in baseline.items() if t.split("::", 1)[0] not in ran}
    for run in runs:
        new.update({t: o for t, (o, _) in run.outcomes.items()})
    if write:
        header = [ln for ln in BASELINE.read_text().splitlines() if ln.startswith("#")]
        body = [f"{t} | {o}" for t, o in sorted(new.items())]
        BASELINE.write_text("\n".join([*header, *body]) + "\n")
        print(f"clients: wrote {BASELINE} ({len(new)} tests)")
        return 0
    changed = [
        (t, baseline.get(t), o)
        for t, o in sorted(new.items())
        if t.split("::", 1)[0] in ran and baseline.get(t) != o
    ]
    for test, before, now in changed:
        print(f"BASELINE CHANGED: {test}: {before} -> {now}")
    print("clients: baseline reproduced" if not changed else "clients: baseline differs")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
