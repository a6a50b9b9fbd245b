"""Rewrites the ``flax`` imports of a Flax test file into calls of the binding, line for line.

Every ``import flax…`` and ``from flax… import …`` statement (at any depth: in a
function, a ``try``…) becomes one line of assignments from ``_flaxgraph_binding``
(see ``binding.py``), padded with blank lines to the statement's original height,
so tracebacks point at the same line numbers as in Flax's source. Nothing else in
the file changes.
"""

from __future__ import annotations

import ast

BINDING = "_flaxgraph_binding"


def _is_flax(name: str | None) -> bool:
    return name is not None and (name == "flax" or name.startswith("flax."))


def _translate(node: ast.Import | ast.ImportFrom) -> str | None:
    """The replacement code of one import statement, or ``None`` to keep it."""
    assignments: list[str] = []
    if isinstance(node, ast.Import):
        if not any(_is_flax(a.name) for a in node.names):
            return None
        for alias in node.names:
            if not _is_flax(alias.name):
                assignments.append(
                    f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                )
            elif alias.asname:
                assignments.append(f"{alias.asname} = _fgb.module({alias.name!r})")
            else:  # ``import flax.errors`` binds ``flax``
                assignments.append("flax = _fgb.module('flax')")
    else:
        if node.level or not _is_flax(node.module):
            return None
        for alias in node.names:
            if alias.name == "*":
                raise ValueError(
                    f"line {node.lineno}: 'from {node.module} import *' cannot be bound"
                )
            target = alias.asname or alias.name
            assignments.append(f"{target} = _fgb.attr({node.module!r}, {alias.name!r})")
    return f"import {BINDING} as _fgb; " + "; ".join(assignments)


def rewrite_source(source: str) -> tuple[str, int]:
    """Returns ``(new_source, number_of_statements_rewritten)``.

    Raises:
      SyntaxError: the source does not parse.
      ValueError: a star import from flax.
    """
    lines = source.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            code = _translate(node)
            if code is not None:
                edits.append((node.lineno, node.end_lineno or node.lineno, node.col_offset, code))
    for first, last, col, code in sorted(edits, reverse=True):
        indent = lines[first - 1][:col]
        lines[first - 1 : last] = [indent + code + "\n"] + ["\n"] * (last - first)
    return "".join(lines), len(edits)
