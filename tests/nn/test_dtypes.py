"""Tests of flaxgraph/nn/dtypes.py: the computation-dtype rules."""

import jax.numpy as jnp
import pytest

from flaxgraph.nn.dtypes import canonicalize_dtype, promote_dtype, stats_dtype


def test_canonicalize_dtype():
    assert canonicalize_dtype(jnp.ones(2, jnp.bfloat16), jnp.ones(2)) == jnp.float32
    assert canonicalize_dtype(jnp.ones(2, jnp.int32)) == jnp.float32
    assert canonicalize_dtype(jnp.ones(2, jnp.int32), inexact=False) == jnp.int32
    assert canonicalize_dtype(jnp.ones(2), dtype=jnp.bfloat16) == jnp.bfloat16
    assert canonicalize_dtype(None, jnp.ones(2, jnp.float16)) == jnp.float16
    with pytest.raises(ValueError, match="inexact"):
        canonicalize_dtype(jnp.ones(2), dtype=jnp.int32)


def test_promote_dtype():
    a, b, c = promote_dtype((jnp.ones(2, jnp.bfloat16), None, jnp.ones(3)), dtype=None)
    assert a.dtype == c.dtype == jnp.float32 and b is None
    (a,) = promote_dtype((jnp.ones(2),), dtype=jnp.bfloat16)
    assert a.dtype == jnp.bfloat16


def test_stats_dtype():
    assert stats_dtype(jnp.bfloat16) == jnp.float32
    assert stats_dtype(jnp.float32) == jnp.float32
