"""The guides in ``guides/`` are executed in a Jupyter kernel: every cell runs and
its printed output must equal the ``text`` block that follows it (see
``guides/run_guide.py``).

One test per guide, discovered from ``guides/*.md``; a failure shows the runner's
message (guide, cell, Markdown line and a diff or traceback). The runner itself
is tested on small guides written to a temporary directory; each run starts a
kernel (a few seconds) and has a hard per-cell timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from helpers import guide_runner

GUIDES = Path(__file__).resolve().parent.parent / "guides"


runner = guide_runner()


@pytest.mark.parametrize("guide", runner.discover(GUIDES), ids=lambda p: p.name)
def test_guide(guide: Path) -> None:
    # Each guide runs in its own Jupyter kernel, under JAX's default configuration
    # (the suite's stricter settings in conftest.py are for the library's own tests).
    try:
        results, notebook = runner.run_guide(guide)
    except runner.GuideFailure as failure:
        pytest.fail(str(failure), pytrace=False)
    assert results, f"{guide.name} has no code cell that runs"
    # The checked run is kept for the documentation site (`make docs` reuses it).
    runner.store_executed(guide, notebook)


@pytest.mark.parametrize("guide", runner.discover(GUIDES), ids=lambda p: p.name)
def test_guide_converts_to_a_valid_notebook(guide: Path) -> None:
    # What `jupytext --to ipynb guides/<name>.md` gives, as the README suggests.
    notebook = jupytext.read(guide)
    nbformat.validate(nbformat.reads(jupytext.writes(notebook, fmt="ipynb"), as_version=4))
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert code == [cell.source for cell in runner.parse_guide(guide)]


def _ruff(*args: str, source: str) -> subprocess.CompletedProcess[str]:
    # --stdin-filename under guides/ applies the guides' per-file ruff settings.
    command = [sys.executable, "-m", "ruff", *args, "--stdin-filename", "guides/_cell.py", "-"]
    return subprocess.run(command, input=source, capture_output=True, text=True, cwd=GUIDES.parent)


@pytest.mark.parametrize("guide", runner.discover(GUIDES), ids=lambda p: p.name)
def test_guide_code_is_ruff_clean(guide: Path) -> None:
    pytest.importorskip("ruff")
    cells = runner.parse_guide(guide)
    # Lint the cells as one program (later cells use earlier names); format each cell.
    checked = _ruff("check", source="\n\n".join(c.source for c in cells) + "\n")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for cell in cells:
        formatted = _ruff("format", "--diff", source=cell.source + "\n")
        assert formatted.returncode == 0, (
            f"{guide.name}: cell {cell.number} (line {cell.line}) is not ruff-formatted:\n"
            + formatted.stdout
        )


def test_index_lists_every_guide() -> None:
    index = (GUIDES / "index.md").read_text(encoding="utf-8")
    for guide in runner.discover(GUIDES):
        assert f"({guide.name})" in index, f"guides/index.md does not link {guide.name}"


# -- the runner itself ------------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "guide.md"
    path.write_text(text, encoding="utf-8")
    return path


REPO = GUIDES.parent

PASSING = """\
# A guide

```python
import sys

import flaxgraph

x = 1
print(x, "  ")
print(sys.executable)
print(flaxgraph.__file__)
```

Output:

```text
1
{executable}
{flaxgraph}
```

```python skip
raise RuntimeError("not run")
```

```python
try:
    x.missing
except AttributeError as error:
    print(type(error).__name__)
x + 1
```
```text
AttributeError
```

```python
print("unchecked")
```
"""


def test_runner_passes_and_shares_one_namespace_in_this_python(tmp_path: Path) -> None:
    text = PASSING.format(executable=sys.executable, flaxgraph=REPO / "flaxgraph" / "__init__.py")
    results, notebook = runner.run_guide(_write(tmp_path, text))
    assert [r.cell.number for r in results] == [1, 3, 4]
    assert results[0].output.splitlines()[0] == "1   "
    assert [r.output for r in results[1:]] == ["AttributeError\n", "unchecked\n"]
    assert [r.cell.expected is not None for r in results] == [True, True, False]
    # The last expression's value is displayed, not printed.
    (shown,) = [o for o in results[1].outputs if o.output_type == "execute_result"]
    assert shown.data["text/plain"] == "2"
    skipped = [c for c in notebook.cells if c.cell_type == "code"][1]
    assert skipped.outputs == [] and skipped.get("execution_count") is None


def test_runner_reports_a_diff_with_cell_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '# t\n\n```python\nprint("a\\nb")\n```\n\n```text\na\nc\n```\n')
    with pytest.raises(runner.GuideFailure) as failure:
        runner.run_guide(path)
    message = str(failure.value)
    assert "cell 1 (line 3)" in message
    assert "guide.md:9" in message  # the line holding `c`
    assert "-c" in message and "+b" in message


def test_runner_reports_an_exception_at_its_markdown_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "```python\nx = 1\n```\n\n```python\n\ny = 1 / 0\n```\n")
    with pytest.raises(runner.GuideFailure) as failure:
        runner.run_guide(path)
    message = str(failure.value)
    assert "cell 2 (line 5) raised ZeroDivisionError at " in message
    assert "guide.md:7." in message  # the Markdown line of `1 / 0`
    assert "1 / 0" in message  # the kernel's traceback


def test_runner_checks_missing_output_and_stderr(tmp_path: Path) -> None:
    path = _write(tmp_path, "```python\nx = 1\n```\n```text\n1\n```\n")
    with pytest.raises(runner.GuideFailure, match="cell 1"):
        runner.run_guide(path)
    source = "```python\nimport warnings\n\nwarnings.warn('careful')\n```\n"
    with pytest.raises(runner.GuideFailure, match=r"cell 1 .* wrote to stderr(.|\n)*careful"):
        runner.run_guide(_write(tmp_path, source))


def test_runner_stops_a_cell_at_its_timeout(tmp_path: Path) -> None:
    source = "```python\nimport time\n```\n\n```python\ntime.sleep(60)\n```\n"
    path = _write(tmp_path, source)
    started = time.monotonic()
    with pytest.raises(runner.GuideFailure, match=r"longer than 2 s .*cell 2, line 5"):
        runner.run_guide(path, timeout=2)
    assert time.monotonic() - started < 40


def test_text_block_after_prose_is_not_an_expected_block(tmp_path: Path) -> None:
    path = _write(tmp_path, "```python\nprint(1)\n```\n\nSome prose.\n\n```text\n2\n```\n")
    (cell,) = runner.parse_guide(path)
    assert cell.expected is None


def test_unknown_cell_option_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(runner.GuideFormatError, match="unknown cell option"):
        runner.parse_guide(_write(tmp_path, "```python nocheck\nprint(1)\n```\n"))


def test_command_line_exit_status_and_html(tmp_path: Path) -> None:
    script = str(GUIDES / "run_guide.py")
    good = tmp_path / "good.md"
    good.write_text("```python\nprint('hi')\n```\n```text\nhi\n```\n", encoding="utf-8")
    bad = tmp_path / "bad.md"
    bad.write_text("```python\nprint('hi')\n```\n```text\nho\n```\n", encoding="utf-8")
    html = tmp_path / "html"
    command = [sys.executable, script, str(good), "--html", str(html)]
    ok = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "good.md: 1 cells ran, 1 outputs checked, OK" in ok.stdout
    page = (html / "good.html").read_text(encoding="utf-8")
    assert "hi" in page and "cdnjs" not in page  # self-contained: works offline
    command = [sys.executable, script, str(bad)]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert "cell 1 (line 1)" in failed.stderr and "+hi" in failed.stderr


def test_a_stored_run_is_reused_only_while_its_sources_are_unchanged(tmp_path: Path) -> None:
    guide = _write(tmp_path, "# T\n\n```python\nprint(1)\n```\n")
    notebook, _ = runner.read_guide(guide)
    stored = runner.store_executed(guide, notebook, tmp_path / "runs")
    assert stored == tmp_path / "runs" / "guide.ipynb"
    assert runner.load_executed(guide, tmp_path / "runs") is not None
    guide.write_text("# T\n\n```python\nprint(2)\n```\n", encoding="utf-8")
    assert runner.load_executed(guide, tmp_path / "runs") is None
    assert runner.load_executed(tmp_path / "other.md", tmp_path / "runs") is None
