"""The counts of ``tests/code_counts.py`` stay within their limits, and each counter
finds what it claims to count (so a counter that finds nothing cannot pass silently)."""

from __future__ import annotations

import ast
import textwrap

import code_counts
import pytest
from code_counts import COUNTS, LIMITS, Source, count_all, over_limit


def test_every_count_is_within_its_limit() -> None:
    found = count_all()
    over = over_limit(found)
    assert not over, "\n".join(
        f"{name}: {count} > {limit}; sites:\n"
        + "\n".join(f"  flaxgraph/{s.module}:{s.line}: {s.what}" for s in found[name])
        for name, (count, limit) in over.items()
    )


def test_every_count_has_a_limit() -> None:
    assert set(COUNTS) == set(LIMITS)


def test_the_walk_sees_the_package() -> None:
    modules = {src.module for src in code_counts.sources()}
    assert {"graphlib/registry.py", "transforms/lift.py", "__init__.py"} <= modules


def _src(module: str, code: str) -> Source:
    return Source(module, ast.parse(textwrap.dedent(code)))


@pytest.mark.parametrize(
    ("name", "sources", "expected"),
    [
        (
            "duplicate_class_names",
            [_src("a.py", "class P: pass\nclass Q: pass"), _src("b/c.py", "class P: pass")],
            1,
        ),
        (
            "duplicate_class_names",  # Flax's own two Modules are allowed
            [
                _src("module_class.py", "class Module: pass"),
                _src("bridge/module.py", "class Module: pass"),
            ],
            0,
        ),
        (
            "record_setattr",
            [
                _src(
                    "transforms/x.py",
                    """
                    class R:
                        def __init__(self, v):
                            object.__setattr__(self, "v", v)
                        def later(self):
                            object.__setattr__(self, "v", 2)
                    """,
                ),
                _src("pytreelib/o.py", "def f(o):\n    object.__setattr__(o, 'a', 1)"),
            ],
            1,
        ),
        (
            "object_setattr",
            [
                _src(
                    "transforms/x.py",
                    "class R:\n    def __init__(self, v):\n        object.__setattr__(self, 'v', v)",
                ),
                _src("variablelib/v.py", "def f(o):\n    object.__setattr__(o, 'a', 1)"),
            ],
            1,
        ),
        (
            "duplicate_private_constants",
            [_src("a.py", "_LIMIT = 8\n_ONLY_HERE = 1"), _src("b.py", "_LIMIT: int = 8")],
            1,
        ),
        (
            "zip_filled_records",
            [
                _src(
                    "t.py",
                    """
                    class R:
                        def __init__(self, *values):
                            for k, v in zip(self._fields, values):
                                setattr(self, k, v)
                    def g(*xs):
                        return list(zip(xs, xs))
                    """,
                )
            ],
            1,
        ),
        (
            "bare_any",
            [
                _src(
                    "graphlib/g.py",
                    "def f(a: Any, b: list[Any], c: 'Any') -> typing.Any:\n    x: Any = a",
                ),
                _src("nn/n.py", "def f(a: Any) -> Any: ..."),
            ],
            4,
        ),
        (
            "registry_table_reads",
            [
                _src("graphlib/walk.py", "k = REGISTRY.kinds.get(t)\ni = GRAPH_NODE_IMPLS[t]"),
                _src("graphlib/registry.py", "x = REGISTRY.impls"),
            ],
            2,
        ),
        (
            "isinstance_variable",
            [
                _src("graphlib/g.py", "isinstance(x, Variable)\nisinstance(x, (int, v.Variable))"),
                _src("variablelib/v.py", "isinstance(x, Variable)"),
            ],
            2,
        ),
        (
            "module_docstrings",
            [
                _src("a.py", "x = 1"),
                _src("b.py", '"""\nLate first line."""'),
                _src("c.py", '"""Holds c."""'),
                _src("d.py", '"""The records of the graph engine."""'),
            ],
            3,
        ),
    ],
)
def test_each_counter_counts_what_it_says(name: str, sources: list[Source], expected: int) -> None:
    assert len(COUNTS[name](sources)) == expected


def test_the_script_fails_over_a_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(LIMITS, "bare_any", 0)
    assert code_counts.main([]) == 1
    assert "bare_any" in capsys.readouterr().err
