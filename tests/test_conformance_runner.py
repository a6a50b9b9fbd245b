"""The conformance runner's parts: the import rewrite, the flax binding, the verdict.

``make conformance`` itself runs Flax's suite (minutes); these check its pieces on
small inputs, so a broken runner cannot silently report a green contract.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent / "conformance"


def _load(name: str) -> types.ModuleType:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(name)


rewrite = _load("rewrite")
compare = _load("compare")

SAMPLE = '''"""doc"""
from __future__ import annotations
import os
from flax import nnx
from flax import errors, nnx as n2
import flax
from flax.nnx import (
    traversals,
    statelib as sl,
)
from . import sibling
def f():
  from flax.nnx.graphlib import RefMap
  return RefMap
x = 1
'''


def test_rewrite_keeps_line_numbers_and_touches_only_flax_imports():
    out, n = rewrite.rewrite_source(SAMPLE)
    assert n == 5
    src, new = SAMPLE.splitlines(), out.splitlines()
    assert len(new) == len(src)
    for kept in ("import os", "from . import sibling", "def f():", "  return RefMap", "x = 1"):
        assert new[src.index(kept)] == kept  # other imports and code: unchanged, same line
    assert new[src.index("    traversals,")] == ""  # a multi-line import becomes one line + blanks
    assert new[src.index("  from flax.nnx.graphlib import RefMap")].startswith(
        "  import _flaxgraph_binding"
    )


def test_rewrite_rejects_star_imports():
    with pytest.raises(ValueError, match="line 1"):
        rewrite.rewrite_source("from flax.nnx import *\n")


def test_rewritten_imports_bind_flax_nnx_to_flaxgraph(tmp_path, monkeypatch):
    pytest.importorskip("flax")
    binding = (HERE / "binding.py").read_text()
    (tmp_path / "_flaxgraph_binding.py").write_text(binding)
    monkeypatch.syspath_prepend(str(tmp_path))
    source, _ = rewrite.rewrite_source(
        "from flax import nnx, errors, linen\n"
        "from flax.nnx import statelib, not_a_name_anywhere\n"
        "from flax.nnx.transforms import general\n"
        "import flax\n"
        "import flax.nnx as nnx2\n"
    )
    namespace: dict = {}
    exec(compile(source, "sample.py", "exec"), namespace)
    import flax.linen as real_linen

    import flaxgraph

    assert namespace["nnx"] is flaxgraph and namespace["nnx2"] is flaxgraph
    assert namespace["flax"].nnx is flaxgraph
    assert namespace["statelib"] is flaxgraph.statelib
    assert namespace["linen"] is real_linen
    assert namespace["errors"].TraceContextError is flaxgraph.errors.TraceContextError
    assert namespace["errors"].ScopeParamNotFoundError.__module__.startswith("flax")
    stand_in = namespace["not_a_name_anywhere"]
    with pytest.raises(AttributeError, match="not provided by flaxgraph"):
        stand_in()

    class Sub(stand_in):  # subclassing a missing base still defines the class
        pass

    with pytest.raises(AttributeError):
        Sub()


def test_parse_deviations_reports_bad_lines():
    ok = compare.parse_deviations("# c\n\na.py::T::t | a reason\n")
    assert ok == {"a.py::T::t": "a reason"}
    with pytest.raises(ValueError, match="line 1"):
        compare.parse_deviations("a.py::T::t\n")
    with pytest.raises(ValueError, match=r"line 2: .* twice"):
        compare.parse_deviations("a.py::t | r\na.py::t | r\n")


outcome = st.sampled_from(["passed", "failed", "error", "skipped"])
ids = st.lists(
    st.from_regex(r"[ab]_test\.py::T::t[0-9]{1,2}", fullmatch=True), unique=True, max_size=12
)


@given(data=st.data(), tests=ids)
def test_verdict_is_ok_exactly_when_the_list_is_the_set_of_failing_tests(data, tests):
    outcomes = {f"tests/nnx/{t}": (data.draw(outcome), "msg") for t in tests}
    listed = data.draw(st.sets(st.sampled_from(tests))) if tests else set()
    verdict = compare.compare(outcomes, {t: "reason" for t in listed})
    failing = {t for t in tests if outcomes[f"tests/nnx/{t}"][0] in ("failed", "error")}
    assert verdict.ok == (failing == listed)
    assert {t for t, _, _ in verdict.unexpected} == failing - listed
    assert {t for t, _ in verdict.now_passing} == listed - failing
    assert sum(c["passed"] for c in verdict.counts.values()) == sum(
        o == "passed" for o, _ in outcomes.values()
    )


def test_a_listed_test_that_did_not_run_is_reported():
    verdict = compare.compare({}, {"a_test.py::T::gone": "r"})
    assert verdict.not_run == ["a_test.py::T::gone"] and not verdict.ok
    partial = compare.compare({}, {"a_test.py::T::gone": "r"}, files=["b_test.py"])
    assert partial.ok


def test_render_has_a_row_per_file_and_the_totals():
    verdict = compare.compare(
        {
            "tests/nnx/a_test.py::T::x": ("passed", ""),
            "tests/nnx/bridge/b_test.py::T::y": ("failed", "E boom"),
        },
        {},
    )
    text = compare.render(verdict)
    assert "a_test.py" in text and "bridge/b_test.py" in text and "TOTAL" in text
    assert "UNEXPECTED failed: bridge/b_test.py::T::y" in text
