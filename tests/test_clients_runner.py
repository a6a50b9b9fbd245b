"""The opt-in own-tests tool (``tests/clients/own_tests.py``) and the MaxText scenarios' logic.

The tool's verdict on a run is checked on made-up outcomes: a failure not listed, a listed
test that passes, a baseline test that a collection error hid, a listed test that no longer
exists; the two checked-in files parse (``expectations.txt``, ``flax_baseline.txt``), list only
selected files, and never list a test the baseline says passes as failing on Flax; a checkout is
identified from its own metadata (client and release), a binding record proves flaxgraph and the
installed release or says what it does not prove, and another release replaces the pin. The
MaxText scenarios' readers of MaxText's metrics file and log are checked on written files. All
of it without the network or a client installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"
sys.path.insert(0, str(CLIENTS))

import maxtext_trainer  # noqa: E402
import own_tests  # noqa: E402
from expectations import (  # noqa: E402
    Expectation,
    format_expectations,
    parse_baseline,
    parse_expectations,
)
from selection import ALL, EXCLUDED, QUICK  # noqa: E402

FILE = next(f for f in ALL if f.name == "tunix/tests/sft/dpo/dpo_trainer_test.py")
A, B, C = (f"{FILE.name}::T::test_{x}" for x in "abc")


def run(outcomes: dict[str, tuple[str, str]], note: str = "") -> own_tests.FileRun:
    return own_tests.FileRun(FILE, "ran", 1.0, outcomes, note)


def test_an_unlisted_failure_and_a_listed_pass_are_both_wrong() -> None:
    outcomes = {A: ("failed", "boom"), B: ("passed", ""), C: ("passed", "")}
    verdict = own_tests.judge([run(outcomes)], {B: Expectation("gap", "x")}, {})
    assert verdict.unexpected == [(A, "failed", "boom")]
    assert verdict.now_passing == [B]


def test_a_baseline_test_that_did_not_run_is_unexpected_unless_listed() -> None:
    collection = {FILE.name: ("error", "collection: ImportError")}
    baseline = {A: "passed", B: "passed"}
    verdict = own_tests.judge(
        [run(collection, note="collection: ImportError")],
        {FILE.name: Expectation("gap", "x"), B: Expectation("gap", "y")},
        baseline,
    )
    assert verdict.unexpected == [(A, "missing", "collection: ImportError")]
    assert not verdict.now_passing and not verdict.not_run


def test_a_recorded_test_a_clean_checkout_lacks_is_absent_not_failed() -> None:
    verdict = own_tests.judge(
        [run({A: ("passed", "")})], {C: Expectation("gap", "z")}, {A: "passed", B: "passed"}
    )
    assert verdict.absent == [B, C]
    assert not verdict.unexpected and not verdict.not_run
    crashed = own_tests.FileRun(FILE, "crashed", 1.0, {A: ("passed", "")}, "crashed in x")
    verdict = own_tests.judge([crashed], {C: Expectation("gap", "z")}, {B: "passed"})
    assert verdict.unexpected == [(B, "missing", "crashed in x")] and verdict.not_run == [C]
    assert not verdict.absent


def test_a_skip_is_unexpected_only_where_flax_passes() -> None:
    outcomes = {A: ("skipped", ""), B: ("skipped", "")}
    verdict = own_tests.judge([run(outcomes)], {}, {A: "passed", B: "skipped"})
    assert [u[0] for u in verdict.unexpected] == [A]


def test_a_listed_test_that_no_longer_exists_is_reported() -> None:
    verdict = own_tests.judge([run({A: ("passed", "")})], {C: Expectation("flax", "z")}, {})
    assert verdict.absent == [C] and not verdict.not_run and not verdict.unexpected


def test_rewriting_keeps_reasons_drops_passes_and_sorts_new_failures() -> None:
    old = {A: Expectation("gap", "kept reason"), B: Expectation("gap", "now passes")}
    outcomes = {A: ("failed", "m"), B: ("passed", ""), C: ("error", "new")}
    new = own_tests.rewrite_expectations([run(outcomes)], old, {}, {C: "failed"})
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
    assert set(QUICK) <= names and all(e.reason for e in EXCLUDED)


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


def test_a_client_variable_can_name_the_checkout(tmp_path: Path) -> None:
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


def write_project(root: Path, pyproject: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(pyproject)
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("pyproject", "files", "client", "version"),
    [
        ('[project]\nname = "google-tunix"\nversion = "0.1.7"\n', {}, "tunix", "0.1.7"),
        (
            '[project]\nname = "qwix"\nversion = "0.0.0"\n',
            {"qwix/__init__.py": '__version__ = "0.1.8"\n'},
            "qwix",
            "0.1.8",
        ),
        (
            '[project]\nname = "MaxText"\ndynamic = ["version"]\n'
            '[tool.hatch.version]\npath = "src/maxtext/__init__.py"\n',
            {"src/maxtext/__init__.py": "__version__ = '0.2.4'\n"},
            "maxtext",
            "0.2.4",
        ),
        (
            '[project]\nname = "qwix"\ndynamic = ["version"]\n'
            '[tool.setuptools.dynamic]\nversion = {attr = "qwix.version.__version__"}\n',
            {"qwix/version.py": '__version__ = "0.1.6"\n'},
            "qwix",
            "0.1.6",
        ),
    ],
)
def test_a_checkout_is_identified_by_its_own_metadata(
    tmp_path: Path, pyproject: str, files: dict[str, str], client: str, version: str
) -> None:
    checkout = own_tests.identify(write_project(tmp_path / "c", pyproject, files))
    assert (checkout.client.name, checkout.version) == (client, version)
    assert own_tests.identify(checkout.root, release="9.9.9").version == "9.9.9"


def test_a_release_tag_on_the_checkouts_head_names_its_version(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "q",
        '[project]\nname = "qwix"\ndynamic = ["version"]\n',
        {"qwix/version.py": '__version__ = "0.1.6"\n'},
    )
    assert own_tests.identify(root).version == "0.1.6"
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"], ["tag", "v0.1.8"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=60)
    assert own_tests.identify(root).version == "0.1.8"
    subprocess.run([*git, "tag", "qwix-v0.1.9"], check=True, capture_output=True, timeout=60)
    assert own_tests.identify(root).version == "0.1.9"


def test_a_checkout_that_is_no_client_or_names_no_release_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no pyproject\.toml"):
        own_tests.identify(tmp_path)
    other = write_project(tmp_path / "o", '[project]\nname = "numpy"\nversion = "2.0"\n')
    with pytest.raises(SystemExit, match="none of the contract's clients"):
        own_tests.identify(other)
    bare = write_project(tmp_path / "q", '[project]\nname = "qwix"\nversion = "0.0.0"\n')
    with pytest.raises(SystemExit, match="--release"):
        own_tests.identify(bare)


def test_only_the_checkouts_client_files_are_selected(tmp_path: Path) -> None:
    root = write_project(tmp_path / "q", '[project]\nname = "qwix"\nversion = "0.1.8"\n')
    checkout = own_tests.identify(root)
    files = own_tests.selected(checkout, "all", None)
    assert files and all(f.client == "qwix" for f in files)
    assert {f.name for f in files} == {f.name for f in ALL if f.client == "qwix"}
    only = own_tests.selected(checkout, "quick", ["ptq"])
    assert [f.name for f in only] == ["qwix/tests/_src/providers/ptq_test.py"]


def test_a_binding_record_proves_flaxgraph_and_the_release(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    inside = str(venv / "lib" / "site-packages" / "qwix" / "__init__.py")
    good = {"flax.nnx": "flaxgraph", "real_flax_nnx_modules": [], "client_module": inside}
    assert own_tests.unproven(good, True, venv) == ""
    real = {**good, "real_flax_nnx_modules": ["flax.nnx.module"]}
    assert "real modules loaded: flax.nnx.module" in own_tests.unproven(real, True, venv)
    assert own_tests.unproven({**good, "flax.nnx": "flax.nnx"}, True, venv)
    assert own_tests.unproven({**good, "flax.nnx": "flax.nnx"}, False, venv) == ""
    source = {**good, "client_module": str(tmp_path / "checkout" / "qwix" / "__init__.py")}
    assert "came from" in own_tests.unproven(source, False, venv)
    assert "came from nowhere" in own_tests.unproven({**good, "client_module": None}, True, venv)


def test_another_release_replaces_the_pin_and_nothing_else() -> None:
    text = "# head\nflax==0.12.8\nQwix==0.1.8\nqwix-extra==1.0\n"
    new = own_tests.with_release(text, "qwix", "0.1.6")
    assert new == "# head\nflax==0.12.8\nqwix==0.1.6\nqwix-extra==1.0\n"
    with pytest.raises(ValueError, match="pin no maxtext"):
        own_tests.with_release(text, "maxtext", "0.2.4")


def test_the_maxtext_ci_subset_is_part_of_all_and_each_scenario_is_named_once() -> None:
    names = [s.name for s in maxtext_trainer.SCENARIOS]
    assert len(set(names)) == len(names) == 4
    assert set(maxtext_trainer.SUBSETS["ci"]) <= set(maxtext_trainer.SUBSETS["all"])
    assert {s.scan_layers for s in maxtext_trainer.SCENARIOS} == {True, False}
    assert set(maxtext_trainer.RUNNERS) == {s.kind for s in maxtext_trainer.SCENARIOS}


def test_maxtexts_metrics_and_restore_line_are_read(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        '{"step": 0.0, "learning/loss": 6.5}\n{"step": 1.0, "learning/loss": 6.25}\n'
    )
    assert maxtext_trainer.losses_of(metrics) == {0: 6.5, 1: 6.25}
    assert maxtext_trainer.losses_of(tmp_path / "absent.jsonl") == {}
    log = tmp_path / "run.log"
    log.write_text("I1201 x.py:1] restoring from this run's directory step 2\nother\n")
    assert maxtext_trainer.restored_step(log) == 2
    log.write_text("no restore here\n")
    assert maxtext_trainer.restored_step(log) is None


def test_maxtexts_own_test_tools_complete_its_closure_without_overlap() -> None:
    def pins(name: str) -> dict[str, str]:
        out = {}
        for line in (CLIENTS / name).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                dist, version = line.split(";")[0].strip().split("==")
                out[dist.lower()] = version
        return out

    contract, tools = pins("maxtext-requirements.txt"), pins("maxtext-own-tests-requirements.txt")
    assert not contract.keys() & tools.keys()
    assert contract["maxtext"] == "0.2.4" and "pytest" in tools and "pytest-timeout" in tools
    assert (contract["jax"], contract["jaxlib"], contract["flax"]) == ("0.10.2", "0.10.2", "0.12.8")
    assert set(own_tests.TEST_TOOLS) == {"clients", "maxtext"}
