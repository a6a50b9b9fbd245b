"""cond, switch, while_loop, fori_loop and eval_shape over objects.

Each transformed call is compared with the eager Python equivalent (the branch
taken, or the loop run in Python) on a clone of the same objects.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as flax_nnx
from helpers import assert_unchanged, snapshot

import flaxgraph as nnx
from flaxgraph.testing import Block, Node, assert_graphs_equal


def make() -> Node:
    return Node(
        w=nnx.Param(jnp.array([1.0, 2.0])),
        s=nnx.BatchStat(jnp.zeros(())),
        child=Block(b=nnx.Param(jnp.ones(2))),
        rngs=nnx.Rngs(0),
    )


def up(m: Node, x: jax.Array) -> jax.Array:
    m.s.value = m.s.value + 1
    m.child.b.value = m.child.b.value * x
    return jnp.sin(m.w.value) * x + jax.random.uniform(m.rngs.default())


def down(m: Node, x: jax.Array) -> jax.Array:
    m.s.value = m.s.value - 1
    m.w.value = m.w.value + x
    return jnp.cos(m.w.value) * x + jax.random.uniform(m.rngs.default())


# -- cond / switch ------------------------------------------------------------------------


@pytest.mark.parametrize("pred", [True, jnp.array(False)])
def test_cond_applies_the_taken_branch_like_the_eager_call(pred):
    m = make()
    eager = nnx.clone(m)
    y = nnx.cond(pred, up, down, m, 2.0)
    y_eager = (up if bool(pred) else down)(eager, 2.0)
    np.testing.assert_allclose(y, y_eager, rtol=1e-6)
    assert_graphs_equal(m, eager, rtol=1e-6)


@pytest.mark.parametrize("index", [1, 5, -3])
def test_switch_applies_the_chosen_branch(index):
    def third(m, x):
        m.w.value = m.w.value * 0
        return m.w.value + x + jax.random.uniform(m.rngs.default())

    branches = [up, down, third]
    m = make()
    eager = nnx.clone(m)
    y = nnx.switch(index, branches, m, 2.0)
    # lax.switch clamps the index into range
    y_eager = branches[min(max(index, 0), 2)](eager, 2.0)
    np.testing.assert_allclose(y, y_eager, rtol=1e-6)
    assert_graphs_equal(m, eager, rtol=1e-6)


def test_cond_under_jit_with_a_traced_predicate():
    @nnx.jit
    def f(m, p):
        return nnx.cond(p > 0, up, down, m, 2.0)

    m = make()
    eager = nnx.clone(m)
    for p in (1.0, -1.0, 1.0):
        y = f(m, p)
        y_eager = (up if p > 0 else down)(eager, 2.0)
        np.testing.assert_allclose(y, y_eager, rtol=1e-6)
    assert_graphs_equal(m, eager, rtol=1e-6)


def test_cond_identity_and_new_objects():
    m = make()
    assert nnx.cond(True, lambda m: m, lambda m: m, m) is m
    assert nnx.switch(1, [lambda m: m.w, lambda m: m.w], m) is m.w
    out = nnx.cond(
        False, lambda m: Block(v=nnx.Param(m.w.value)), lambda m: Block(v=nnx.Param(-m.w.value)), m
    )
    assert isinstance(out, Block) and out is not m
    np.testing.assert_allclose(out.v.value, -m.w.value)


def test_cond_branches_with_the_same_structural_change():
    m = make()

    def add(m):
        m.extra = nnx.BatchStat(jnp.ones(()))

    nnx.cond(True, add, add, m)
    assert isinstance(m.extra, nnx.BatchStat) and float(m.extra.value) == 1.0


def test_cond_branches_with_different_structures_name_the_path():
    m = make()
    before, clone = snapshot(m), nnx.clone(m)

    def add(m, x):
        m.extra = nnx.BatchStat(jnp.ones(()))
        return x

    with pytest.raises(
        nnx.CarryStructureError, match=re.escape("args[0].extra: a BatchStat in the first, missing")
    ):
        nnx.cond(True, add, lambda m, x: x, m, 1.0)
    assert_unchanged(m, before, clone)
    with pytest.raises(
        ValueError, match=re.escape("branch 0 and branch 1 differ at args[0].extra")
    ):
        nnx.switch(0, [add, lambda m, x: x], m, 1.0)


def test_cond_branches_returning_different_structures_name_the_output():
    m = make()
    with pytest.raises(nnx.CarryStructureError, match=r"differ at output"):
        nnx.cond(True, lambda m: (m.w.value,), lambda m: [m.w.value], m)


# -- loops ---------------------------------------------------------------------------------


def body(i: Any, m: Node) -> Node:
    m.s.value = m.s.value + i
    m.w.value = m.w.value * 1.5 + jax.random.uniform(m.rngs.default())
    return m


@pytest.mark.parametrize("unroll", [None, 2])
def test_fori_loop_like_a_python_loop(unroll):
    m = make()
    eager = nnx.clone(m)
    out = nnx.fori_loop(0, 5, body, m, unroll=unroll)
    for i in range(5):
        body(jnp.asarray(i), eager)
    assert out is m
    assert_graphs_equal(m, eager, rtol=1e-6)
    assert float(m.s.value) == 10.0 and int(m.rngs.default.count.value) == 5


def test_while_loop_like_a_python_loop():
    m = make()
    eager = nnx.clone(m)

    def cond(c):
        return c[0].s.value < 10

    def step(c):
        m, k = c
        m.s.value = m.s.value + 3
        m.child.b.value = m.child.b.value + k
        return m, k * 2

    out = nnx.while_loop(cond, step, (m, jnp.array(1.0)))
    c = (eager, jnp.array(1.0))
    while cond(c):
        c = step(c)
    assert out[0] is m
    np.testing.assert_allclose(out[1], c[1])
    assert_graphs_equal(m, eager)


def test_loop_carry_with_a_shared_object_and_a_new_object_of_the_same_structure():
    shared = Block(v=nnx.Param(jnp.ones(2)))
    a, b = Node(c=shared), Node(c=shared)

    def f(i, carry):
        a, b = carry
        a.c.v.value = a.c.v.value + 1
        return a, b

    out = nnx.fori_loop(0, 3, f, (a, b))
    assert out[0] is a and out[1] is b and a.c is b.c is shared
    np.testing.assert_allclose(shared.v.value, 4 * np.ones(2))
    # a body may return a fresh graph node holding the same Variables: the caller's
    # object gets its values
    m = make()

    def fresh(i, m):
        m.w.value = m.w.value + 1
        return Node(w=m.w, s=m.s, child=m.child, rngs=m.rngs)

    out = nnx.fori_loop(0, 2, fresh, m)
    assert out is m
    np.testing.assert_allclose(m.w.value, [3.0, 4.0])


@pytest.mark.parametrize("graph, graph_updates", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("loop", ["fori_loop", "while_loop"])
def test_loop_body_replacing_a_variable_names_the_path(loop, graph, graph_updates):
    # As in Flax NNX 0.12 (TestWhileLoop.test_ref_changed): a carry keeps its
    # Variables; a body that assigns a new one raises, leaving the caller's objects.
    m = make()
    before, clone = snapshot(m), nnx.clone(m)

    def replace(m):
        m.child.b = nnx.Param(m.child.b.value + 1)
        return m

    mode = dict(graph=graph, graph_updates=graph_updates)
    with pytest.raises(ValueError, match=r"replaced the Param at carry\.child\.b(.|\n)*Fix"):
        if loop == "fori_loop":
            nnx.fori_loop(0, 2, lambda i, m: replace(m), m, **mode)
        else:
            nnx.while_loop(lambda m: m.s.value < 1, replace, m, **mode)
    assert_unchanged(m, before, clone)


@pytest.mark.parametrize("graph_updates", [True, False])
def test_loop_returns_the_callers_variables(graph_updates):
    # Flax NNX 0.12: the returned carry holds the caller's Variables (with graph
    # updates, the caller's objects themselves).
    m = make()

    def body(i, m):
        m.w.value = m.w.value + 1
        return m

    out = nnx.fori_loop(0, 2, body, m, graph_updates=graph_updates)
    assert out.w is m.w and out.child.b is m.child.b
    assert (out is m) == graph_updates
    np.testing.assert_allclose(m.w.value, [3.0, 4.0])


def test_loop_body_changing_the_structure_names_the_path():
    m = make()
    before, clone = snapshot(m), nnx.clone(m)

    def grow(i, m):
        m.extra = nnx.BatchStat(jnp.ones(()))
        return m

    # Regression: the path used to read `carry[0][0].extra`.
    with pytest.raises(
        nnx.CarryStructureError,
        match=re.escape(
            "body of fori_loop changed the structure of the loop carry: carry.extra: missing in the first, a BatchStat"
        ),
    ):
        nnx.fori_loop(0, 2, grow, m)
    assert_unchanged(m, before, clone)

    def alias(c):
        return {"a": c["a"], "b": c["a"]}

    with pytest.raises(
        ValueError,
        match=re.escape("body of while_loop changed the structure of the loop carry: carry['b']"),
    ):
        nnx.while_loop(lambda c: False, alias, {"a": make(), "b": make()})


CAPTURED = make()


def mutate_captured(*_):
    CAPTURED.s.value = CAPTURED.s.value + 1
    return _[-1] if _ else None


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: nnx.cond(True, mutate_captured, lambda: None), "argument"),
        (lambda: nnx.switch(0, [mutate_captured, lambda: None]), "argument"),
        (lambda: nnx.cond(True, lambda: CAPTURED, lambda: CAPTURED), r"at output(.|\n)*argument"),
        (lambda: nnx.fori_loop(0, 2, mutate_captured, jnp.array(1.0)), "argument"),
        (
            lambda: nnx.while_loop(
                lambda c: c < 2, lambda c: mutate_captured(c) + 1, jnp.array(1.0)
            ),
            "argument",
        ),
    ],
    ids=["cond-mutates", "switch-mutates", "cond-returns", "fori_loop", "while_loop"],
)
def test_captured_objects_may_be_read_but_not_mutated_or_returned(call, match):
    before, clone = snapshot(CAPTURED), nnx.clone(CAPTURED)
    with pytest.raises(nnx.TraceContextError, match=match):
        call()
    assert_unchanged(CAPTURED, before, clone)
    # reading is fine
    y = nnx.cond(True, lambda x: CAPTURED.w.value * x, lambda x: x, jnp.ones(2))
    np.testing.assert_allclose(y, CAPTURED.w.value)


# -- eval_shape ----------------------------------------------------------------------------


def test_eval_shape_returns_shapes_and_allocates_nothing():
    calls = []

    def create(n):
        calls.append(1)
        return Node(
            w=nnx.Param(jnp.ones((n, 1000, 1000))), s=nnx.BatchStat(jnp.zeros((), jnp.int32))
        )

    out = nnx.eval_shape(lambda: create(3))
    assert isinstance(out, Node)
    assert out.w.value == jax.ShapeDtypeStruct((3, 1000, 1000), jnp.float32)
    assert out.s.value == jax.ShapeDtypeStruct((), jnp.int32)
    assert not any(isinstance(x, jax.Array) for x in jax.tree.leaves(nnx.state(out)))


def test_eval_shape_leaves_its_arguments_unchanged():
    m = make()
    before, clone = snapshot(m), nnx.clone(m)
    out = nnx.eval_shape(lambda m, x: (up(m, x), m), m, jnp.ones(2))
    assert_unchanged(m, before, clone)
    y, m_shape = out
    assert y == jax.ShapeDtypeStruct((2,), jnp.float32)
    # the returned object is a shape-only copy: the caller's object keeps its arrays
    assert m_shape is not m and m_shape.w.value == jax.ShapeDtypeStruct((2,), jnp.float32)
    assert isinstance(m.w.value, jax.Array)


def test_eval_shape_keeps_sharing_in_its_output():
    out = nnx.eval_shape(lambda: (lambda b: Node(x=b, y=b, v=b.p))(Block(p=nnx.Param(jnp.ones(4)))))
    assert out.x is out.y and out.v is out.x.p


class _Table(nnx.Variable):
    pass


class _FlaxTable(flax_nnx.Variable):
    pass


def _captured_model(lib: Any, table: type) -> Any:
    """A module with a Linear, a Variable of a user's type and a Cache, built by ``lib``."""

    class Holder(lib.Module):
        def __init__(self) -> None:
            self.linear = lib.Linear(2, 3, rngs=lib.Rngs(0))
            self.table = table(jnp.arange(6.0).reshape(3, 2))
            self.cache = lib.Cache(jnp.zeros((2,)))

    return Holder()


def _abstract(out: Any) -> list[tuple[str, Any]]:
    """(path, leaf type name, leaf) for each leaf of an eval_shape result."""
    leaves = jax.tree_util.tree_leaves_with_path(out)
    return [(jax.tree_util.keystr(path), type(leaf).__name__, leaf) for path, leaf in leaves]


@pytest.mark.parametrize(
    "pick",
    [
        lambda lib, m: m,
        lambda lib, m: lib.state(m),
        lambda lib, m: lib.state(m, lib.Cache),
        lambda lib, m: m.cache,
        lambda lib, m: {"model": lib.state(m), "n": 1},
    ],
    ids=["module", "state", "filtered-state", "variable", "nested"],
)
@pytest.mark.parametrize(
    "flags",
    [{}, {"graph_updates": False}, {"graph": False}],
    ids=["graph", "no-updates", "tree"],
)
def test_eval_shape_returns_a_shape_copy_of_a_captured_object_as_flax_does(pick, flags):
    """Flax NNX 0.12.8's ``eval_shape`` checks no trace level on its output: a module,
    State or Variable captured by closure comes back as a shape-only copy (the caller's
    object keeps its arrays), unlike ``jit``, which refuses to return it."""
    results = []
    for lib, table in ((flax_nnx, _FlaxTable), (nnx, _Table)):
        model = _captured_model(lib, table)
        captured = pick(lib, model)
        out = lib.eval_shape(lambda captured=captured: captured, **flags)
        assert out is not captured and type(out).__name__ == type(captured).__name__
        assert all(isinstance(v, jax.Array) for v in jax.tree.leaves(lib.state(model)))
        results.append(_abstract(out))
        with pytest.raises(ValueError, match=r"different trace level|captured Variable"):
            lib.jit(lambda captured=captured: captured, **flags)()
    assert results[0] == results[1]


# -- exception safety ---------------------------------------------------------------------


def mutate_then_fail(m: Node, *_: Any) -> Any:
    m.s.value = m.s.value + 1
    m.w.value = m.w.value * 3
    m.new = nnx.Param(jnp.ones(2))
    del m.child
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: nnx.cond(True, mutate_then_fail, mutate_then_fail, m),
        lambda m: nnx.cond(False, lambda m: m, mutate_then_fail, m),
        lambda m: nnx.switch(1, [mutate_then_fail, mutate_then_fail], m),
        lambda m: nnx.fori_loop(0, 3, lambda i, m: mutate_then_fail(m), m),
        lambda m: nnx.while_loop(lambda m: True, mutate_then_fail, m),
        lambda m: nnx.while_loop(lambda m: mutate_then_fail(m), lambda m: m, m),
        lambda m: nnx.eval_shape(mutate_then_fail, m),
    ],
    ids=[
        "cond",
        "cond-other-branch",
        "switch",
        "fori_loop",
        "while_loop-body",
        "while_loop-cond",
        "eval_shape",
    ],
)
def test_a_failing_function_leaves_the_callers_objects_exactly_as_before(call):
    m = make()
    before, clone = snapshot(m), nnx.clone(m)
    with pytest.raises(RuntimeError, match="boom"):
        call(m)
    assert_unchanged(m, before, clone)
