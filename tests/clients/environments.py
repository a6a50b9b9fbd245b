"""The environments ``make clients`` runs the clients' tests in, and how each is built.

Two virtual environments, each built from files of this repository and the package index only:

* ``.venv-clients`` (Tunix and qwix) on the interpreter running the harness: ``requirements.txt``
  installed with its dependencies under ``constraints.txt``;
* ``.venv-clients-maxtext`` (MaxText) on Python 3.12, which MaxText requires:
  ``maxtext-requirements.txt``, the whole closure pinned, installed ``--no-deps`` (MaxText's own
  decoupled requirements with each ``>=`` taken as ``==``, which is what its documented
  ``--resolution=lowest`` install picks, and jax/jaxlib/flax pinned as for the other clients;
  ``--no-deps`` keeps the Google Cloud clients out).

Each client's source tree (with its tests, which no project publishes to the package index) is
unpacked once from its archive in ``CLIENTS_SRC`` into ``<venv>/src/`` and installed there
``--no-deps``; flaxgraph is installed from this checkout ``--no-deps``, editable. Stamps in the
venv hold a hash of what each step installed from, so a second run only checks them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class Environment(NamedTuple):
    """One virtual environment of the clients."""

    name: str
    venv: str  # relative to the repository
    python: tuple[int, int] | None  # the interpreter it needs; None: the one running the harness
    requirements: str  # in tests/clients/
    constraints: str | None  # in tests/clients/; None: requirements is the closure (--no-deps)


class Client(NamedTuple):
    """A library whose own tests run on flaxgraph, and where its tree comes from."""

    name: str
    environment: str  # an Environment's name
    top: str  # the folder inside the archive that holds the tree ("" for the archive's root)
    pytest_config: str  # the client's pytest configuration file, relative to its tree
    # set for each of its test processes; "{root}" in a value stands for its source tree
    variables: tuple[tuple[str, str], ...] = ()

    @property
    def archive(self) -> str:
        return f"{self.name}.tar.gz"

    def environ(self, root: Path) -> dict[str, str]:
        """Its variables, with ``{root}`` replaced by the path of its unpacked source tree."""
        return {name: value.replace("{root}", str(root)) for name, value in self.variables}


ENVIRONMENTS = {
    "clients": Environment("clients", ".venv-clients", None, "requirements.txt", "constraints.txt"),
    "maxtext": Environment(
        "maxtext", ".venv-clients-maxtext", (3, 12), "maxtext-requirements.txt", None
    ),
}

CLIENTS = {
    "tunix": Client("tunix", "clients", "", "pyproject.toml"),
    "qwix": Client("qwix", "clients", "", "pyproject.toml"),
    "maxtext": Client(
        "maxtext",
        "maxtext",
        "maxtext",
        "pytest.ini",
        (
            ("DECOUPLE_GCLOUD", "TRUE"),
            ("LOCAL_GCLOUD_PROJECT", "local-maxtext-project"),
            # MaxText finds its repository root by a `.git` beside `src/` (maxtext/utils/
            # globals.py), which an unpacked archive lacks; this variable is its own override
            # (without it, files that read `<root>/src/maxtext/configs/base.yml` or the
            # tokenizer assets look in `src/maxtext/src/maxtext/`)
            ("MAXTEXT_REPO_ROOT", "{root}"),
        ),
    ),
}


def sha16(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [python, "-c", "import sys, venv; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    return (int(parts[0]), int(parts[1])) if done.returncode == 0 and len(parts) == 2 else None


def find_python(version: tuple[int, int]) -> str:
    """A working interpreter of ``version`` (major, minor), for a venv.

    Looked for in this order: the ``PYTHON3xx`` environment variable (e.g. ``PYTHON312``; when set,
    it must work), the interpreter running this script, ``python3.xx`` on ``PATH`` if it runs (a
    pyenv shim for a version not selected does not), then pyenv's versions folder
    (``$PYENV_ROOT``, default ``~/.pyenv``), newest patch release first.

    Raises:
      SystemExit: none found, or ``PYTHON3xx`` names something that is not that version.
    """
    want = f"{version[0]}.{version[1]}"
    variable = f"PYTHON{version[0]}{version[1]}"
    if os.environ.get(variable):
        if _version_of(os.environ[variable]) != version:
            raise SystemExit(
                f"clients: {variable}={os.environ[variable]} is not a working Python {want}; "
                f"point it at a Python {want} interpreter or unset it."
            )
        return os.environ[variable]
    if sys.version_info[:2] == version:
        return sys.executable
    candidates = [shutil.which(f"python{want}")]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    patch = re.compile(rf"^{re.escape(want)}\.(\d+)$")
    found = [(int(m[1]), p) for p in pyenv.glob(f"{want}.*") if (m := patch.match(p.name))]
    candidates += [str(p / "bin" / f"python{want}") for _, p in sorted(found, reverse=True)]
    for candidate in candidates:
        if candidate and _version_of(candidate) == version:
            return candidate
    raise SystemExit(
        f"clients: MaxText's tests need a Python {want} interpreter and none was found "
        f"({variable} unset, no working python{want} on PATH, none in {pyenv}). Install one "
        f"(e.g. `pyenv install {want}`) or set {variable}=/path/to/python{want}."
    )


def pip(venv: Path, *args: str) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"clients: pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def _unpack(client: Client, archive: Path, venv: Path, isolated: bool) -> Path:
    """The client's tree under ``venv/src``, unpacked from ``archive`` and installed once.

    ``isolated``: build it in pip's isolated build environment; else with the venv's own
    build backend (MaxText's, hatchling, is part of its pinned closure).
    """
    where = venv / "src" / client.name
    root, want = where / client.top if client.top else where, f"{client.name} {sha16(archive)}"
    marker = where / ".archive"
    if not marker.exists() or marker.read_text() != want:
        print(f"clients: unpacking {archive}", flush=True)
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(where, filter="data")
        isolation = [] if isolated else ["--no-build-isolation"]
        pip(venv, "install", "--no-deps", *isolation, "-e", str(root))
        marker.write_text(want)
    return root


def build(environment: Environment, clients: list[Client], src: Path) -> dict[str, Path]:
    """Builds (or brings up to date) ``environment`` and returns its clients' source trees.

    Raises:
      SystemExit: an archive is not in ``src``, no interpreter was found, or an install failed.
    """
    archives = {c.name: src / c.archive for c in clients}
    missing = [str(path) for path in archives.values() if not path.is_file()]
    if missing:
        raise SystemExit(
            f"clients: the client source archives are missing: {', '.join(missing)}.\n"
            "`make clients` needs the clients' source trees with their tests "
            f"({', '.join(c.archive for c in clients)}) in CLIENTS_SRC (default "
            "../shared/clients/src, beside the repository); set CLIENTS_SRC=/path/to/dir."
        )
    venv = (REPO / environment.venv).resolve()
    if not (venv / "bin" / "python").exists():
        python = find_python(environment.python) if environment.python else sys.executable
        print(f"clients: creating {venv} with {python}", flush=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    requirements = HERE / environment.requirements
    pinned = [requirements] + ([HERE / environment.constraints] if environment.constraints else [])
    stamp, want = venv / ".requirements", sha16(*pinned)
    if not stamp.exists() or stamp.read_text() != want:
        print(f"clients: installing the pinned dependencies ({requirements.name})", flush=True)
        if environment.constraints:
            pip(venv, "install", "-r", str(requirements), "-c", str(pinned[1]))
        else:
            pip(venv, "install", "--no-deps", "-r", str(requirements))
        stamp.write_text(want)
    isolated = environment.constraints is not None
    roots = {c.name: _unpack(c, archives[c.name], venv, isolated) for c in clients}
    stamp, want = venv / ".flaxgraph", f"{REPO} {sha16(REPO / 'pyproject.toml')}"
    if not stamp.exists() or stamp.read_text() != want:
        pip(venv, "install", "--no-deps", "-e", str(REPO))
        stamp.write_text(want)
    return roots
