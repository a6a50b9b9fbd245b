"""A pytest plugin that records each test's outcome (passed/failed/error/skipped) as JSON.

Loaded with ``-p _flaxgraph_outcomes`` in the conformance run; it writes the file named
by the environment variable ``FLAXGRAPH_OUTCOMES`` (under pytest-xdist, only the
controller, which receives every worker's reports, writes it). Collection errors are recorded under the
file's node id with the outcome ``error``.
"""

from __future__ import annotations

import json
import os
from typing import Any

RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _message(report: Any) -> str:
    """The most telling line of a failure: the last ``E …`` line, else the last line."""
    lines = [ln for ln in str(getattr(report, "longrepr", "") or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return (errors[-1] if errors else (lines[-1] if lines else ""))[:300]


class Recorder:
    """Keeps the worst outcome seen per test id (a failing teardown makes a pass an error)."""

    def __init__(self, config: Any):
        self.config = config
        self.table: dict[str, tuple[str, str]] = {}

    def _record(self, nodeid: str, outcome: str, message: str) -> None:
        previous = self.table.get(nodeid)
        if previous is None or RANK[outcome] > RANK[previous[0]]:
            self.table[nodeid] = (outcome, message)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            outcome = "passed" if report.passed else "skipped" if report.skipped else "failed"
        else:
            outcome = "error" if report.failed else "skipped" if report.skipped else "passed"
        self._record(report.nodeid, outcome, _message(report) if report.failed else "")

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._record(report.nodeid or "<collection>", "error", _message(report))

    def pytest_sessionfinish(self, session: Any) -> None:
        path = os.environ.get("FLAXGRAPH_OUTCOMES")
        if path and not hasattr(self.config, "workerinput"):
            with open(path, "w", encoding="utf-8") as f:
                json.dump({k: list(v) for k, v in self.table.items()}, f, indent=0)


def pytest_configure(config: Any) -> None:
    config.pluginmanager.register(Recorder(config), "flaxgraph-outcome-recorder")
