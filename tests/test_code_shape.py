"""The shape of the code, read from the source with ``ast`` (nothing is imported):
no function in ``flaxgraph/`` has more than ``MAX_CODE_LINES`` lines of code.

A line of code is a line of the function's source that is neither blank, nor a
comment, nor part of its docstring; the signature counts, and so do the lines of
nested functions (they are part of reading the outer one).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flaxgraph"
MAX_CODE_LINES = 100

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _docstring_lines(node: _Function) -> set[int]:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return set()


def code_lines(source_lines: list[str], node: _Function) -> int:
    """The lines of code of the function ``node`` (see the module docstring)."""
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    skip = _docstring_lines(node)
    count = 0
    for number in range(start, (node.end_lineno or node.lineno) + 1):
        text = source_lines[number - 1].strip()
        if text and not text.startswith("#") and number not in skip:
            count += 1
    return count


def long_functions(source: str, limit: int = MAX_CODE_LINES) -> list[tuple[str, int, int]]:
    """``(name, first line, code lines)`` of every function of ``source`` over ``limit``."""
    lines = source.splitlines()
    return [
        (node.name, node.lineno, n)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, _Function) and (n := code_lines(lines, node)) > limit
    ]


def test_no_function_has_more_than_100_lines_of_code() -> None:
    offenders = [
        f"{file.relative_to(ROOT)}:{line} {name} ({n} lines of code)"
        for file in sorted(PACKAGE.rglob("*.py"))
        for name, line, n in long_functions(file.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        f"Functions over {MAX_CODE_LINES} lines of code: {offenders}. Split each into "
        "functions of one step each (a helper per concept, not per line budget)."
    )


def test_the_count_skips_blanks_comments_and_the_docstring() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CODE_LINES - 2))
    source = (
        "def f(\n    a,\n):\n"  # the signature: 3 lines
        '    """A docstring\n\n    over lines."""\n'
        "    # a comment\n\n"
        f"{body}\n"
    )
    assert long_functions(source) == [("f", 1, MAX_CODE_LINES + 1)]
    assert long_functions(source, MAX_CODE_LINES + 1) == []
