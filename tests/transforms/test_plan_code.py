"""The structure checks a plan's generated code runs agree with the snapshot's own
test (``StructureSnapshot.unchanged``), on generated graphs and mutation programs:
the two forms of the one rule "is this graph's GraphDef still the same?"."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import flaxgraph as nnx
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.graphlib.snapshot import StructureSnapshot
from flaxgraph.testing import apply_mutations, graphs, mutations
from flaxgraph.transforms.plan import MISS
from flaxgraph.transforms.plan_code import UNROLL, compile_structure_check


def snapshot_of(root: Any) -> StructureSnapshot:
    return StructureSnapshot([v for _, v in nnx.iter_graph(root) if is_node_or_variable(v)])


@pytest.mark.filterwarnings("ignore")
@settings(max_examples=60, deadline=None)
@given(
    graph=graphs(max_nodes=5, max_depth=2, max_attributes=4),
    steps=mutations(max_steps=3),
    value_only=st.booleans(),
)
def test_generated_checks_agree_with_the_snapshot(graph: Any, steps: Any, value_only: bool) -> None:
    snap = snapshot_of(graph)
    check, source = compile_structure_check(snap)
    assert snap.unchanged() and check() is None, source
    if value_only:
        steps = [s for s in steps if type(s).__name__ == "SetValue"]
    apply_mutations(graph, steps)
    assert (check() is MISS) == (not snap.unchanged()), source


@pytest.mark.parametrize("n", [2, UNROLL + 3])  # written out one by one, and by map
def test_generated_checks_see_each_kind_of_change(n: int) -> None:
    import jax.numpy as jnp

    class Holder(nnx.Module):
        def __init__(self) -> None:
            self.xs = [jnp.ones(()) for _ in range(n)]
            self.d = {str(i): (jnp.zeros(()), None) for i in range(n)}
            self.ps = nnx.List([nnx.Param(jnp.ones(())) for _ in range(n)])

    def changes(h: Holder) -> list[Any]:
        return [
            lambda: h.xs.append(1),  # a list item added
            lambda: h.xs.__setitem__(0, "static"),  # an array replaced by a static
            lambda: h.d.__setitem__("0", (jnp.zeros(()), 1)),  # a tuple's static changed
            lambda: h.ps[0].set_metadata(tag="t"),  # a Variable's metadata
            lambda: setattr(h, "extra", 1),  # an object's structure
        ]

    for i in range(5):
        h = Holder()
        snap = snapshot_of(h)
        check, source = compile_structure_check(snap)
        h.xs[1] = jnp.zeros(())  # new values are no new structure
        h.d["1"] = (jnp.ones(()), None)
        assert check() is None and snap.unchanged(), source
        changes(h)[i]()
        assert check() is MISS and not snap.unchanged(), (i, source)
