"""Tests of flaxgraph/nn/activations.py: re-exports of jax.nn and PReLU."""

import jax
import jax.numpy as jnp
import numpy as np

import flaxgraph as nnx
from flaxgraph import nn


def test_reexports_are_jax_nn():
    for name in [
        "relu",
        "gelu",
        "silu",
        "softmax",
        "sigmoid",
        "tanh",
        "log_softmax",
        "leaky_relu",
        "elu",
        "one_hot",
        "swish",
        "softplus",
        "logsumexp",
    ]:
        assert getattr(nn, name) is getattr(jax.nn, name), name


def test_in_sequential():
    model = nnx.Sequential(nn.Linear(2, 3, rngs=nnx.Rngs(0)), nn.relu)
    assert bool((model(jnp.ones((4, 2))) >= 0).all())


def test_prelu():
    act = nn.PReLU(0.25)
    x = jnp.array([-2.0, 0.0, 3.0])
    np.testing.assert_allclose(act(x), [-0.5, 0.0, 3.0])
    assert isinstance(act.negative_slope, nnx.Param)
    g = nnx.grad(lambda m, x: jnp.sum(m(x)))(act, x)
    np.testing.assert_allclose(g["negative_slope"].value, -2.0)
