"""Run the Markdown guides and check every code cell's printed output.

A guide is a Markdown notebook in jupytext's ``md`` format. Its code cells are
fenced blocks whose info string is ``python``; they run in order, in one shared
namespace, as the cells of a notebook would. A code cell may be followed by an
*expected-output block*: a fenced block with the info string ``text``, placed
right after the cell (blank lines and one line reading ``Output:`` may sit in
between). The block holds exactly what the cell prints to stdout. A cell with
no such block is run but its output is not checked. A cell whose info string is
``python skip`` is shown to the reader but not run (its ``text`` block, if any,
is not checked either). To show an error, catch it in the cell and print it.

Outputs are compared line by line after removing trailing whitespace (at the end
of each line and blank lines at the end of the output); nothing else is
normalised. A mismatch, or an exception escaping a cell, stops the guide with a
message naming the guide, the cell and the Markdown line, and showing a diff or
the traceback (whose line numbers are those of the guide).

Command line, from the repository root::

  python guides/run_guide.py guides/graph.md [more guides ...] [--quiet]

prints each cell's output as it runs and exits with status 1 at the first
failing guide. From Python (as ``tests/test_guides.py`` does)::

  from run_guide import run_guide, GuideFailure
  results = run_guide("guides/graph.md", echo=None)   # raises GuideFailure
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import io
import re
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

GUIDES_DIR = Path(__file__).resolve().parent

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_OUTPUT_LABEL = "Output:"


class GuideFailure(AssertionError):
    """A guide cell printed something else than its expected block, or raised."""


class GuideFormatError(ValueError):
    """A guide is not well-formed (e.g. an unclosed code fence)."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One ``python`` code cell of a guide.

    Attributes:
      number: 1-based position among the guide's python cells (skipped ones count).
      line: 1-based line of the opening fence in the Markdown file.
      source: the code, without the fences.
      skip: the info string was ``python skip``.
      expected: the text of the expected-output block, or ``None`` if there is none.
      expected_line: 1-based line of the expected block's opening fence (or ``None``).
    """

    number: int
    line: int
    source: str
    skip: bool = False
    expected: str | None = None
    expected_line: int | None = None


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What running one cell printed."""

    cell: Cell
    output: str


@dataclasses.dataclass(frozen=True)
class _Block:
    line: int  # 1-based line of the opening fence
    end: int  # 0-based index of the line after the closing fence
    info: str
    body: str


def _blocks(lines: list[str], where: str) -> Iterator[_Block]:
    """Yields every fenced block (CommonMark rules: a closing fence uses the same
    character, is at least as long as the opening one and has no info string)."""
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            # Like CommonMark, remove up to the opening fence's indentation.
            line = lines[j]
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            body.append(line[strip:])
            j += 1
        if j == len(lines):
            raise GuideFormatError(f"{where}:{i + 1}: the code fence opened here is never closed.")
        yield _Block(line=i + 1, end=j + 1, info=match["info"].strip(), body="\n".join(body))
        i = j + 1


def _only_blank_or_label(lines: list[str]) -> bool:
    label_seen = False
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if text == _OUTPUT_LABEL and not label_seen:
            label_seen = True
            continue
        return False
    return True


def parse_guide(path: str | Path) -> list[Cell]:
    """Returns the python cells of the guide at ``path``, each with its expected output.

    Raises:
      GuideFormatError: a fence is never closed, or a ``python`` info string has an
        unknown option (only ``skip`` is known).
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    where = _display_path(path)
    cells: list[Cell] = []
    previous: _Block | None = None
    for block in _blocks(lines, where):
        words = block.info.split()
        language = words[0].lower() if words else ""
        if language == "python":
            options = words[1:]
            if options not in ([], ["skip"]):
                raise GuideFormatError(
                    f"{where}:{block.line}: unknown cell option(s) {' '.join(options)!r} "
                    "after ```python; the only option is `skip` (```python skip)."
                )
            cells.append(
                Cell(number=len(cells) + 1, line=block.line, source=block.body, skip=bool(options))
            )
        elif (
            language == "text"
            and len(words) == 1
            and previous is not None
            and previous.info.split()[:1] == ["python"]
            and cells[-1].expected is None
            and _only_blank_or_label(lines[previous.end : block.line - 1])
        ):
            cells[-1] = dataclasses.replace(
                cells[-1], expected=block.body, expected_line=block.line
            )
        previous = block
    return cells


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


def _diff_message(where: str, cell: Cell, output: str) -> str | None:
    assert cell.expected is not None and cell.expected_line is not None
    expected, actual = normalise(cell.expected), normalise(output)
    if expected == actual:
        return None
    first = next(
        (i for i, (e, a) in enumerate(zip(expected, actual, strict=False)) if e != a),
        min(len(expected), len(actual)),
    )
    diff = difflib.unified_diff(
        expected,
        actual,
        fromfile=f"expected ({where}:{cell.expected_line})",
        tofile="actual",
        lineterm="",
    )
    return (
        f"{where}: cell {cell.number} (line {cell.line}) printed something else than its "
        f"expected block; first difference at {where}:{cell.expected_line + 1 + first}.\n"
        + "\n".join(diff)
    )


def _error_message(where: str, cell: Cell, error: BaseException, output: str) -> str:
    # Drop the runner's own frame: the traceback starts in the guide.
    tb = error.__traceback__
    if tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    formatted = "".join(traceback.format_exception(type(error), error, tb))
    printed = f"It printed before failing:\n{output}" if output.strip() else ""
    return (
        f"{where}: cell {cell.number} (line {cell.line}) raised "
        f"{type(error).__name__}. To show an error on purpose, catch it in the cell and "
        f"print it.\n{formatted}{printed}"
    )


class _Tee(io.TextIOBase):
    """Captures what is written and, optionally, forwards it after a header line."""

    def __init__(self, echo: TextIO | None, header: str):
        self.buffer_ = io.StringIO()
        self.echo = echo
        self.header: str | None = header

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.buffer_.write(text)
        if self.echo is not None and text:
            if self.header is not None:
                self.echo.write(self.header)
                self.header = None
            self.echo.write(text)
        return len(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()


def run_guide(path: str | Path, *, echo: TextIO | None = None) -> list[CellResult]:
    """Runs the guide at ``path``, checking each cell's output against its block.

    Args:
      path: the Markdown file.
      echo: where to print each cell's output as it runs (``None``: nowhere); a
        header line names each cell that prints something.

    Returns:
      One ``CellResult`` per cell that ran.

    Raises:
      GuideFailure (an ``AssertionError``): a cell's output differs from its block
        (the message holds a diff) or a cell raised (the message holds the
        traceback); both name the guide, the cell number and its line.
      GuideFormatError (a ``ValueError``): the guide cannot be parsed.
    """
    path = Path(path)
    where = _display_path(path)
    cells = parse_guide(path)
    # The cells share the namespace of a real module, so classes they define can be
    # pickled and have a sensible __module__.
    module = types.ModuleType("__guide__")
    module.__file__ = str(path)
    saved = sys.modules.get(module.__name__)
    sys.modules[module.__name__] = module
    results: list[CellResult] = []
    try:
        for cell in cells:
            if cell.skip:
                continue
            # Pad with newlines so tracebacks show the Markdown file's line numbers.
            code = compile("\n" * cell.line + cell.source + "\n", str(path), "exec")
            tee = _Tee(echo, f"--- {where}, cell {cell.number} (line {cell.line})\n")
            try:
                with contextlib.redirect_stdout(tee):
                    exec(code, module.__dict__)
            except Exception as error:
                raise GuideFailure(
                    _error_message(where, cell, error, tee.buffer_.getvalue())
                ) from None
            output = tee.buffer_.getvalue()
            if cell.expected is not None:
                message = _diff_message(where, cell, output)
                if message is not None:
                    raise GuideFailure(message)
            results.append(CellResult(cell, output))
    finally:
        if saved is None:
            sys.modules.pop(module.__name__, None)
        else:
            sys.modules[module.__name__] = saved
    return results


def discover(directory: str | Path = GUIDES_DIR) -> list[Path]:
    """The guides in ``directory``: every ``*.md`` file that has a python cell."""
    return sorted(p for p in Path(directory).glob("*.md") if parse_guide(p))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("guides", nargs="+", type=Path, help="Markdown guides to run")
    parser.add_argument("--quiet", action="store_true", help="do not print cell outputs")
    args = parser.parse_args(argv)
    for path in args.guides:
        try:
            results = run_guide(path, echo=None if args.quiet else sys.stdout)
        except (GuideFailure, GuideFormatError, OSError) as error:
            sys.stdout.flush()
            print(f"\nFAILED: {error}", file=sys.stderr)
            return 1
        checked = sum(r.cell.expected is not None for r in results)
        print(f"{_display_path(path)}: {len(results)} cells ran, {checked} outputs checked, OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
