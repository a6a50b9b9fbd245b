"""Tests of flaxgraph/transforms/ref_writes.py: Ref-backed Variables on the fast path
of nnx.jit / nnx.vmap / nnx.scan behave exactly as plain Variables do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx

FLAGS = [dict(ref=True), dict(hijax=True)]


class Counter(nnx.Module):
    def __init__(self, **flags):
        self.w = nnx.Param(jnp.arange(3.0), **flags)
        self.count = nnx.BatchStat(jnp.zeros(()), **flags)

    def __call__(self, x):
        self.count[...] += 1.0
        return x * self.w[...]


def plain_and_ref(flags):
    return Counter(), Counter(**flags)


@pytest.mark.parametrize("flags", FLAGS)
@settings(max_examples=15, deadline=None)
@given(steps=st.lists(st.floats(-2, 2, width=32), min_size=1, max_size=6))
def test_jit_updates_match_plain_variables(flags, steps):
    @nnx.jit
    def step(m, lr):
        m.w[...] = m.w[...] - lr * m.w[...] ** 2
        return m(jnp.ones(3))

    plain, refd = plain_and_ref(flags)
    for lr in steps:
        a, b = step(plain, lr), step(refd, lr)
        np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(plain.w[...], refd.w[...])
    assert float(refd.count[...]) == len(steps)
    assert step.cache_info().general_calls <= 2  # one per model


@pytest.mark.parametrize("flags", FLAGS)
def test_the_refs_are_kept_and_written(flags):
    m = Counter(**flags)
    ref = m.w.get_raw_value()
    step = nnx.jit(lambda m: m(jnp.ones(3)))
    for _ in range(4):
        step(m)
    assert m.w.get_raw_value() is ref
    assert float(m.count.get_raw_value()[...]) == 4.0
    assert step.cache_info() == (1, 1)


@pytest.mark.parametrize("flags", FLAGS)
def test_returned_values_are_not_the_refs_own_arrays(flags):
    m = Counter(**flags)

    @nnx.jit
    def read(m):
        return m.w[...]  # an input value returned unchanged

    for _ in range(3):
        out = read(m)
    m.w[...] = jnp.zeros(3)  # an eager write into the Ref
    np.testing.assert_allclose(out, [0.0, 1.0, 2.0])

    @nnx.jit
    def bump(m):
        m.w[...] = m.w[...] + 1.0
        return m.w[...]  # the new value, returned and written

    for _ in range(3):
        out = bump(m)
    np.testing.assert_allclose(out, [3.0, 3.0, 3.0])
    m.w[...] = jnp.full(3, 7.0)
    np.testing.assert_allclose(out, [3.0, 3.0, 3.0])
    np.testing.assert_allclose(m.w[...], [7.0, 7.0, 7.0])


@pytest.mark.parametrize("flags", FLAGS)
def test_a_value_that_does_not_fit_raises_and_writes_nothing(flags):
    m = Counter(**flags)

    @nnx.jit
    def grow(m, x):
        m.count[...] += 1.0
        m.w[...] = jnp.broadcast_to(m.w[...], x.shape)  # takes x's shape
        return x

    grow(m, jnp.ones(3))
    grow(m, jnp.ones(3))
    assert grow.cache_info().plans == 1
    with pytest.raises(ValueError, match="Ref-backed"):
        grow(m, jnp.ones((2, 3)))
    assert float(m.count[...]) == 2.0
    assert m.w.shape == (3,)


@pytest.mark.parametrize("flags", FLAGS)
def test_donation_keeps_the_refs_intact(flags):
    m = Counter(**flags)
    step = nnx.jit(lambda m: m(jnp.ones(3)), donate_argnums=0)
    for _ in range(3):
        step(m)
    assert float(m.count[...]) == 3.0
    np.testing.assert_allclose(m.w[...], [0.0, 1.0, 2.0])


@pytest.mark.parametrize("flags", FLAGS)
def test_eager_vmap_and_scan_take_the_fast_path(flags):
    class Stack(nnx.Module):
        def __init__(self, **flags):
            self.w = nnx.Param(jnp.ones((4, 3)), **flags)
            self.count = nnx.BatchStat(jnp.zeros(()), **flags)

    m = Stack(**flags)

    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.Param: 0, ...: None}), 0))
    def apply(m, x):
        return x * m.w[...]

    for _ in range(3):
        y = apply(m, jnp.ones((4, 3)))
    assert y.shape == (4, 3)
    assert apply.cache_info().general_calls == 1

    counter = Counter(**flags)

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def body(c, x):
        return c, c(x)

    for _ in range(3):
        _, ys = body(counter, jnp.ones((4, 3)))
    assert float(counter.count[...]) == 12.0 and ys.shape == (4, 3)
    assert isinstance(counter.count.get_raw_value(), jax.Ref)


def test_jax_jit_on_a_ref_backed_module_sees_the_refs():
    m = Counter(ref=True)
    leaves = jax.tree.leaves(m)
    assert all(isinstance(x, jax.Ref) for x in leaves)
