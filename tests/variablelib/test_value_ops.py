"""Tests of flaxgraph/variablelib/value_ops.py: indexing a Variable as Flax 0.12 does."""

import jax.numpy as jnp

import flaxgraph as nnx


def test_ellipsis_assignment_of_a_scalar_writes_into_the_array():
    # Flax 0.12: v[...] = 2 keeps the array (shape and dtype), it does not store an int.
    v = nnx.Param(jnp.zeros((2,), jnp.int32))
    v[...] = 2
    assert v[...].dtype == jnp.int32 and v[...].tolist() == [2, 2]
    v[...] = jnp.ones(3)  # an array still replaces the value (a plain Variable)
    assert v.shape == (3,)


def test_getitem_reads_through_an_overridden_get_value():
    class Plus3(nnx.Param):
        def get_value(self, **kwargs):
            return super().get_value(**kwargs) + 3

    assert Plus3(jnp.array(1))[...] == 4
