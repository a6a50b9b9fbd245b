"""Run the Markdown guides in a Jupyter kernel and check each cell's printed output.

Glue: jupytext reads a guide (jupytext ``md`` format) as a notebook, nbclient runs
its cells in a fresh ipykernel, nbconvert exports it. What is ours is the check. A
code cell may be followed by an *expected-output block*, a fenced ``text`` block
right after it (blank lines and one ``Output:`` line may sit in between): it holds
exactly what the cell prints, ``nnx.display`` outputs counting as their text
(``repr``). A cell's last-expression value (a model rendered by treescope, say) is
kept in the notebook, not compared. ```` ```python skip```` cells are shown, not
run. An exception escaping a cell, or anything on stderr (a warning), fails the
guide: to show an error, catch it and print it. Lines are compared without
trailing whitespace and trailing blank lines; a failure names the guide, the cell
and its Markdown line, with a diff or the kernel's traceback.

The kernel runs ``sys.executable`` from a kernel spec written to a temporary
directory (no installed spec needed), in the repository root with the root first
on ``PYTHONPATH`` (so it imports this checkout); cells have a hard timeout and the
kernel is always shut down.

  python guides/run_guide.py guides/graph.md [more guides ...] [--html DIR]

exits with status 1 at the first failing guide; ``--html`` writes each executed
guide as ``DIR/<name>.html``. From Python (``tests/test_guides.py``):
``results, notebook = run_guide("guides/graph.md")`` raises ``GuideFailure``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jupytext
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

GUIDES_DIR = Path(__file__).resolve().parent
REPO = GUIDES_DIR.parent
CELL_TIMEOUT = 300
"""Seconds one cell may run before the guide fails (and its kernel is killed)."""
STARTUP_TIMEOUT = 120
"""Seconds the kernel may take to start."""

_KERNEL = "flaxgraph-guide"
_SKIP_TAG = "skip-execution"  # nbclient does not run cells with this tag
_CODE_FENCE = re.compile(r"^```python(?P<options>.*)$")
_EXPECTED = re.compile(
    r"\A\s*(?:Output:\s*\n\s*)?```text[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class GuideFailure(AssertionError):
    """A guide cell printed something else than its expected block, or raised."""


class GuideFormatError(ValueError):
    """A guide is not well-formed (e.g. an unknown cell option)."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One ``python`` code cell: its number among them (from 1), the Markdown line
    of its fence, its code, whether it is skipped, its expected block and that
    block's fence line (or ``None``), and the blank lines jupytext dropped after
    the fence (code line ``n`` is Markdown line ``line + blank_lines + n``)."""

    number: int
    line: int
    source: str
    skip: bool = False
    expected: str | None = None
    expected_line: int | None = None
    blank_lines: int = 0


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What running one cell printed (``output``) and its raw notebook outputs."""

    cell: Cell
    output: str
    outputs: list[Any]


def read_guide(path: str | Path) -> tuple[nbformat.NotebookNode, list[Cell]]:
    """The guide at ``path`` as a jupytext notebook, and its python cells in order.

    Raises:
      GuideFormatError: a ``python`` info string has an option other than ``skip``,
        or jupytext's cells do not match the file's ``python`` fences.
    """
    path = Path(path)
    where = _display_path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    fences = []
    for i, line in enumerate(lines):
        match = _CODE_FENCE.match(line)
        if match is not None:
            options = match["options"].split()
            if options not in ([], ["skip"]):
                raise GuideFormatError(
                    f"{where}:{i + 1}: unknown cell option(s) {' '.join(options)!r} "
                    "after ```python; the only option is `skip` (```python skip)."
                )
            fences.append((i + 1, bool(options)))
    notebook = jupytext.read(path)
    if not fences:
        return notebook, []  # Markdown without python cells (e.g. guides/index.md)
    positions = []
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and cell.source.startswith("%%"):
            # Another language's block (jupytext writes ```bash as a %%bash cell): shown, not run.
            cell.metadata.setdefault("tags", []).append(_SKIP_TAG)
        elif cell.cell_type == "code":
            positions.append(i)
    if len(positions) != len(fences):
        raise GuideFormatError(
            f"{where}: jupytext reads {len(positions)} code cells but the file has "
            f"{len(fences)} ```python fences; close every fence and start code cells "
            "with ```python."
        )
    cells = []
    for number, (position, (line, skip)) in enumerate(zip(positions, fences), start=1):
        code = notebook.cells[position]
        if skip:
            code.metadata.setdefault("tags", []).append(_SKIP_TAG)
        expected = expected_line = None
        following = notebook.cells[position + 1 : position + 2]
        match = _EXPECTED.match(following[0].source) if following else None
        if match is not None and following[0].cell_type == "markdown":
            expected = match["body"]
            closing = next(i for i in range(line, len(lines)) if lines[i].rstrip() == "```")
            expected_line = next(
                i + 1 for i in range(closing, len(lines)) if lines[i].startswith("```text")
            )
        blank = next((i for i in range(line, len(lines)) if lines[i].strip()), line) - line
        cells.append(Cell(number, line, code.source, skip, expected, expected_line, blank))
    return notebook, cells


def parse_guide(path: str | Path) -> list[Cell]:
    """The python cells of the guide at ``path`` (see ``read_guide``)."""
    return read_guide(path)[1]


def normalise(text: str) -> list[str]:
    """The lines of ``text`` without trailing whitespace and trailing blank lines."""
    out = [line.rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextlib.contextmanager
def kernel_manager() -> Iterator[AsyncKernelManager]:
    """A kernel manager for an ipykernel running ``sys.executable``; its kernel, if
    still running on exit, is killed, and its files are removed."""
    with tempfile.TemporaryDirectory(prefix="flaxgraph-kernel-") as tmp:
        spec = Path(tmp, "kernels", _KERNEL)
        spec.mkdir(parents=True)
        python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        kernel_json = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "flaxgraph guides (this Python)",
            "language": "python",
            # A private IPython directory: no history database shared between kernels.
            "env": {"PYTHONPATH": python_path, "IPYTHONDIR": str(Path(tmp, "ipython"))},
        }
        (spec / "kernel.json").write_text(json.dumps(kernel_json), encoding="utf-8")
        specs = KernelSpecManager(kernel_dirs=[str(spec.parent)], ensure_native_kernel=False)
        km = AsyncKernelManager(  # IPC sockets in `tmp`: no TCP ports to race for
            kernel_name=_KERNEL,
            kernel_spec_manager=specs,
            connection_file=str(Path(tmp, "connection.json")),
            transport="ipc",
            ip=str(Path(tmp, "ipc")),
        )
        try:
            yield km
        finally:
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)


def execute(notebook: nbformat.NotebookNode, *, timeout: int = CELL_TIMEOUT) -> None:
    """Runs ``notebook``'s code cells in place in a fresh kernel (see ``kernel_manager``).

    Raises:
      CellExecutionError: a cell raised (the notebook holds the outputs so far).
      CellTimeoutError: a cell ran longer than ``timeout`` seconds.
    """
    with kernel_manager() as km:
        client = NotebookClient(
            notebook,
            km=km,
            timeout=timeout,
            startup_timeout=STARTUP_TIMEOUT,
            shutdown_kernel="immediate",
            skip_cells_with_tag=_SKIP_TAG,
            resources={"metadata": {"path": str(REPO)}},
        )
        client.execute(cleanup_kc=True)


def _stream(outputs: list[Any], name: str) -> str:
    return "".join(o.text for o in outputs if o.output_type == "stream" and o.name == name)


def _shown_text(outputs: list[Any]) -> str:
    """What the cell printed and displayed (``nnx.display``), as text, in order."""
    parts = []
    for o in outputs:
        if o.output_type == "stream" and o.name == "stdout":
            parts.append(o.text)
        elif o.output_type == "display_data" and "text/plain" in o.data:
            parts.append(o.data["text/plain"] + "\n")
    return "".join(parts)


def _check(where: str, cell: Cell, outputs: list[Any]) -> str:
    """The cell's text output, after checking it ran clean and printed its block."""
    stdout = _shown_text(outputs)
    errors = [o for o in outputs if o.output_type == "error"]
    if errors:
        error = errors[0]
        traceback = _ANSI.sub("", "\n".join(error.traceback))
        inner = re.search(r"Cell In\[\d+\], line (\d+)", traceback)
        at = f" at {where}:{cell.line + cell.blank_lines + int(inner[1])}" if inner else ""
        printed = f"\nIt printed before failing:\n{stdout}" if stdout.strip() else ""
        raise GuideFailure(
            f"{where}: cell {cell.number} (line {cell.line}) raised {error.ename}{at}. "
            f"To show an error on purpose, catch it in the cell and print it.\n"
            f"{traceback}{printed}"
        )
    stderr = _stream(outputs, "stderr")
    if stderr.strip():
        raise GuideFailure(
            f"{where}: cell {cell.number} (line {cell.line}) wrote to stderr (a warning?); "
            f"a guide must run clean:\n{stderr}"
        )
    if cell.expected is None or normalise(cell.expected) == normalise(stdout):
        return stdout
    assert cell.expected_line is not None
    expected, actual = normalise(cell.expected), normalise(stdout)
    first = next(
        (i for i, (e, a) in enumerate(zip(expected, actual, strict=False)) if e != a),
        min(len(expected), len(actual)),
    )
    diff = difflib.unified_diff(
        expected, actual, f"expected ({where}:{cell.expected_line})", "actual", lineterm=""
    )
    raise GuideFailure(
        f"{where}: cell {cell.number} (line {cell.line}) printed something else than its "
        f"expected block; first difference at {where}:{cell.expected_line + 1 + first}.\n"
        + "\n".join(diff)
    )


def run_guide(
    path: str | Path, *, timeout: int = CELL_TIMEOUT
) -> tuple[list[CellResult], nbformat.NotebookNode]:
    """Runs the guide at ``path`` in a fresh kernel, checking each cell's output.

    Args:
      path: the Markdown file.
      timeout: seconds one cell may run.

    Returns:
      One ``CellResult`` per cell that ran, and the executed notebook (outputs
      included, e.g. to export it with ``export_html``).

    Raises:
      GuideFailure (an ``AssertionError``): a cell's output differs from its block
        (the message holds a diff), a cell raised or wrote to stderr (the message
        holds the traceback or the text), or a cell timed out; all name the guide,
        the cell number and its line.
      GuideFormatError (a ``ValueError``): the guide cannot be parsed.
    """
    path = Path(path)
    where = _display_path(path)
    notebook, cells = read_guide(path)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    try:
        execute(notebook, timeout=timeout)
    except CellTimeoutError:
        ran = [c for c, nb in zip(cells, code_cells) if nb.get("execution_count")]
        cell = ran[-1] if ran else cells[0]
        raise GuideFailure(
            f"{where}: a cell ran longer than {timeout} s (the last one started: cell "
            f"{cell.number}, line {cell.line}); its kernel was stopped."
        ) from None
    except CellExecutionError:
        pass  # the cell holding the error output is reported below
    results = []
    for cell, code in zip(cells, code_cells):
        if cell.skip:
            continue
        output = _check(where, cell, code.outputs)
        results.append(CellResult(cell, output, list(code.outputs)))
    return results, notebook


# nbconvert's `lab` page without what it fetches from a CDN (require.js, MathJax, Mermaid:
# the guides use none), so the exported page is self-contained and works offline.
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def export_html(notebook: nbformat.NotebookNode, destination: str | Path) -> Path:
    """Writes an executed notebook as a self-contained HTML page (nbconvert's ``lab``
    template without its CDN scripts); treescope displays keep their own scripts.

    Returns:
      The path written (parent directories are created).
    """
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        template_file="offline.html.j2",
        extra_loaders=[jinja2.DictLoader({"offline.html.j2": _OFFLINE_TEMPLATE})],
    )
    body, _ = exporter.from_notebook_node(notebook)
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(body, encoding="utf-8")
    return destination


EXECUTED_DIR = REPO / "outputs" / "executed-guides"
"""Where checked, executed guides are kept for the documentation site (``docs/build.py``)."""


def source_key(path: str | Path) -> str:
    """A digest of what a guide's outputs depend on: its text, this runner and every
    source file of the ``flaxgraph`` package. Equal keys mean a stored run still holds."""
    digest = hashlib.sha256(Path(path).read_bytes())
    for source in [Path(__file__), *sorted((REPO / "flaxgraph").rglob("*.py"))]:
        digest.update(str(source.relative_to(REPO)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def store_executed(
    path: str | Path, notebook: nbformat.NotebookNode, directory: str | Path = EXECUTED_DIR
) -> Path:
    """Keeps a guide's executed (and checked) notebook as ``directory/<name>.ipynb``,
    stamped with its ``source_key``; returns the file written."""
    path = Path(path)
    notebook.metadata["flaxgraph_source_key"] = source_key(path)
    destination = Path(directory) / (path.stem + ".ipynb")
    destination.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(destination))
    return destination


def load_executed(
    path: str | Path, directory: str | Path = EXECUTED_DIR
) -> nbformat.NotebookNode | None:
    """The stored executed notebook of a guide if its ``source_key`` still matches."""
    stored = Path(directory) / (Path(path).stem + ".ipynb")
    if not stored.exists():
        return None
    notebook = nbformat.read(str(stored), as_version=4)
    if notebook.metadata.get("flaxgraph_source_key") != source_key(path):
        return None
    return notebook


def discover(directory: str | Path = GUIDES_DIR) -> list[Path]:
    """The guides in ``directory``: every ``*.md`` file that has a python cell."""
    return sorted(p for p in Path(directory).glob("*.md") if parse_guide(p))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("guides", nargs="+", type=Path, help="Markdown guides to run")
    parser.add_argument("--html", type=Path, help="write each executed guide as DIR/<name>.html")
    args = parser.parse_args(argv)
    for path in filter(parse_guide, args.guides):  # skips Markdown without code (index.md)
        try:
            results, notebook = run_guide(path)
        except (GuideFailure, GuideFormatError, OSError) as error:
            print(f"\nFAILED: {error}", file=sys.stderr)
            return 1
        checked = sum(r.cell.expected is not None for r in results)
        print(f"{_display_path(path)}: {len(results)} cells ran, {checked} outputs checked, OK")
        if args.html is not None:
            print(f"wrote {export_html(notebook, args.html / (path.stem + '.html'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
