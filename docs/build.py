"""Build the documentation site into ``outputs/docs/`` (``make docs``).

The site is Sphinx + MyST-NB + autodoc (``docs/conf.py``). This script stages its
sources in ``outputs/docs-build/src/`` and runs Sphinx there, with warnings as errors:

* the pages of ``docs/`` (``index.md``, ``design.md``);
* the API reference: one page per group of ``docs/api_groups.py``, an entry per public
  name, rendered by autodoc from its docstring and signature;
* the guides (``guides/*.md``), as executed notebooks: each guide is run and checked by
  ``guides/run_guide.py`` (its printed outputs must equal its expected-output blocks),
  unless the test suite already stored a checked run of the same guide and sources
  (``outputs/executed-guides/``, see ``run_guide.store_executed``). The expected-output
  blocks are taken out of the page, since the cells' own outputs show the same text;
* "Coming from Flax NNX", the from_flax guide, with every name of its tables linked to
  its API entry.

A docstring with invalid markup or a reference that does not resolve stops the build;
Sphinx names the file and the line of the docstring, and this script adds the line in
the file. Usage::

  python docs/build.py [--jobs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import nbformat

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
GUIDES = REPO / "guides"
WORK = REPO / "outputs" / "docs-build"
SRC = WORK / "src"

sys.path.insert(0, str(DOCS))
from api_groups import GROUPS, Group  # noqa: E402

FROM_FLAX_TITLE = "Coming from Flax NNX"


def _runner() -> types.ModuleType:
    """``guides/run_guide.py``, loaded as the module ``run_guide``."""
    if "run_guide" not in sys.modules:
        spec = importlib.util.spec_from_file_location("run_guide", GUIDES / "run_guide.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["run_guide"] = module
        spec.loader.exec_module(module)
    return sys.modules["run_guide"]


# -- the API reference ---------------------------------------------------------------------


def resolve(name: str) -> Any:
    """``flaxgraph.<name>``: the object (a module when it is one)."""
    module = importlib.import_module("flaxgraph")
    obj: Any = module
    path = "flaxgraph"
    for part in name.split("."):
        path += "." + part
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module(path)
    return obj


def _jax_home(obj: Any, name: str) -> str:
    """The public JAX path of a re-exported function (``jax.nn.relu``)."""
    import jax

    short = name.rsplit(".", 1)[-1]
    for home, module in (
        ("jax.nn", jax.nn),
        ("jax.numpy", jax.numpy),
        ("jax.nn.initializers", jax.nn.initializers),
    ):
        if getattr(module, short, None) is obj:
            return f"{home}.{short}"
    return f"{getattr(obj, '__module__', '?')}.{short}"


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(*args, **kwargs)"


def _is_ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("flaxgraph")


def entry(name: str, obj: Any, seen: dict[int, str]) -> str:
    """The reStructuredText of one API entry."""
    full = f"flaxgraph.{name}"
    if id(obj) in seen and not isinstance(obj, str | int | float | types.ModuleType):
        first = seen[id(obj)]
        role = "class" if isinstance(obj, type) else "obj"
        directive = "class" if isinstance(obj, type) else "function" if callable(obj) else "data"
        return (
            f".. py:{directive}:: {full}\n   :no-index-entry:\n\n"
            f"   Another name for :py:{role}:`~{first}`.\n"
        )
    seen[id(obj)] = full
    if isinstance(obj, types.ModuleType):
        return f".. automodule:: {obj.__name__}\n"
    if isinstance(obj, type) and _is_ours(obj):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {full}\n   :show-inheritance:\n"
        call = "   :special-members: __call__\n" if "__call__" in vars(obj) else ""
        return f".. autoclass:: {full}\n   :members:\n   :show-inheritance:\n{call}"
    if callable(obj) and _is_ours(obj) and not isinstance(obj, type):
        return f".. autofunction:: {full}\n"
    if callable(obj):  # a JAX function or class re-exported under our name
        home = _jax_home(obj, name)
        directive = "class" if isinstance(obj, type) else "function"
        signature = "" if isinstance(obj, type) else _signature(obj)
        return (
            f".. py:{directive}:: {full}{signature}\n\n"
            f"   Re-exported from JAX: ``{home}`` (see JAX's documentation).\n"
        )
    # A constant, a marker object, a type alias or a type variable.
    doc = _DATA_NOTES.get(name) or inspect.getdoc(type(obj)) or ""
    return f".. py:data:: {full}\n   :value: {obj!r}\n\n   {doc.strip().splitlines()[0] if doc else ''}\n"


_DATA_NOTES = {
    "PARTITION_NAME": "The key of ``transform_metadata`` that names the axis a transform "
    "adds to (or removes from) Variables' sharding names.",
    "PureState": "The type of ``State.to_pure_dict()``: a nested dict of arrays.",
    "A": "A type variable (any type), used in annotations.",
    "M": "A type variable bound to ``Module``, used in annotations.",
    "Carry": "The marker of ``scan``'s carry in ``in_axes``/``out_axes``.",
    "BROADCAST": "``split_rngs(splits=nnx.BROADCAST)`` keeps the selected streams' keys and "
    "marks them as broadcast on purpose for the call (no ``RngBroadcastWarning``).",
    "testing.MutationStep": "Any one step of a mutation program: ``SetValue``, "
    "``AddAttribute``, ``DeleteAttribute``, ``ShareAttribute`` or ``SwapAttributes``.",
}


def api_page(group: Group, seen: dict[int, str]) -> str:
    title = group.title
    lines = [
        title,
        "=" * len(title),
        "",
        group.intro,
        "",
        ".. autosummary::",
        "   :nosignatures:",
        "",
    ]
    lines += [f"   ~flaxgraph.{name}" for name in group.names]
    lines.append("")
    for name in group.names:
        lines.append(entry(name, resolve(name), seen))
    return "\n".join(lines)


def write_api() -> int:
    """Writes ``api/<group>.rst`` and ``api/index.md``; returns the number of entries."""
    seen: dict[int, str] = {}
    (SRC / "api").mkdir(parents=True, exist_ok=True)
    for group in GROUPS:
        (SRC / "api" / f"{group.slug}.rst").write_text(api_page(group, seen), encoding="utf-8")
    toc = "\n".join(group.slug for group in GROUPS)
    listing = "\n".join(f"- [{g.title}]({g.slug}.rst): {g.intro}" for g in GROUPS)
    (SRC / "api" / "index.md").write_text(
        "# API reference\n\nEvery public name of `flaxgraph` (`import flaxgraph as nnx`), of "
        "`nnx.nn`, `nnx.training`, `nnx.metrics`, `nnx.bridge` and `nnx.testing`, grouped "
        f"by what it is for.\n\n{listing}\n\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n",
        encoding="utf-8",
    )
    return sum(len(group.names) for group in GROUPS)


# -- the guides ------------------------------------------------------------------------------


def guide_order() -> list[Path]:
    """The guides in the reading order of ``guides/index.md``."""
    index = (GUIDES / "index.md").read_text(encoding="utf-8")
    named = re.findall(r"\]\(([a-z_]+)\.md\)", index)
    found = _runner().discover(GUIDES)
    ordered = [GUIDES / f"{n}.md" for n in dict.fromkeys(named) if GUIDES / f"{n}.md" in found]
    return ordered + [g for g in found if g not in ordered]


def _execute(path: str) -> str:
    """Runs and checks one guide in a fresh kernel; stores and returns the notebook file."""
    runner = _runner()
    _, notebook = runner.run_guide(path)
    return str(runner.store_executed(path, notebook))


def executed_guides(guides: list[Path], jobs: int) -> dict[Path, nbformat.NotebookNode]:
    runner = _runner()
    notebooks = {g: runner.load_executed(g) for g in guides}
    missing = [g for g, nb in notebooks.items() if nb is None]
    if missing:
        print(f"executing {len(missing)} guide(s): {', '.join(g.name for g in missing)}")
        with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            for guide, stored in zip(missing, pool.map(_execute, map(str, missing))):
                notebooks[guide] = nbformat.read(stored, as_version=4)
    reused = len(guides) - len(missing)
    if reused:
        print(f"reused {reused} checked guide run(s) from {runner.EXECUTED_DIR}")
    return notebooks  # type: ignore[return-value]


_MD_LINK = re.compile(r"\]\(([a-z_]+)\.md(#[^)]*)?\)")


def _page_links(text: str) -> str:
    """Links between guides point at their staged notebooks."""
    return _MD_LINK.sub(lambda m: f"]({m[1]}.ipynb{m[2] or ''})", text)


def page_notebook(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The executed guide as a page: expected-output blocks out, links fixed."""
    expected = _runner()._EXPECTED
    cells = []
    previous = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            if previous is not None and previous.cell_type == "code":
                match = expected.match(cell.source)
                if match is not None:
                    cell.source = cell.source[match.end() :].lstrip("\n")
            cell.source = _page_links(cell.source)
            if not cell.source.strip():
                previous = cell
                continue
        cells.append(cell)
        previous = cell
    notebook.cells = cells
    notebook.metadata.pop("flaxgraph_source_key", None)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return notebook


_NAME_IN_TABLE = re.compile(r"`nnx\.([A-Za-z_][A-Za-z0-9_.]*)`")


def link_names(text: str, documented: set[str]) -> str:
    """``nnx.split`` in backquotes -> a link to its API entry, where it has one."""

    def link(match: re.Match[str]) -> str:
        name = match[1]
        if name in documented:
            return f"{{py:obj}}`nnx.{name} <flaxgraph.{name}>`"
        return match[0]

    return "\n".join(
        _NAME_IN_TABLE.sub(link, line) if line.lstrip().startswith("|") else line
        for line in text.splitlines()
    )


def write_guides(jobs: int) -> list[str]:
    guides = guide_order()
    notebooks = executed_guides(guides, jobs)
    documented = {name for group in GROUPS for name in group.names}
    (SRC / "guides").mkdir(parents=True, exist_ok=True)
    for guide, notebook in notebooks.items():
        page = page_notebook(notebook)
        if guide.stem == "from_flax":
            for cell in page.cells:
                if cell.cell_type == "markdown":
                    cell.source = link_names(cell.source, documented)
        nbformat.write(page, str(SRC / "guides" / f"{guide.stem}.ipynb"))
    index = _page_links((GUIDES / "index.md").read_text(encoding="utf-8"))
    toc = "\n".join(g.stem for g in guides if g.stem != "from_flax")  # in the top toctree
    index += f"\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n"
    (SRC / "guides" / "index.md").write_text(index, encoding="utf-8")
    for script in GUIDES.glob("*.py"):
        if script.name != "run_guide.py":
            shutil.copy(script, SRC / "guides" / script.name)
    return [g.stem for g in guides]


# -- Sphinx ----------------------------------------------------------------------------------

_DOCSTRING_AT = re.compile(r"^(?P<file>[^:\n]+\.py):docstring of (?P<name>[\w.]+):(?P<line>\d+):")


def _with_file_lines(warnings: str) -> str:
    """``x.py:docstring of flaxgraph.split:7: WARNING`` -> also the line in ``x.py``."""
    out = []
    for line in warnings.splitlines():
        match = _DOCSTRING_AT.match(line)
        if match is not None:
            try:
                obj = resolve(match["name"].removeprefix("flaxgraph."))
                start = inspect.getsourcelines(inspect.unwrap(obj))[1]
                source = Path(match["file"]).read_text(encoding="utf-8").splitlines()
                opening = next(
                    i
                    for i in range(start - 1, len(source))
                    if '"""' in source[i] or "'''" in source[i]
                )
                at = opening + int(match["line"])
                line = (
                    f"{match['file']}:{at}: (docstring of {match['name']}) "
                    + line[match.end() :].strip()
                )
            except (OSError, TypeError, ValueError, AttributeError, ImportError, StopIteration):
                pass
        out.append(line)
    return "\n".join(out)


def sphinx(out: Path, jobs: int) -> int:
    log = WORK / "warnings.txt"
    command = [
        sys.executable, "-m", "sphinx", "-b", "html", "-c", str(DOCS), "-d", str(WORK / "doctrees"),
        "-W", "--keep-going", "-n", "-q", "-w", str(log), "-j", str(jobs), str(SRC), str(out),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, check=False)
    if result.returncode != 0 and log.exists():
        print("\nThe documentation has errors (file:line: message):", file=sys.stderr)
        print(_with_file_lines(log.read_text(encoding="utf-8")), file=sys.stderr)
    return result.returncode


def stage(jobs: int) -> int:
    if SRC.exists():
        shutil.rmtree(SRC)
    SRC.mkdir(parents=True)
    for page in DOCS.glob("*.md"):
        shutil.copy(page, SRC / page.name)
    entries = write_api()
    guides = write_guides(jobs)
    print(f"staged {entries} API entries in {len(GROUPS)} groups and {len(guides)} guides")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="processes (guides, Sphinx)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "docs")
    args = parser.parse_args(argv)
    start = time.monotonic()
    stage(args.jobs)
    if args.out.exists():
        shutil.rmtree(args.out)
    code = sphinx(args.out, args.jobs)
    if code == 0:
        print(f"site: {args.out / 'index.html'} ({time.monotonic() - start:.0f} s)")
    return code


if __name__ == "__main__":
    sys.exit(main())
