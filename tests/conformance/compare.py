"""Compares a conformance run's outcomes with the deviations file and tabulates them per file.

The deviations file lists, one per line, each Flax test expected *not* to pass, with
its reason: ``<test id> | <reason>``, the id relative to Flax's ``tests/nnx`` (e.g.
``transforms_test.py::TestJIT::test_x``); ``#`` starts a comment. A run conforms when
every test that failed or errored is listed, and every listed test failed or errored
(a listed test that now passes, is skipped or no longer exists makes the list untrue,
so it is an error too).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

PREFIX = "tests/nnx/"


def test_id(nodeid: str) -> str:
    """``tests/nnx/a_test.py::T::t`` -> ``a_test.py::T::t``."""
    return nodeid[len(PREFIX) :] if nodeid.startswith(PREFIX) else nodeid


def file_of(tid: str) -> str:
    return tid.split("::", 1)[0]


def parse_deviations(text: str) -> dict[str, str]:
    """``{test id: reason}`` from the deviations file's text.

    Raises:
      ValueError: a line without ``|``, without a reason, or a test listed twice
        (the message gives the line number).
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tid, sep, reason = (part.strip() for part in line.partition("|"))
        if not sep or not reason:
            raise ValueError(
                f"deviations line {number}: expected '<test id> | <reason>', got {raw!r}"
            )
        if tid in out:
            raise ValueError(f"deviations line {number}: {tid} is listed twice")
        out[tid] = reason
    return out


@dataclasses.dataclass
class Verdict:
    """The outcome of one run against the deviations: counts per file and what is wrong."""

    counts: dict[str, Counter]
    unexpected: list[tuple[str, str, str]]  # (test id, outcome, message): fails, not listed
    now_passing: list[tuple[str, str]]  # (test id, outcome): listed, but passed or skipped
    not_run: list[str]  # listed, but not collected in this run

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.now_passing or self.not_run)


def compare(
    outcomes: Mapping[str, tuple[str, str]],
    deviations: Mapping[str, str],
    files: Iterable[str] | None = None,
) -> Verdict:
    """Judges ``outcomes`` (``{nodeid: (outcome, message)}``) against ``deviations``.

    Args:
      outcomes: as the outcome recorder writes them.
      deviations: ``parse_deviations`` of the file.
      files: if given, only listed tests of these files must have run (a partial run).
    """
    counts: dict[str, Counter] = {}
    unexpected, now_passing = [], []
    seen = set()
    for nodeid, (outcome, message) in sorted(outcomes.items()):
        tid = test_id(nodeid)
        seen.add(tid)
        c = counts.setdefault(file_of(tid), Counter())
        c[outcome] += 1
        listed = tid in deviations
        c["listed"] += listed
        if outcome in ("failed", "error") and not listed:
            unexpected.append((tid, outcome, message))
        elif outcome in ("passed", "skipped") and listed:
            now_passing.append((tid, outcome))
    wanted = set(files) if files is not None else None
    not_run = [
        tid
        for tid in sorted(deviations)
        if tid not in seen and (wanted is None or file_of(tid) in wanted)
    ]
    return Verdict(counts, unexpected, now_passing, not_run)


def render(verdict: Verdict, console_width: int = 120) -> str:
    """The per-file table and totals (``rich``), then what is wrong, as text."""
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table(title="Flax 0.12.8 tests/nnx against flaxgraph")
    for col in ("file", "passed", "failed", "errors", "skipped", "listed", "total", "pass %"):
        table.add_column(col, justify="left" if col == "file" else "right")

    def pct(c: Counter) -> str:
        run = c["passed"] + c["failed"] + c["error"]
        return f"{100.0 * c['passed'] / run:.1f}" if run else "-"

    def row(name: str, c: Counter, style: str | None = None) -> None:
        total = c["passed"] + c["failed"] + c["error"] + c["skipped"]
        cells = [c["passed"], c["failed"], c["error"], c["skipped"], c["listed"], total]
        table.add_row(name, *map(str, cells), pct(c), style=style)

    totals, core = Counter(), Counter()
    for name in sorted(verdict.counts):
        c = verdict.counts[name]
        row(name, c)
        totals.update(c)
        if not name.startswith("bridge/"):
            core.update(c)
    table.add_section()
    row("all but bridge/", core, "bold")
    row("TOTAL", totals, "bold")
    console = Console(file=io.StringIO(), width=console_width, record=True, color_system=None)
    console.print(table)
    console.print(
        "pass % = passed / (passed + failed + errors); skipped tests are Flax's own skips."
    )
    for tid, outcome, message in verdict.unexpected:
        console.print(f"UNEXPECTED {outcome}: {tid}\n    {message}", soft_wrap=True)
    for tid, outcome in verdict.now_passing:
        console.print(
            f"LISTED BUT {outcome.upper()}: {tid} (remove it from the deviations file)",
            soft_wrap=True,
        )
    for tid in verdict.not_run:
        console.print(
            f"LISTED BUT NOT RUN: {tid} (no such test: remove or correct it)", soft_wrap=True
        )
    return console.export_text()


def load_deviations(path: Path) -> dict[str, str]:
    return parse_deviations(path.read_text(encoding="utf-8")) if path.exists() else {}
