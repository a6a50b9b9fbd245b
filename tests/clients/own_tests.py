"""An opt-in tool: a client's own test files, from a checkout you name, on flaxgraph.

Tunix (google/tunix), qwix (google/qwix) and MaxText (AI-Hypercomputer/maxtext) are written
against Flax NNX; their own test suites are a second witness, next to the client contract
(``make clients``), that flaxgraph can stand in for Flax NNX. None of the three publishes its
tests to the package registry, so this tool takes a checkout of one of their repositories that
you make yourself, anywhere you like, and passes as the one required argument. Nothing in
``make test``, ``.ci/run`` or the documentation needs it. It

1. reads which client the checkout is and its version from the checkout's own metadata
   (``pyproject.toml``: ``[project] name`` and ``version``; else a release tag on its git HEAD;
   else the ``__version__`` its version file gives: :func:`identify`); ``--release`` names the
   release when the checkout does not, or overrides what it says;
2. installs that client from the package registry at that release (``environments.py``): the
   contract's environment when it is the release the contract pins, else a venv of its own,
   ``<venv>-<client>-<version>``, with the same pinned closure and that release in its place;
   plus the test runner and test-only dependencies (``own-tests-requirements.txt`` for Tunix and
   qwix, ``maxtext-own-tests-requirements.txt`` for MaxText); the checkout itself is never
   installed or imported;
3. runs each selected test file of the checkout (``selection.py``) in its own pytest process,
   ``--jobs`` at a time, with a per-test and a per-file timeout, with the client's own pytest
   configuration (``python -P``, ``--import-mode=append`` and no ``pythonpath``, so the installed
   release, not the checkout's source, is what ``import <client>`` finds; the checkout's test
   helpers and data stay importable and readable), ``flax.nnx`` bound to flaxgraph by the drop-in (``pytest -p
   flaxgraph.pytest_plugin --flax-nnx=flaxgraph``) or, with ``--baseline``, the real Flax;
   MaxText's with ``DECOUPLE_GCLOUD=TRUE``, ``MAXTEXT_REPO_ROOT`` naming the checkout (for its
   tests' data) and ``MAXTEXT_ASSETS_ROOT`` the release's assets; all with
   ``JAX_PLATFORMS=cpu``; ``client_outcomes.py`` records each test's outcome and proves both the
   binding (no module of the real ``flax/nnx`` was loaded) and the release (the client's package
   was imported from the venv, not from the checkout);
4. compares with ``expectations.txt`` (tests expected not to pass, each with a category and a
   reason) and ``flax_baseline.txt`` (each test's outcome on real Flax 0.12.8), prints a per-file
   table (tests passing on Flax, of those passing on flaxgraph, the share) and exits 1 on a test
   that fails but is not listed, on a listed test that passes, and on a file whose binding or
   release is not proven. Both files were recorded on particular commits of the clients (their
   headers say which); a checkout of another commit may differ from them in tests that were
   added, renamed or changed: a recorded test that a cleanly collected file of the checkout
   does not have is reported as not in this checkout, not as a failure.

``--baseline`` runs the same files on the real Flax (no binding) and compares with
``flax_baseline.txt``; ``--write`` then rewrites the baseline (after a baseline run) or the
expectations (after a flaxgraph run: new failures are added as ``flax`` when they fail on real
Flax too, else as ``gap``; entries that now pass are dropped; the reasons of the others kept),
for the files that ran.

Usage::

    python tests/clients/own_tests.py CHECKOUT [--release X.Y.Z] [--subset all|quick]
        [--only NAME ...] [--jobs 2] [--baseline] [--write] [--list]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import maxtext_trainer  # noqa: E402
from environments import (  # noqa: E402
    CLIENTS,
    ENVIRONMENTS,
    REPO,
    Client,
    build,
    pinned_version,
    pip,
    sha16,
)
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
OUTPUTS = REPO / "outputs" / "clients" / "own_tests"
# per environment: what this tool adds to it (the test runner and test-only dependencies)
TEST_TOOLS = {
    "clients": "own-tests-requirements.txt",
    "maxtext": "maxtext-own-tests-requirements.txt",
}


class Checkout(NamedTuple):
    """A checkout of a client's repository, as its own metadata describes it."""

    root: Path
    client: Client
    version: str  # the release it corresponds to


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_in(path: Path) -> str | None:
    """The ``__version__ = "X"`` (or ``__version__: str = "X"``) assigned in ``path``, if any."""
    if not path.is_file():
        return None
    pattern = r"^__version__\s*(?::\s*\w+\s*)?=\s*[\"']([^\"']+)[\"']"
    found = re.search(pattern, path.read_text(), re.M)
    return found[1] if found else None


def _release_tag(root: Path) -> str | None:
    """The release on the checkout's HEAD commit, from a tag ``X.Y.Z``, ``vX.Y.Z`` or ``<name>-vX.Y.Z``."""
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "tag", "--points-at", "HEAD"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # X.Y.Z, vX.Y.Z, or <name>-vX.Y.Z as MaxText tags its releases (maxtext-v0.2.4)
    pattern = re.compile(r"(?:[A-Za-z][\w.]*-)?v?(\d+(?:\.\d+)+)")
    tags = [m[1] for t in done.stdout.split() if (m := pattern.fullmatch(t))]
    return max(tags, key=lambda t: tuple(int(p) for p in t.split(".")), default=None)


def identify(root: Path, release: str | None = None) -> Checkout:
    """Which client ``root`` is a checkout of, and the release it corresponds to.

    The client is the distribution ``[project] name`` of ``root/pyproject.toml`` names (one of
    ``environments.CLIENTS``' distributions). The version is, the first that gives one:
    ``release``; ``[project] version`` (the placeholder ``0.0.0`` does not count); a release tag
    (``X.Y.Z``, ``vX.Y.Z`` or ``<name>-vX.Y.Z``) on the checkout's git HEAD; the ``__version__`` of the file
    ``[tool.hatch.version] path`` names, of the module ``[tool.setuptools.dynamic] version.attr``
    names, or of ``<package>/__init__.py`` / ``<package>/version.py`` (under ``src/`` too).

    Raises:
      SystemExit: ``root`` is not a folder with a ``pyproject.toml``, names no client of the
        contract, or gives no version (pass ``--release``).
    """
    metadata = root / "pyproject.toml"
    if not metadata.is_file():
        raise SystemExit(
            f"own_tests: {root} has no pyproject.toml; pass the root of a checkout of Tunix, qwix "
            "or MaxText (e.g. `git clone https://github.com/google/qwix`)."
        )
    table = tomllib.loads(metadata.read_text())
    project, tool = table.get("project", {}), table.get("tool", {})
    by_distribution = {_normal(c.distribution): c for c in CLIENTS.values()}
    client = by_distribution.get(_normal(str(project.get("name", ""))))
    if client is None:
        raise SystemExit(
            f"own_tests: {metadata} names the project {project.get('name')!r}, which is none of "
            f"the contract's clients ({', '.join(sorted(by_distribution))})."
        )
    version = release
    if version is None and project.get("version") not in (None, "0.0.0"):
        version = str(project["version"])
    if version is None:
        version = _release_tag(root)
    if version is None:
        candidates = []
        if hatch := tool.get("hatch", {}).get("version", {}).get("path"):
            candidates.append(root / hatch)
        attr = tool.get("setuptools", {}).get("dynamic", {}).get("version", {}).get("attr")
        if attr:
            module = attr.rsplit(".", 1)[0].replace(".", "/")
            candidates += [root / f"{module}.py", root / module / "__init__.py"]
            candidates += [root / "src" / f"{module}.py", root / "src" / module / "__init__.py"]
        for top in (root, root / "src"):
            for package in (client.name, "MaxText"):
                candidates += [top / package / "__init__.py", top / package / "version.py"]
        version = next((v for v in map(_version_in, candidates) if v), None)
    if version is None:
        raise SystemExit(
            f"own_tests: {root} gives no release version (no static [project] version but the "
            "placeholder 0.0.0, no release tag on its HEAD, no __version__); pass the release "
            "the checkout corresponds to with --release X.Y.Z."
        )
    return Checkout(root, client, version)


def with_release(requirements: str, distribution: str, version: str) -> str:
    """``requirements`` (a pinned closure) with ``distribution==version`` in place of its pin.

    Raises:
      ValueError: ``requirements`` does not pin ``distribution``.
    """
    lines, found = [], False
    for line in requirements.splitlines():
        name = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
        if name and _normal(name[1]) == _normal(distribution):
            line, found = f"{distribution}=={version}", True
        lines.append(line)
    if not found:
        raise ValueError(f"the requirements pin no {distribution} (a line `{distribution}==X`)")
    return "\n".join(lines) + "\n"


def release_environment(client: Client, version: str) -> Path:
    """A venv with ``client``'s release ``version`` from the package registry; built if needed.

    The contract's environment when it pins that release; else ``<its venv>-<client>-<version>``,
    built from the same pinned closure with ``<distribution>==<version>`` in place of the pin.
    Then the environment's test tools (``TEST_TOOLS``) are installed on top, ``--no-deps``.

    Raises:
      SystemExit: the release is not on the registry, or another install failed.
    """
    environment = ENVIRONMENTS[client.environment]
    pinned = pinned_version(environment, client.distribution)
    if version == pinned:
        venv = build(environment)
    else:
        venv = (REPO / f"{environment.venv}-{client.name}-{version}").resolve()
        venv.mkdir(parents=True, exist_ok=True)
        requirements = venv / "requirements.txt"
        closure = (HERE / environment.requirements).read_text()
        text = with_release(closure, client.distribution, version)
        if not requirements.exists() or requirements.read_text() != text:
            requirements.write_text(text)
        print(f"own_tests: {client.distribution} {version} (the contract pins {pinned}) in {venv}")
        venv = build(environment._replace(venv=str(venv), requirements=str(requirements)))
    if tools := TEST_TOOLS.get(environment.name):
        stamp, want = venv / ".own-tests", sha16(HERE / tools)
        if not stamp.exists() or stamp.read_text() != want:
            print(f"own_tests: installing {tools} --no-deps into {venv}", flush=True)
            pip(venv, "install", "--no-deps", "-r", str(HERE / tools))
            stamp.write_text(want)
    return venv


class FileRun(NamedTuple):
    """What one test file's process reported."""

    file: TestFile
    status: str  # "ran", "timeout", "crashed", "not-proven"
    seconds: float
    outcomes: dict[str, tuple[str, str]]  # test id -> (outcome, message)
    note: str


def run_file(
    file: TestFile,
    venv: Path,
    root: Path,
    flaxgraph: bool,
    test_timeout: int,
    timeout: int,
    variables: dict[str, str] | None = None,
) -> FileRun:
    """Runs one test file in its own pytest process and reads back its outcomes.

    ``venv`` holds the client's release, ``root`` is the user's checkout (the working folder,
    where the test file is read from); ``variables`` are set for the process on top.
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
        "CLIENT_PACKAGE": client.name,
        **client.environ(root),
        **(variables or {}),
    }
    env.pop("XLA_FLAGS", None)
    cmd = [
        str(venv / "bin" / "python"),
        # -P: the working folder (the checkout) does not go first on sys.path, as `python -m`
        # would put it, so `import <client>` finds the release in the venv
        "-P",
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
        # the release in the venv, never the checkout's source: the test files' folders go to
        # the end of sys.path, and the configuration's own `pythonpath` (Tunix's ".") is unset
        "--import-mode=append",
        "-o",
        "pythonpath=",
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
        elif problem := unproven(binding, flaxgraph, venv):
            status, note = "not-proven", problem
    if status != "ran" and not outcomes:  # died before any test reported: the file fails
        outcomes[file.name] = ("error", note or f"{status} (exit {returncode}); see {log}")
    return FileRun(file, status, seconds, outcomes, note)


def unproven(binding: dict[str, object], flaxgraph: bool, venv: Path) -> str:
    """What a file's binding record fails to prove; empty when it proves everything.

    Proven must be: on flaxgraph, that ``flax.nnx`` was flaxgraph and no module of the real
    ``flax/nnx`` was loaded; on both libraries, that the client's package was imported from
    ``venv`` (the release), not from the checkout.
    """
    problems = []
    real = list(binding.get("real_flax_nnx_modules") or [])  # type: ignore[call-overload]
    if flaxgraph and (real or binding.get("flax.nnx") not in (None, "flaxgraph")):
        problems.append(
            f"flax.nnx was {binding.get('flax.nnx')}, real modules loaded: " + ", ".join(real[:3])
        )
    where = str(binding.get("client_module") or "")
    if not where.startswith(str(venv) + os.sep):
        problems.append(f"the client's package came from {where or 'nowhere'}, not from {venv}")
    return "; ".join(problems)


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
    bad_files: list[str]  # binding or release not proven
    # recorded (baseline or listed) but not in the checkout, whose file ran cleanly: the checkout
    # is another commit than the one recorded; reported, not a failure
    absent: list[str]


def judge(
    runs: list[FileRun],
    expectations: dict[str, Expectation],
    baseline: dict[str, str],
) -> Verdict:
    unexpected, now_passing, not_run, bad_files, absent = [], [], [], [], []
    for run in runs:
        prefix = run.file.name + "::"
        clean = run.status == "ran" and not run.note  # no collection error, no crash
        if run.status == "not-proven":
            bad_files.append(f"{run.file.name}: {run.note}")
        ids = {t for t in baseline if t.startswith(prefix)} | set(run.outcomes)
        for test in sorted(ids):
            outcome, message = run.outcomes.get(test, ("missing", run.note or "not collected"))
            listed = test in expectations
            if outcome == "missing" and clean:
                absent.append(test)
            elif outcome == "passed" and listed:
                now_passing.append(test)
            elif outcome == "skipped" and not listed and baseline.get(test) != "passed":
                continue
            elif outcome != "passed" and not listed:
                unexpected.append((test, outcome, message))
        for test in expectations:
            if test.startswith(prefix) and test not in ids:
                (absent if clean else not_run).append(test)
    return Verdict(unexpected, now_passing, not_run, bad_files, absent)


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


def selected(checkout: Checkout, subset: str, only: list[str] | None) -> list[TestFile]:
    """The selected test files of ``checkout``'s client, ``subset`` and ``only`` applied."""
    names = set(SUBSETS[subset])
    files = [f for f in ALL if f.client == checkout.client.name and f.name in names]
    return [f for f in files if not only or any(o in f.name for o in only)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkout", type=Path, help="the root of your own checkout of Tunix, qwix or MaxText"
    )
    parser.add_argument(
        "--release", help="the client's release the checkout corresponds to (default: read it)"
    )
    parser.add_argument("--subset", choices=sorted(SUBSETS), default="all")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="files whose name contains NAME")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--baseline", action="store_true", help="run on the real Flax")
    parser.add_argument("--write", action="store_true", help="rewrite the baseline/expectations")
    parser.add_argument("--test-timeout", type=int, default=900, help="seconds per test")
    parser.add_argument("--timeout", type=int, default=2400, help="seconds per file")
    parser.add_argument("--list", action="store_true", help="print the selection and exit")
    args = parser.parse_args(argv)
    root = args.checkout.expanduser().resolve()
    if not root.is_dir():
        raise SystemExit(f"own_tests: {args.checkout} is not a folder; pass your checkout's root.")
    checkout = identify(root, args.release)
    client = checkout.client
    print(f"own_tests: {root} is {client.distribution} {checkout.version}", flush=True)
    files = selected(checkout, args.subset, args.only)
    absent = [f for f in files if not (root / f.path).is_file()]
    for f in absent:
        print(f"own_tests: {f.path} is not in this checkout; not run")
    files = [f for f in files if f not in absent]
    if args.list:
        for f in files:
            need = "" if f.min_python == (3, 11) else f"(Python >= {f.min_python})"
            print("run     ", f.name, need)
        for e in EXCLUDED:
            if e.client == client.name:
                print("excluded", f"{e.client}: {e.files}\n         -> {e.reason}")
        return 0
    venv = release_environment(client, checkout.version)
    variables = {}
    if client.name == "maxtext":
        # MaxText's assets (tokenizers) from the release too: by default it looks for them under
        # MAXTEXT_REPO_ROOT (the checkout, for its tests' own data in tests/assets)
        variables["MAXTEXT_ASSETS_ROOT"] = str(maxtext_trainer.package(venv).tokenizer.parents[1])
    version = python_version(venv)
    for f in [f for f in files if version < f.min_python]:
        print(
            f"own_tests: skipping {f.name}: needs Python >= {f.min_python}, its venv has {version}"
        )
    files = [f for f in files if version >= f.min_python]
    expectations = parse_expectations(EXPECTATIONS.read_text(encoding="utf-8"))
    baseline = parse_baseline(BASELINE.read_text(encoding="utf-8")) if BASELINE.exists() else {}
    side = "real Flax 0.12.8" if args.baseline else "flaxgraph (flax.nnx bound by the drop-in)"
    print(f"own_tests: {len(files)} test files on {side}, {args.jobs} at a time", flush=True)
    start = time.time()
    runs: list[FileRun] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(run_file, f, venv, root, not args.baseline, args.test_timeout, args.timeout)
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
    print(f"own_tests: {time.time() - start:.0f} s in all")
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
        print(f"own_tests: wrote {EXPECTATIONS} ({len(new)} entries)")
        return 0
    verdict = judge(runs, expectations, baseline)
    for test, outcome, message in verdict.unexpected:
        print(f"UNEXPECTED {outcome}: {test}\n    {message}")
    for test in verdict.now_passing:
        print(f"LISTED BUT PASSES: {test} ({expectations[test].category}): remove it")
    for test in verdict.not_run:
        print(f"LISTED BUT NOT RUN: {test} (no such test: remove or correct it)")
    for line in verdict.bad_files:
        print(f"NOT PROVEN: {line}")
    for test in verdict.absent:
        print(f"not in this checkout (recorded on another commit): {test}")
    counts = Counter(e.category for t, e in expectations.items())
    print("expectations: " + ", ".join(f"{counts[c]} {c}" for c in CATEGORIES))
    ok = not (verdict.unexpected or verdict.now_passing or verdict.not_run or verdict.bad_files)
    print("own_tests: OK" if ok else "own_tests: FAILED (see above)")
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
        print(f"own_tests: wrote {BASELINE} ({len(new)} tests)")
        return 0
    changed = [
        (t, baseline.get(t), o)
        for t, o in sorted(new.items())
        if t.split("::", 1)[0] in ran and baseline.get(t) != o
    ]
    for test, before, now in changed:
        print(f"BASELINE CHANGED: {test}: {before} -> {now}")
    print("own_tests: baseline reproduced" if not changed else "own_tests: baseline differs")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
