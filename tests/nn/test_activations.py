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


def test_prelu_without_dtype_computes_in_the_inputs_dtype():
    # as Linen: the float32 slope is cast to the float16 inputs
    act = nn.PReLU(0.02, param_dtype=jnp.float32)
    x = jnp.linspace(-10, 10, 20, dtype=jnp.float16)
    y = act(x)
    assert y.dtype == jnp.float16
    want = jnp.where(x >= 0, x, jnp.asarray(0.02, jnp.float16) * x)
    np.testing.assert_array_equal(y, want)
    assert nn.PReLU(0.02, dtype=jnp.float32)(x).dtype == jnp.float32
