"""A pytest plugin for ``own_tests.py``: each test's outcome, one JSON line as soon as it is known.

Loaded with ``-p client_outcomes`` (``tests/clients`` on ``PYTHONPATH``); it appends to the
file named by ``CLIENT_OUTCOMES``: ``{"event": "start", "id": ...}`` when a test starts, then
``{"id": ..., "outcome": "passed" | "failed" | "error" | "skipped", "message": ...}`` (the worst
of its setup, call and teardown), so a process killed on timeout still tells what finished and
which test it died in. At the end it writes ``{"event": "binding", ...}``: what ``flax.nnx`` was
in the process, every module loaded from the real ``flax/nnx`` directory, and the file the
client's package (``CLIENT_PACKAGE``, e.g. ``tunix``) was imported from, so a run can prove
which library it measured and that it ran the installed release, not a checkout's source.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _message(report: Any) -> str:
    """The most telling line of a failure: the last ``E …`` line, else the last line."""
    lines = [ln for ln in str(getattr(report, "longrepr", "") or "").splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errors[-1] if errors else (lines[-1].strip() if lines else ""))[:300]


class Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: dict[str, tuple[str, str]] = {}

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._write({"event": "start", "id": nodeid})

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            outcome = "passed" if report.passed else "skipped" if report.skipped else "failed"
        else:
            outcome = "error" if report.failed else "skipped" if report.skipped else "passed"
        previous = self.pending.get(report.nodeid)
        if previous is None or RANK[outcome] > RANK[previous[0]]:
            self.pending[report.nodeid] = (outcome, _message(report) if report.failed else "")

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        outcome, message = self.pending.pop(nodeid, ("error", "no report"))
        self._write({"id": nodeid, "outcome": outcome, "message": message})

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._write(
                {
                    "id": report.nodeid or "<collection>",
                    "outcome": "error",
                    "message": "collection: " + _message(report),
                }
            )

    def pytest_sessionfinish(self, session: Any) -> None:
        record: dict[str, Any] = {"event": "binding"}
        flax = sys.modules.get("flax")
        nnx = sys.modules.get("flax.nnx")
        record["flax.nnx"] = getattr(nnx, "__name__", None)
        real_dir = str(Path(flax.__file__).parent / "nnx") + os.sep if flax else None
        record["real_flax_nnx_modules"] = sorted(
            name
            for name, module in list(sys.modules.items())
            if real_dir and (getattr(module, "__file__", None) or "").startswith(real_dir)
        )
        package = sys.modules.get(os.environ.get("CLIENT_PACKAGE") or "")
        record["client_module"] = getattr(package, "__file__", None)
        self._write(record)


def pytest_configure(config: Any) -> None:
    path = os.environ.get("CLIENT_OUTCOMES")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(path), "client-outcome-recorder")
