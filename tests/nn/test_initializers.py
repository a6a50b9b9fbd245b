"""Tests of flaxgraph/nn/initializers.py: re-exports of jax.nn.initializers."""

import jax
import jax.numpy as jnp

from flaxgraph.nn import initializers


def test_reexports():
    for name in [
        "lecun_normal",
        "zeros",
        "ones",
        "normal",
        "uniform",
        "orthogonal",
        "variance_scaling",
        "glorot_uniform",
        "he_normal",
        "constant",
    ]:
        assert getattr(initializers, name) is getattr(jax.nn.initializers, name)


def test_zeros_ones_init():
    key = jax.random.key(0)
    assert (initializers.zeros_init()(key, (2,)) == 0).all()
    assert (initializers.ones_init()(key, (2,), jnp.float32) == 1).all()
