"""``make conformance``: Flax NNX 0.12.8's own ``tests/nnx`` run against flaxgraph, as a contract.

1. Fetches Flax 0.12.8's source distribution from the package index
   (``pip download --no-deps --no-binary :all: flax==0.12.8``), once, into a cache
   directory, and checks its sha256.
2. Extracts ``tests/nnx`` into a temporary directory and rewrites its ``flax`` imports
   (``rewrite.py``) so that ``flax.nnx`` is flaxgraph while ``flax.linen`` & co. stay
   the real Flax, the oracle several tests compare against (``binding.py``).
3. Runs pytest on each test file in its own process (two files at a time, a
   per-test and a per-file timeout), recording every test's outcome (``outcomes.py``).
4. Compares the outcomes with ``deviations.txt`` (``compare.py``), prints a per-file
   table and the totals, and exits 1 on any unexpected failure and on any listed test
   that no longer fails, so the list stays true.

Usage: ``python tests/conformance/run_flax_tests.py [--jobs 2] [--only a_test.py ...]
[--keep] [--list-failures]``. Needs ``flax==0.12.8`` installed (the ``linen`` extra) for
the oracles, and pytest-timeout, absl-py, cloudpickle (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import compare, load_deviations, render  # noqa: E402
from rewrite import BINDING, rewrite_source  # noqa: E402

FLAX_VERSION = "0.12.8"
SDIST_SHA256 = "1bb438775b967a3f1f42b9c3d4ddf1d2883cd6406589f9cecdc244634036bdc4"
SDIST_NAME = f"flax-{FLAX_VERSION}.tar.gz"
DEVIATIONS = HERE / "deviations.txt"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(cache: Path) -> Path:
    """The cached, checked sdist; downloaded on first use.

    Raises:
      SystemExit: the download failed or the file's sha256 is not the expected one.
    """
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / SDIST_NAME
    if not sdist.exists():
        print(f"conformance: downloading the flax {FLAX_VERSION} sdist into {cache}", flush=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"flax=={FLAX_VERSION}",
            "-d",
            str(cache),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not sdist.exists():
            raise SystemExit(f"conformance: pip download failed:\n{done.stdout}\n{done.stderr}")
    found = sha256(sdist)
    if found != SDIST_SHA256:
        sdist.unlink()
        raise SystemExit(
            f"conformance: {sdist} has sha256 {found}, expected {SDIST_SHA256}; removed it, run again."
        )
    return sdist


def prepare(sdist: Path, work: Path) -> int:
    """Extracts and rewrites ``tests/nnx`` under ``work``; returns the number of rewritten imports."""
    prefix = f"flax-{FLAX_VERSION}/tests/nnx/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        for m in members:
            target = work / "tests" / "nnx" / m.name[len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(m).read())
    rewritten = 0
    for path in sorted((work / "tests" / "nnx").rglob("*.py")):
        source, n = rewrite_source(path.read_text(encoding="utf-8"))
        path.write_text(source, encoding="utf-8")
        rewritten += n
    shutil.copy(HERE / "binding.py", work / f"{BINDING}.py")
    shutil.copy(HERE / "outcomes.py", work / "_flaxgraph_outcomes.py")
    (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n", encoding="utf-8")
    return rewritten


def test_files(work: Path, only: list[str] | None) -> list[str]:
    """The test files to run, relative to ``tests/nnx`` (Flax's ``*_test.py`` and ``test_*.py``)."""
    root = work / "tests" / "nnx"
    found = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name.endswith("_test.py") or p.name.startswith("test_")
    )
    if only:
        unknown = sorted(set(only) - set(found))
        if unknown:
            raise SystemExit(f"conformance: no such test file in tests/nnx: {unknown}")
        return [f for f in found if f in only]
    return found


def run_file(work: Path, rel: str, per_test: int, per_file: int) -> dict:
    """Runs one test file in its own pytest process; returns its recorded outcomes.

    Each file gets a fresh interpreter, so the outcome of a file does not depend on
    which files ran before it in the same process (deterministic under parallelism).
    """
    tag = rel.replace("/", "__").removesuffix(".py")
    outcomes, log = work / "outcomes" / f"{tag}.json", work / "logs" / f"{tag}.log"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(work), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        FLAXGRAPH_OUTCOMES=str(outcomes),
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(work / "pytest.ini"),
        "--rootdir",
        str(work),
        "-p",
        "_flaxgraph_outcomes",
        "-p",
        "pytest_timeout",
        f"--timeout={per_test}",
        "-q",
        "--tb=short",
        "--no-header",
        f"tests/nnx/{rel}",
    ]
    with log.open("w") as out:
        try:
            subprocess.run(
                cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=per_file
            )
        except subprocess.TimeoutExpired:
            out.write(f"\nconformance: stopped after {per_file} s\n")
    if not outcomes.exists():  # the process died or was stopped before pytest finished
        return {f"tests/nnx/{rel}": ("error", f"pytest did not finish (see {log.name})")}
    return {k: tuple(v) for k, v in json.loads(outcomes.read_text()).items()}


def run_all(work: Path, files: list[str], jobs: int, per_test: int, per_file: int) -> dict:
    (work / "outcomes").mkdir()
    (work / "logs").mkdir()
    results: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for part in pool.map(lambda rel: run_file(work, rel, per_test, per_file), files):
            results.update(part)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, default=2, help="test files run in parallel (default 2)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="test files relative to tests/nnx")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(
            os.environ.get(
                "FLAXGRAPH_CONFORMANCE_CACHE", Path.home() / ".cache" / "flaxgraph-conformance"
            )
        ),
    )
    parser.add_argument("--per-test-timeout", type=int, default=300)
    parser.add_argument("--file-timeout", type=int, default=900, help="limit for one file, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--list-failures",
        action="store_true",
        help="print every unexpected failure as a deviations line to fill in",
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    sdist = fetch_sdist(args.cache)
    work = Path(tempfile.mkdtemp(prefix="flaxgraph-conformance-"))
    try:
        n = prepare(sdist, work)
        files = test_files(work, args.only)
        print(
            f"conformance: flax {FLAX_VERSION} tests/nnx: {len(files)} files ({n} imports bound "
            f"to flaxgraph), {args.jobs} at a time",
            flush=True,
        )
        outcomes = run_all(work, files, args.jobs, args.per_test_timeout, args.file_timeout)
        verdict = compare(outcomes, load_deviations(DEVIATIONS), files=args.only)
        print(render(verdict))
        if args.list_failures:
            for tid, _, message in verdict.unexpected:
                print(f"{tid} | {message}")
        print(
            f"conformance: {'OK' if verdict.ok else 'FAILED'} in {time.perf_counter() - start:.0f} s"
            + (f" (work dir {work})" if args.keep else "")
        )
        return 0 if verdict.ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
