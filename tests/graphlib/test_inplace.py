"""``update``'s planned writes (flaxgraph/graphlib/inplace.py): plain Variables are
written in C-level passes, Ref-backed ones into their Refs, and a failing check
anywhere leaves every Variable as it was."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import flaxgraph as nnx


class Pair(nnx.Module):
    def __init__(self, fill: float):
        self.plain = nnx.Param(jnp.full(2, fill), note="p")
        self.held = nnx.BatchStat(jnp.full(3, fill), ref=True)


class Stack(nnx.Module):
    def __init__(self):
        self.layers = [Pair(float(i)) for i in range(3)]
        self.table = {"a": Pair(9.0)}


def test_update_from_a_jitted_state_writes_every_kind_in_place() -> None:
    m = Stack()
    before = [v for _, v in nnx.iter_graph(m) if isinstance(v, nnx.Variable)]
    state = jax.jit(lambda s: jax.tree.map(lambda x: x[...] + 1, s))(nnx.state(m))
    nnx.update(m, state)
    after = [v for _, v in nnx.iter_graph(m) if isinstance(v, nnx.Variable)]
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert float(m.layers[2].plain[0]) == 3.0 and float(m.table["a"].held[0]) == 10.0
    assert m.layers[0].held.ref and m.layers[0].plain.note == "p"


def test_update_takes_a_leaf_variables_metadata() -> None:
    m = Stack()
    state = nnx.state(m)
    state["layers"][1]["plain"] = m.layers[1].plain.replace(note="q")
    nnx.update(m, state)
    assert m.layers[1].plain.note == "q" and m.layers[0].plain.note == "p"


def test_a_failing_ref_check_writes_nothing() -> None:
    m = Stack()
    state = jax.tree.map(lambda x: x[...] + 1, nnx.state(m))
    state["table"]["a"]["held"] = nnx.BatchStat(jnp.ones(5))  # a Ref keeps its shape
    with pytest.raises(ValueError):
        nnx.update(m, state)
    assert float(m.layers[2].plain[0]) == 2.0 and float(m.layers[0].held[0]) == 0.0


def test_a_structure_error_deep_in_the_state_names_its_path_and_writes_nothing() -> None:
    m = Stack()
    state = jax.tree.map(lambda x: x[...] + 1, nnx.state(m))
    state["layers"][2]["plain"] = nnx.State({"x": jnp.ones(1)})
    with pytest.raises(nnx.GraphStructureError, match=r"layers/2/plain"):
        nnx.update(m, state)
    assert float(m.layers[1].plain[0]) == 1.0


@settings(deadline=None)
@given(
    refs=st.lists(st.booleans(), min_size=1, max_size=6),
    misfit=st.one_of(st.none(), st.integers(0, 5)),
    through_jit=st.booleans(),
)
def test_the_one_write_back_writes_all_or_nothing(
    refs: list[bool], misfit: int | None, through_jit: bool
) -> None:
    """``update`` and a transform's write-back add every write to one
    ``graphlib.writes.Writes``: whatever the mix of plain and Ref-backed Variables, a
    value that does not fit one Ref leaves every Variable as it was; otherwise every
    Variable holds its new value, in the same Variable object."""
    variables = nnx.List([nnx.Param(jnp.full(2, float(i)), ref=r) for i, r in enumerate(refs)])
    before = list(variables)
    bad = misfit if misfit is not None and misfit < len(refs) and refs[misfit] else None

    def new_value(i: int) -> jax.Array:
        return jnp.ones(3) if i == bad else jnp.full(2, 10.0 + i)

    if through_jit:
        # A Ref cannot change shape inside a trace either (JAX refuses the write:
        # tests/transforms/test_ref_writes.py).
        assume(bad is None)

        @nnx.jit
        def write(vs: nnx.List, step: jax.Array) -> None:
            for i, v in enumerate(vs):
                v[...] = jnp.full(2, 10.0 + i) * step

        write(variables, jnp.float32(0.5))  # the general write-back (build_graph)
        write(variables, jnp.float32(1.0))  # the plan's (RefInstall and slot writes)
        assert write.cache_info().general_calls == 1
    else:
        state = nnx.state(variables)
        for i in range(len(refs)):
            state[i] = nnx.Param(new_value(i))
        if bad is not None:
            with pytest.raises(ValueError, match="Ref-backed"):
                nnx.update(variables, state)
        else:
            nnx.update(variables, state)
    assert all(a is b for a, b in zip(before, variables, strict=True))
    for i, v in enumerate(variables):
        expected = float(i) if bad is not None else 10.0 + i
        assert v[...].shape == (2,) and float(v[...][0]) == expected
