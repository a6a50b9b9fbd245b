"""Helpers shared by the transform tests: exact "nothing changed" snapshots."""

from typing import Any

import flaxgraph as nnx
from flaxgraph.testing import assert_graphs_equal


def snapshot(root: Any) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for path, v in nnx.iter_graph(root):
        if isinstance(v, nnx.Variable):
            out.append((path, v, v.raw_value, v.get_metadata()))
        elif isinstance(v, nnx.Object):
            out.append((path, v, tuple(sorted(map(str, vars(v))))))
    return out


def assert_unchanged(root: Any, before: list[tuple[Any, ...]], clone: Any = None) -> None:
    """Every node, Variable, value object and metadata is as in ``before``; and, given a
    clone taken before the call, the graph also equals it."""
    after = snapshot(root)
    assert [e[0] for e in after] == [e[0] for e in before]
    for a, b in zip(after, before):
        assert a[1] is b[1], f"a different object at {a[0]}"
        if isinstance(a[1], nnx.Variable):
            assert a[2] is b[2], f"value replaced at {a[0]}"
            assert a[3] == b[3]
        else:
            assert a[2] == b[2], f"attributes changed at {a[0]}"
    if clone is not None:
        assert_graphs_equal(root, clone)
