"""Tests of flaxgraph/rnglib/samplers.py: jax.random samplers as stream methods."""

import inspect

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import flaxgraph as nnx
from flaxgraph.rnglib.samplers import INITIALIZERS, SAMPLERS


def test_every_sampler_is_a_jax_random_function_and_a_method():
    for name in SAMPLERS:
        assert callable(getattr(jax.random, name))
        assert callable(getattr(nnx.RngStream, name)) and callable(getattr(nnx.Rngs, name))
    for name in INITIALIZERS:
        assert callable(getattr(jax.nn.initializers, name))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), draws=st.integers(0, 3))
def test_sampler_equals_jax_random_with_the_streams_next_key(seed, draws):
    rngs = nnx.Rngs(seed, params=seed + 1)
    for _ in range(draws):
        rngs.params()
    got = rngs.params.uniform((2, 5), minval=-1.0)
    key = jax.random.fold_in(jax.random.key(seed + 1), draws)
    np.testing.assert_array_equal(got, jax.random.uniform(key, (2, 5), minval=-1.0))
    assert int(rngs.params.count.value) == draws + 1
    assert int(rngs.default.count.value) == 0


def test_rngs_samplers_use_the_default_stream():
    rngs = nnx.Rngs(0, params=1)
    x = rngs.normal((32, 20))
    np.testing.assert_array_equal(
        x, jax.random.normal(jax.random.fold_in(jax.random.key(0), 0), (32, 20))
    )
    b = rngs.bernoulli(0.5, (7,))
    assert b.dtype == jnp.bool_ and b.shape == (7,)
    assert int(rngs.default.count.value) == 2 and int(rngs.params.count.value) == 0


def test_calling_a_stream_still_returns_a_key():
    rngs = nnx.Rngs(0)
    assert jnp.issubdtype(rngs().dtype, jax.dtypes.prng_key)
    assert jnp.issubdtype(rngs.default().dtype, jax.dtypes.prng_key)


def test_initializer_methods_draw_a_key_per_call():
    rngs = nnx.Rngs(params=3)
    init = rngs.params.lecun_normal()
    w1, w2 = init((3, 4)), init((3, 4))
    expected = jax.nn.initializers.lecun_normal()(jax.random.fold_in(jax.random.key(3), 0), (3, 4))
    np.testing.assert_allclose(w1, expected)
    assert not np.allclose(w1, w2)


def test_signature_and_docstring_are_jax_randoms_without_key():
    params = list(inspect.signature(nnx.RngStream.normal).parameters)
    assert params[0] == "self" and "key" not in params and "shape" in params
    assert "jax.random.normal" in nnx.Rngs.normal.__doc__


def test_a_stream_named_like_a_sampler_still_resolves_to_the_stream():
    rngs = nnx.Rngs(t=0)
    assert isinstance(rngs.t, nnx.RngStream)


def test_sampler_errors_are_jax_randoms():
    with pytest.raises(TypeError):
        nnx.Rngs(0).normal("not a shape")
