"""The two checked-in files ``own_tests.py`` (the opt-in tool) judges a run by.

``expectations.txt`` lists each Tunix/qwix/MaxText test expected *not* to pass on flaxgraph:
``<test id> | <category>: <reason>``, the id being ``<client>/<pytest node id>`` (e.g.
``qwix/tests/_src/providers/ptq_test.py::PtqTest::test_x``; a file-level id stands for a
collection error), ``#`` starting a comment. The categories:

* ``flax``: fails on real Flax 0.12.8 too (the reason quotes Flax's first error line);
* ``env``: needs the network, a GPU/TPU, a heavy extra not in the clients' environment, or a file
  the recorded source tree lacked;
* ``deviation``: a deliberate flaxgraph difference that is better for users, shown by a test
  of flaxgraph's own (``guides/from_flax.md``);
* ``gap``: a known gap of flaxgraph being fixed; never a deliberate difference.

``flax_baseline.txt`` lists each test's outcome on real Flax 0.12.8 (``<test id> | passed``),
from ``own_tests.py CHECKOUT --baseline --write``: the per-file shares are computed against it.
Both were recorded on particular client commits (their headers say which).
"""

from __future__ import annotations

from typing import NamedTuple

CATEGORIES = ("flax", "env", "deviation", "gap")
OUTCOMES = ("passed", "failed", "error", "skipped")


class Expectation(NamedTuple):
    """Why a listed test does not pass on flaxgraph."""

    category: str  # one of CATEGORIES
    reason: str


def _entries(text: str, what: str) -> list[tuple[int, str, str]]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test, sep, rest = (part.strip() for part in line.partition(" | "))
        if not sep or not rest:
            raise ValueError(f"{what} line {number}: expected '<test id> | ...', got {raw!r}")
        out.append((number, test, rest))
    return out


def parse_expectations(text: str) -> dict[str, Expectation]:
    """``{test id: Expectation}`` from ``expectations.txt``'s text.

    Raises:
      ValueError: a line without ``|``, an unknown category, an empty reason, or a test listed
        twice (the message gives the line number).

    Example:
      >>> parse_expectations("t.py::T::a | gap: known gap, being fixed: x")
      {'t.py::T::a': Expectation(category='gap', reason='known gap, being fixed: x')}
    """
    out: dict[str, Expectation] = {}
    for number, test, rest in _entries(text, "expectations"):
        category, sep, reason = (part.strip() for part in rest.partition(":"))
        if not sep or category not in CATEGORIES or not reason:
            raise ValueError(
                f"expectations line {number}: expected '<test id> | <category>: <reason>' with a "
                f"category in {CATEGORIES}, got {rest!r}"
            )
        if test in out:
            raise ValueError(f"expectations line {number}: {test} is listed twice")
        out[test] = Expectation(category, reason)
    return out


def parse_baseline(text: str) -> dict[str, str]:
    """``{test id: outcome on real Flax}`` from ``flax_baseline.txt``'s text.

    Raises:
      ValueError: a malformed line or an unknown outcome (with the line number).
    """
    out = {}
    for number, test, outcome in _entries(text, "baseline"):
        if outcome not in OUTCOMES:
            raise ValueError(f"baseline line {number}: unknown outcome {outcome!r}")
        out[test] = outcome
    return out


def format_expectations(old_text: str, entries: dict[str, Expectation]) -> str:
    """The file's text for ``entries``: the old header comment, then one block per test file."""
    header = []
    for line in old_text.splitlines():
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("# == "):
            break
        header.append(line)
    while header and not header[-1].strip():
        header.pop()
    lines, current = [*header, ""], None
    for test in sorted(entries):
        file = test.split("::", 1)[0]
        if file != current:
            lines += ["", f"# == {file}"] if current is not None else [f"# == {file}"]
            current = file
        entry = entries[test]
        lines.append(f"{test} | {entry.category}: {' '.join(entry.reason.split())}")
    return "\n".join(lines) + "\n"
