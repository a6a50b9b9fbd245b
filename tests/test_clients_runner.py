"""The judge of ``make clients`` (``tests/clients/``): what counts as unexpected, and the files.

The runner's verdict on a run is checked on made-up outcomes: a failure not listed, a listed
test that passes, a baseline test that a collection error hid, a listed test that no longer
exists; and the two checked-in files parse (``expectations.txt``, ``flax_baseline.txt``),
list only selected files, and never list a test the baseline says passes as failing on Flax.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"
sys.path.insert(0, str(CLIENTS))

import run_clients  # noqa: E402
from expectations import (  # noqa: E402
    Expectation,
    format_expectations,
    parse_baseline,
    parse_expectations,
)
from selection import ALL, CI, EXCLUDED  # noqa: E402

FILE = next(f for f in ALL if f.name == "tunix/tests/sft/dpo/dpo_trainer_test.py")
A, B, C = (f"{FILE.name}::T::test_{x}" for x in "abc")


def run(outcomes: dict[str, tuple[str, str]], note: str = "") -> run_clients.FileRun:
    return run_clients.FileRun(FILE, "ran", 1.0, outcomes, note)


def test_an_unlisted_failure_and_a_listed_pass_are_both_wrong() -> None:
    outcomes = {A: ("failed", "boom"), B: ("passed", ""), C: ("passed", "")}
    verdict = run_clients.judge([run(outcomes)], {B: Expectation("gap", "x")}, {})
    assert verdict.unexpected == [(A, "failed", "boom")]
    assert verdict.now_passing == [B]


def test_a_baseline_test_that_did_not_run_is_unexpected_unless_listed() -> None:
    collection = {FILE.name: ("error", "collection: ImportError")}
    baseline = {A: "passed", B: "passed"}
    verdict = run_clients.judge(
        [run(collection, note="collection: ImportError")],
        {FILE.name: Expectation("gap", "x"), B: Expectation("gap", "y")},
        baseline,
    )
    assert verdict.unexpected == [(A, "missing", "collection: ImportError")]
    assert not verdict.now_passing and not verdict.not_run


def test_a_skip_is_unexpected_only_where_flax_passes() -> None:
    outcomes = {A: ("skipped", ""), B: ("skipped", "")}
    verdict = run_clients.judge([run(outcomes)], {}, {A: "passed", B: "skipped"})
    assert [u[0] for u in verdict.unexpected] == [A]


def test_a_listed_test_that_no_longer_exists_is_reported() -> None:
    verdict = run_clients.judge([run({A: ("passed", "")})], {C: Expectation("flax", "z")}, {})
    assert verdict.not_run == [C]


def test_rewriting_keeps_reasons_drops_passes_and_sorts_new_failures() -> None:
    old = {A: Expectation("gap", "kept reason"), B: Expectation("gap", "now passes")}
    outcomes = {A: ("failed", "m"), B: ("passed", ""), C: ("error", "new")}
    new = run_clients.rewrite_expectations([run(outcomes)], old, {}, {C: "failed"})
    assert new == {A: old[A], C: Expectation("flax", "fails on real Flax 0.12.8 too: failed")}
    text = format_expectations("# header\n", new)
    assert parse_expectations(text) == new and text.startswith("# header\n")


@pytest.mark.parametrize(
    "line", ["t | nonsense: x", "t | gap:", "t gap: x", "t | gap: x\nt | gap: y"]
)
def test_malformed_expectations_are_refused_with_the_line(line: str) -> None:
    with pytest.raises(ValueError, match="expectations line"):
        parse_expectations(line)


def test_the_checked_in_files_are_consistent_with_the_selection() -> None:
    names = {f.name for f in ALL}
    expectations = parse_expectations((CLIENTS / "expectations.txt").read_text())
    baseline = parse_baseline((CLIENTS / "flax_baseline.txt").read_text())
    for test in [*expectations, *baseline]:
        assert test.split("::", 1)[0] in names, f"{test} is not in a selected file"
    for test, entry in expectations.items():
        if entry.category == "flax":
            assert baseline.get(test) != "passed", f"{test} passes on Flax per the baseline"
    assert set(CI) <= names and all(e.reason for e in EXCLUDED)


def test_every_selected_file_is_recorded_on_real_flax() -> None:
    """A selected file has outcomes in the baseline, unless the interpreter that runs it here
    is older than it needs (tunix's checkpoint_manager_test.py needs 3.12 and runs on the
    harness's interpreter): a file is never selected without being judged."""
    from environments import CLIENTS as CLIENT_TABLE
    from environments import ENVIRONMENTS

    recorded = {
        test.split("::", 1)[0]
        for test in parse_baseline((CLIENTS / "flax_baseline.txt").read_text())
    }
    for file in ALL:
        python = ENVIRONMENTS[CLIENT_TABLE[file.client].environment].python or sys.version_info[:2]
        if tuple(python) >= file.min_python:
            assert file.name in recorded, f"{file.name} is selected but not in flax_baseline.txt"


def test_every_selected_file_has_a_client_with_an_environment() -> None:
    from environments import CLIENTS, ENVIRONMENTS

    for file in ALL:
        assert CLIENTS[file.client].environment in ENVIRONMENTS, file.name
    assert ENVIRONMENTS["maxtext"].python == (3, 12)


def test_a_client_variable_can_name_its_unpacked_tree(tmp_path: Path) -> None:
    from environments import CLIENTS, Client

    client = Client("c", "clients", "", "pyproject.toml", (("A", "1"), ("ROOT", "{root}/x")))
    assert client.environ(tmp_path) == {"A": "1", "ROOT": f"{tmp_path}/x"}
    assert CLIENTS["maxtext"].environ(tmp_path)["MAXTEXT_REPO_ROOT"] == str(tmp_path)


def test_the_interpreter_variable_wins_and_a_wrong_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from environments import find_python

    here = tuple(sys.version_info[:2])
    variable = f"PYTHON{here[0]}{here[1]}"
    monkeypatch.setenv(variable, sys.executable)
    assert find_python(here) == sys.executable
    monkeypatch.setenv(variable, "/nonexistent/python")
    with pytest.raises(SystemExit, match=variable):
        find_python(here)


def test_a_missing_interpreter_is_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from environments import find_python

    monkeypatch.delenv("PYTHON29", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    with pytest.raises(SystemExit, match=r"need a Python 2\.9 interpreter"):
        find_python((2, 9))


def test_the_pyenv_versions_folder_is_searched_newest_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from environments import find_python

    for patch, works in (("9.9.1", True), ("9.9.10", True), ("9.9.11", False), ("9.9.2", True)):
        python = tmp_path / "versions" / patch / "bin" / "python9.9"
        python.parent.mkdir(parents=True)
        python.write_text(f"#!/bin/sh\necho {'9 9' if works else 'broken'}\n")
        python.chmod(0o755)
    monkeypatch.delenv("PYTHON99", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_python((9, 9)) == str(tmp_path / "versions" / "9.9.10" / "bin" / "python9.9")
