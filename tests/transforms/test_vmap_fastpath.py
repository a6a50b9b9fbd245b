"""Eager vmap's fast path (a plan for the outer split, broadcast state by closure,
step-4 templates): property, differential. One vmapped function called again and
again on the same objects, each call doing something different (changing other
Variables, returning other structures, changing the graph), behaves exactly as a
freshly made vmapped function (which takes the general path) on a twin model."""

from __future__ import annotations

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given

import flaxgraph as nnx


class Model(nnx.Module):
    def __init__(self, sharded: bool):
        metadata = {"out_sharding": ("batch", None)} if sharded else {}
        self.stacked = nnx.Param(jnp.arange(6.0).reshape(3, 2), **metadata)
        self.w = nnx.Param(jnp.ones(2))
        self.count = nnx.BatchStat(jnp.zeros(()))

    def __call__(self, x):
        return x * self.w.value + self.stacked.value


def behaviour(kind: int, model: Model, x):
    """What the vmapped function does on a call of kind ``kind``."""
    if kind == 0:  # nothing changes
        return model(x)
    if kind == 1:  # a broadcast Variable changes
        model.count.value = model.count.value + 1
        return model(x)
    if kind == 2:  # a mapped Variable changes, another output structure
        model.stacked.value = model.stacked.value * 2
        return {"y": model(x), "x": x}
    if kind == 3:  # the output is an input array, in a tuple
        return (x, model.w.value)
    if kind == 4:  # a structural change inside: a new attribute
        model.extra = nnx.BatchStat(jnp.ones(()))
        return model(x)
    return [model(x), model(x) * 2]  # kind 5: a list output


IN_AXES = (nnx.StateAxes({nnx.PathContains("stacked"): 0, ...: None}), 0)


def leaves(x) -> list:
    return [np.asarray(v) for v in jax.tree.leaves(x)]


def state_of(model: Model) -> dict:
    return {p: np.asarray(v) for p, v in nnx.state(model).flat_state()}


@given(kinds=st.lists(st.integers(0, 5), min_size=2, max_size=8), sharded=st.booleans())
def test_a_reused_vmap_behaves_as_a_fresh_one(kinds, sharded):
    a, b = Model(sharded), Model(sharded)
    call = {"kind": 0}

    def f(model, x):
        return behaviour(call["kind"], model, x)

    reused = nnx.vmap(f, in_axes=IN_AXES, transform_metadata={nnx.PARTITION_NAME: "batch"})
    xs = jnp.arange(6.0).reshape(3, 2)
    for kind in kinds:
        call["kind"] = kind
        fresh = nnx.vmap(f, in_axes=IN_AXES, transform_metadata={nnx.PARTITION_NAME: "batch"})
        got, want = reused(a, xs), fresh(b, xs)
        assert type(got) is type(want)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for g, w in zip(leaves(got), leaves(want)):
            np.testing.assert_array_equal(g, w)
        assert state_of(a).keys() == state_of(b).keys()
        for k, v in state_of(a).items():
            np.testing.assert_array_equal(v, state_of(b)[k], err_msg=str(k))
        assert a.stacked.get_metadata() == b.stacked.get_metadata()
