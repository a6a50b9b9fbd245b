"""Tests of flaxgraph/graphlib/contexts.py: split/merge contexts and update_context
(the four-step in-place update across a transform boundary)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.errors import SharedReferenceError
from flaxgraph.testing import Node


class Counter(nnx.Module):
    def __init__(self):
        self.n = nnx.BatchStat(jnp.array(0))
        self.w = nnx.Param(jnp.ones(2))


def roundtrip(m, inner_fn, *, jit=True, tag="t"):
    """Steps (1)-(4) of an update context around ``inner_fn(model)``."""

    def inner(graphdef, state):
        with nnx.merge_context(tag, inner=True) as ctx:
            m2 = ctx.merge(graphdef, state)
        out = inner_fn(m2)
        with nnx.split_context(tag) as ctx:
            return ctx.split(m2), out

    with nnx.update_context(tag):
        with nnx.split_context(tag) as ctx:
            graphdef, state = ctx.split(m)
        (graphdef_out, state_out), out = (jax.jit(inner) if jit else inner)(graphdef, state)
        with nnx.merge_context(tag, inner=False) as ctx:
            m3 = ctx.merge(graphdef_out, state_out)
    return m3, out


@pytest.mark.parametrize("jit", [True, False])
def test_update_context_updates_the_callers_object_in_place(jit):
    m = Counter()
    w = m.w

    def body(inner):
        inner.n.value = inner.n.value + 1
        inner.note = "seen"  # a new static attribute
        inner.me = inner  # a new cycle
        inner.extra = nnx.Param(jnp.zeros(1))  # a new Variable
        return inner.w.value.sum()

    m3, out = roundtrip(m, body, jit=jit)
    assert m3 is m and m.w is w
    assert int(m.n.value) == 1 and m.note == "seen" and m.me is m
    assert isinstance(m.extra, nnx.Param)
    assert float(out) == 2.0


def test_update_context_works_again_on_a_cached_jit_call():
    m = Counter()
    traces = []
    tag = "cached"

    @jax.jit
    def inner(graphdef, state):
        traces.append(1)
        with nnx.merge_context(tag, inner=True) as ctx:
            m2 = ctx.merge(graphdef, state)
        m2.n.value = m2.n.value + 1
        with nnx.split_context(tag) as ctx:
            return ctx.split(m2)

    for _ in range(3):
        with nnx.update_context(tag):
            with nnx.split_context(tag) as ctx:
                graphdef, state = ctx.split(m)
            graphdef_out, state_out = inner(graphdef, state)
            with nnx.merge_context(tag) as ctx:  # inner=None: outside, by trace
                assert ctx.merge(graphdef_out, state_out) is m
    assert int(m.n.value) == 3 and len(traces) == 1


def test_update_context_as_decorator_and_current_update_context():
    @nnx.update_context("deco")
    def f():
        return nnx.current_update_context("deco")

    a, b = f(), f()
    assert isinstance(a, nnx.UpdateContext) and a is not b and a.tag == "deco"
    with pytest.raises(ValueError, match="No update context with tag 'deco'"):
        nnx.current_update_context("deco")
    with nnx.update_context("x") as outer, nnx.update_context("x") as inner:
        assert nnx.current_update_context("x") is inner is not outer


def test_merge_context_without_update_context_builds_new_objects():
    m = Counter()
    with nnx.split_context() as ctx:
        graphdef, state = ctx.split(m)
    with nnx.merge_context() as ctx:
        new = ctx.merge(graphdef, state)
    assert new is not m and new.w is m.w
    with nnx.merge_context() as ctx:
        assert ctx.merge(graphdef, state, copy=True).w is not m.w


def test_split_context_sharing_across_graphs_graph_and_tree_mode():
    shared = nnx.Param(jnp.ones(1))
    a, b = Node(w=shared), Node(w=shared)
    with nnx.split_context() as ctx:
        ctx.split(a, graph=False)  # a alone is a tree
        with pytest.raises(SharedReferenceError):
            ctx.split(b, graph=False)  # but the context's graphs together are not
    with nnx.split_context() as ctx:
        ga, sa = ctx.split(a)
        gb, sb = ctx.split(b)
    assert len(sb) == 0
    with nnx.merge_context() as ctx:
        a2, b2 = ctx.merge(ga, sa), ctx.merge(gb, sb)
    assert a2.w is b2.w is shared
    np.testing.assert_array_equal(a2.w.value, np.ones(1))
