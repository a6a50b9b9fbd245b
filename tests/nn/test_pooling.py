"""Tests of flaxgraph/nn/pooling.py against numpy reshapes."""

import jax.numpy as jnp
import numpy as np
import pytest

from flaxgraph.nn import LayerShapeError, avg_pool, max_pool, min_pool

X = np.random.default_rng(5).normal(size=(2, 4, 6, 3)).astype(np.float32)


def blocks(x):
    # non-overlapping 2x2 windows: (2, 2, 3, 2, 2, 3) -> window axes 2 and 4
    return x.reshape(2, 2, 2, 3, 2, 3)


def test_pools_match_numpy():
    b = blocks(X)
    np.testing.assert_allclose(avg_pool(X, (2, 2), (2, 2)), b.mean((2, 4)), rtol=1e-6)
    np.testing.assert_allclose(max_pool(X, (2, 2), (2, 2)), b.max((2, 4)))
    np.testing.assert_allclose(min_pool(X, (2, 2), (2, 2)), b.min((2, 4)))
    # no batch axis
    np.testing.assert_allclose(max_pool(X[0], (2, 2), (2, 2)), b.max((2, 4))[0])


def test_padding_and_count_include_pad():
    x = jnp.ones((1, 3, 1))
    np.testing.assert_allclose(avg_pool(x, (2,), padding="SAME")[0, :, 0], [1.0, 1.0, 0.5])
    np.testing.assert_allclose(
        avg_pool(x, (2,), padding="SAME", count_include_pad=False)[0, :, 0], [1.0, 1.0, 1.0]
    )
    assert max_pool(x, (3,), padding=[(1, 1)]).shape == (1, 3, 1)


def test_errors():
    with pytest.raises(
        LayerShapeError, match=r"pool\(window_shape=\(2, 2\)\) expected inputs of rank >= 3"
    ):
        max_pool(jnp.ones((4, 4)), (2, 2))
    with pytest.raises(ValueError, match="strides"):
        max_pool(X, (2, 2), (2,))
