"""Tests of flaxgraph/nn/attention_ops.py against a NumPy softmax(QKᵀ/√d)V."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxgraph.nn import (
    LayerShapeError,
    combine_masks,
    dot_product_attention,
    make_attention_mask,
    make_causal_mask,
)

RNG = np.random.default_rng(3)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_dot_product_attention(reference_attention):
    q, k, v = rand(2, 4, 3, 8), rand(2, 6, 3, 8), rand(2, 6, 3, 5)
    close(dot_product_attention(q, k, v), reference_attention(q, k, v))
    mask = make_attention_mask(jnp.ones((2, 4)), jnp.array([[1, 1, 1, 0, 0, 1]] * 2))
    close(dot_product_attention(q, k, v, mask=mask), reference_attention(q, k, v, mask))


def test_is_causal_and_bias(reference_attention):
    q = k = v = rand(1, 5, 2, 4)
    causal = make_causal_mask(jnp.ones((1, 5)))
    close(dot_product_attention(q, k, v, is_causal=True), reference_attention(q, k, v, causal))
    # a large negative bias acts as a mask
    bias = jnp.where(causal > 0, 0.0, -1e9)
    close(dot_product_attention(q, k, v, bias=bias), reference_attention(q, k, v, causal))


def test_masks():
    causal = make_causal_mask(jnp.ones((2, 3)))
    assert causal.shape == (2, 1, 3, 3)
    close(causal[0, 0], np.tril(np.ones((3, 3))))
    assert make_causal_mask(jnp.ones((3,)), extra_batch_dims=2).shape == (1, 1, 1, 3, 3)
    pad = make_attention_mask(jnp.array([1, 1, 0]), jnp.array([1, 0, 1]))
    close(pad[0], np.outer([1, 1, 0], [1, 0, 1]))
    both = combine_masks(causal, None, jnp.ones((2, 1, 3, 3)), dtype=jnp.bool_)
    assert both.dtype == jnp.bool_
    close(both[1, 0], np.tril(np.ones((3, 3))))
    assert combine_masks(None, None) is None
    with pytest.raises(ValueError, match="one rank"):
        combine_masks(jnp.ones((3, 3)), jnp.ones((1, 3, 3)))


def test_dot_product_attention_shape_errors():
    with pytest.raises(LayerShapeError, match=r"query heads \(2\) must be a multiple of key"):
        dot_product_attention(rand(1, 4, 2, 8), rand(1, 4, 3, 8), rand(1, 4, 3, 8))
    with pytest.raises(LayerShapeError, match="key and value lengths must match"):
        dot_product_attention(rand(1, 4, 2, 8), rand(1, 4, 2, 8), rand(1, 5, 2, 8))
    with pytest.raises(ValueError, match="same rank"):
        dot_product_attention(rand(1, 4, 2, 8), rand(4, 2, 8), rand(4, 2, 8))
    with pytest.raises(ValueError, match="batch dims must match"):
        dot_product_attention(rand(1, 4, 2, 8), rand(2, 4, 2, 8), rand(2, 4, 2, 8))
    with pytest.raises(ValueError, match="depths must match"):
        dot_product_attention(rand(1, 4, 2, 8), rand(1, 4, 2, 7), rand(1, 4, 2, 8))


@pytest.mark.parametrize("kv_heads", [1, 2, 3])
def test_grouped_query_attention_equals_repeated_heads(reference_attention, kv_heads):
    # query head i uses key/value head i // (6 // kv_heads), as jax.nn does
    q, k, v = rand(2, 4, 6, 8), rand(2, 5, kv_heads, 8), rand(2, 5, kv_heads, 8)
    rep = 6 // kv_heads
    want = reference_attention(q, jnp.repeat(k, rep, axis=-2), jnp.repeat(v, rep, axis=-2))
    close(dot_product_attention(q, k, v), want)
    close(dot_product_attention(q, k, v), jax.nn.dot_product_attention(q, k, v))


def test_attention_dropout():
    q = k = v = rand(2, 4, 2, 8)
    no_drop = dot_product_attention(q, k, v)
    same = dot_product_attention(q, k, v, dropout_rate=0.5, deterministic=True)
    close(same, no_drop)
    dropped = dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=jax.random.key(0))
    assert not np.allclose(dropped, no_drop)
    with pytest.raises(ValueError, match="no dropout_rng"):
        dot_product_attention(q, k, v, dropout_rate=0.5)
