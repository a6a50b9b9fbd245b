"""The environments the client contract runs in, and how each is built.

Two virtual environments, each built from files of this repository and the package registry only;
every client is installed by name and version (its release pinned in the requirements file), never
from an archive or a source tree:

* ``.venv-clients`` (Tunix and qwix) on the interpreter running the harness:
  ``requirements.txt``, the pinned closure of what the scenarios import, ``google-tunix`` and
  ``qwix`` among it, installed ``--no-deps`` (Tunix's declared dependencies include heavy ones the
  scenarios never import, such as tensorflow_datasets, numba and kagglehub);
* ``.venv-clients-maxtext`` (MaxText) on Python 3.12, which MaxText requires:
  ``maxtext-requirements.txt``, the whole closure pinned, ``maxtext`` among it, installed
  ``--no-deps`` too.

flaxgraph is installed from this checkout ``--no-deps``, editable. Stamps in the venv hold a hash
of what each step installed from, so a second run only checks them. After installing, ``build``
checks that each client's installed version is the one its requirements file pins.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class Environment(NamedTuple):
    """One virtual environment of the clients."""

    name: str
    venv: str  # relative to the repository
    python: tuple[int, int] | None  # the interpreter it needs; None: the one running the harness
    requirements: str  # in tests/clients/: the pinned closure, installed --no-deps


class Client(NamedTuple):
    """A library built on Flax NNX whose released code the contract drives on flaxgraph."""

    name: str
    environment: str  # an Environment's name
    distribution: str  # its name on the package registry; its version is pinned in requirements
    pytest_config: str  # its pytest configuration file, relative to a checkout of its repository
    # set for each of its processes; "{root}" in a value stands for a checkout of its repository
    variables: tuple[tuple[str, str], ...] = ()

    def environ(self, root: Path | None = None) -> dict[str, str]:
        """Its variables, ``{root}`` replaced by ``root``; without a root, those naming it are left out."""
        return {
            name: value.replace("{root}", str(root))
            for name, value in self.variables
            if root is not None or "{root}" not in value
        }


ENVIRONMENTS = {
    "clients": Environment("clients", ".venv-clients", None, "requirements.txt"),
    "maxtext": Environment("maxtext", ".venv-clients-maxtext", (3, 12), "maxtext-requirements.txt"),
}

CLIENTS = {
    "tunix": Client("tunix", "clients", "google-tunix", "pyproject.toml"),
    "qwix": Client("qwix", "clients", "qwix", "pyproject.toml"),
    "maxtext": Client(
        "maxtext",
        "maxtext",
        "maxtext",
        "pytest.ini",
        (
            ("DECOUPLE_GCLOUD", "TRUE"),
            ("LOCAL_GCLOUD_PROJECT", "local-maxtext-project"),
            # with a checkout of MaxText's repository (the opt-in tool for its own test files):
            # MaxText finds its repository root by a `.git` beside `src/` (maxtext/utils/
            # globals.py); this variable is its own override
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
        f"clients: MaxText's releases need a Python {want} interpreter and none was found "
        f"({variable} unset, no working python{want} on PATH, none in {pyenv}). Install one "
        f"(e.g. `pyenv install {want}`) or set {variable}=/path/to/python{want}."
    )


def pip(venv: Path, *args: str) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"clients: pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def pinned_version(environment: Environment, distribution: str) -> str:
    """The version ``environment``'s requirements file pins for ``distribution`` (``name==X``).

    Raises:
      SystemExit: the file does not pin it.
    """
    requirements = HERE / environment.requirements
    want = re.sub(r"[-_.]+", "-", distribution).lower()
    for line in requirements.read_text().splitlines():
        if match := re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line):
            if re.sub(r"[-_.]+", "-", match[1]).lower() == want:
                return match[2]
    raise SystemExit(
        f"clients: {requirements} does not pin {distribution} (a line `{distribution}==X.Y.Z`); "
        "every client is installed by name and version from the package registry."
    )


def installed_version(venv: Path, distribution: str) -> str | None:
    """The version of ``distribution`` installed in ``venv``, or None."""
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass",
            distribution,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.strip() or None


def build(environment: Environment) -> Path:
    """Builds (or brings up to date) ``environment``; returns its venv's folder.

    Raises:
      SystemExit: no interpreter was found, an install failed, or a client's installed release is
        not the version its requirements file pins.
    """
    venv = (REPO / environment.venv).resolve()
    if not (venv / "bin" / "python").exists():
        python = find_python(environment.python) if environment.python else sys.executable
        print(f"clients: creating {venv} with {python}", flush=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    requirements = HERE / environment.requirements
    clients = [c for c in CLIENTS.values() if c.environment == environment.name]
    releases = {c.distribution: pinned_version(environment, c.distribution) for c in clients}
    stamp, want = venv / ".requirements", sha16(requirements)
    if not stamp.exists() or stamp.read_text() != want:
        named = ", ".join(f"{name}=={version}" for name, version in releases.items())
        print(f"clients: installing {requirements.name} --no-deps ({named})", flush=True)
        # --no-compile: no bytecode for the whole closure up front (tensorflow, transformers, ...);
        # Python compiles what a run imports, once. Measured for tensorflow + transformers alone
        # from a warm cache: 6.5 min with compiling, 2.6 min without (load 12-20, 2 cores).
        pip(venv, "install", "--no-deps", "--no-compile", "-r", str(requirements))
        stamp.write_text(want)
    for distribution, version in releases.items():
        found = installed_version(venv, distribution)
        if found != version:
            raise SystemExit(
                f"clients: {venv} has {distribution} {found or 'not installed'}, but "
                f"{requirements.name} pins {version}; delete {venv} to rebuild it."
            )
    stamp, want = venv / ".flaxgraph", f"{REPO} {sha16(REPO / 'pyproject.toml')}"
    if not stamp.exists() or stamp.read_text() != want:
        pip(venv, "install", "--no-deps", "-e", str(REPO))
        stamp.write_text(want)
    return venv
