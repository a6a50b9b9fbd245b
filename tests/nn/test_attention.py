"""Tests of flaxgraph/nn/attention.py: MultiHeadAttention against NumPy projections and
a NumPy softmax(QKᵀ/√d)V."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import LayerShapeError, MultiHeadAttention, make_causal_mask

RNG = np.random.default_rng(3)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def mha_reference(reference_attention, mha, x_q, x_kv, mask=None):
    q = jnp.einsum("bld,dhk->blhk", x_q, mha.query.kernel.value) + mha.query.bias.value[None, None]
    k = jnp.einsum("bld,dhk->blhk", x_kv, mha.key.kernel.value) + mha.key.bias.value[None, None]
    v = jnp.einsum("bld,dhk->blhk", x_kv, mha.value.kernel.value) + mha.value.bias.value[None, None]
    o = reference_attention(q, k, v, mask)
    return jnp.einsum("blhk,hkd->bld", o, mha.out.kernel.value) + mha.out.bias.value[None, None]


def normal_bias():
    return jax.nn.initializers.normal(1.0)


def test_mha_self_and_cross_attention(reference_attention):
    mha = MultiHeadAttention(
        2, 6, qkv_features=8, out_features=5, bias_init=normal_bias(), rngs=nnx.Rngs(0)
    )
    assert mha.query.kernel.shape == (6, 2, 4) and mha.out.kernel.shape == (2, 4, 5)
    x = rand(2, 3, 6)
    close(mha(x), mha_reference(reference_attention, mha, x, x), 1e-4)
    mask = make_causal_mask(jnp.ones((2, 3)))
    close(mha(x, mask=mask), mha_reference(reference_attention, mha, x, x, mask), 1e-4)
    kv = rand(2, 4, 6)
    close(mha(x, kv), mha_reference(reference_attention, mha, x, kv), 1e-4)
    close(mha(x, is_causal=True), mha_reference(reference_attention, mha, x, x, mask), 1e-4)


def test_mha_grouped_query_heads(reference_attention):
    mha = MultiHeadAttention(4, 8, num_kv_heads=2, rngs=nnx.Rngs(0))
    assert mha.key.kernel.shape == (8, 2, 2) and mha.query.kernel.shape == (8, 4, 2)
    x = rand(1, 3, 8)
    q = jnp.einsum("bld,dhk->blhk", x, mha.query.kernel.value)
    k = jnp.repeat(jnp.einsum("bld,dhk->blhk", x, mha.key.kernel.value), 2, axis=2)
    v = jnp.repeat(jnp.einsum("bld,dhk->blhk", x, mha.value.kernel.value), 2, axis=2)
    expected = jnp.einsum("blhk,hkd->bld", reference_attention(q, k, v), mha.out.kernel.value)
    close(mha(x), expected, 1e-4)


def test_mha_decode_equals_causal_attention():
    mha = MultiHeadAttention(2, 6, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    x = rand(2, 5, 6)
    full = mha(x, mask=make_causal_mask(jnp.ones((2, 5))))
    mha.init_cache(x.shape)
    assert isinstance(mha.cached_key, nnx.Cache) and mha.cached_key.shape == (2, 5, 2, 3)
    step = nnx.jit(lambda m, x_t: m(x_t, decode=True))
    outs = [step(mha, x[:, t : t + 1]) for t in range(5)]
    assert int(mha.cache_index.value) == 5
    close(jnp.concatenate(outs, axis=1), full, 1e-4)


def test_mha_decode_errors():
    mha = MultiHeadAttention(2, 6, decode=True, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="init_cache"):
        mha(jnp.ones((1, 1, 6)))
    mha.init_cache((1, 4, 6))
    with pytest.raises(LayerShapeError, match="one decoding step"):
        mha(jnp.ones((1, 2, 6)))


def test_mha_dropout_and_modes():
    mha = MultiHeadAttention(2, 4, dropout_rate=0.5, rngs=nnx.Rngs(0))
    assert isinstance(mha.rngs, nnx.RngStream)
    x = rand(2, 6, 4)
    with pytest.raises(ValueError, match="deterministic is None"):
        mha(x)
    a = mha(x, deterministic=True)
    close(mha(x, deterministic=True), a)
    mha.train()
    assert mha.deterministic is False
    assert not np.allclose(mha(x), a)
    assert not np.allclose(mha(x), mha(x))  # new mask each call
    mha.eval()
    close(mha(x), a)


def test_mha_sow_weights_and_normalize_qk():
    mha = MultiHeadAttention(2, 4, normalize_qk=True, rngs=nnx.Rngs(0))
    assert mha.query_ln.scale.shape == (2,)
    x = rand(1, 3, 4)
    mha(x, sow_weights=True)
    (weights,) = mha.attention_weights.value
    assert weights.shape == (1, 2, 3, 3)
    close(weights.sum(-1), np.ones((1, 2, 3)))


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(3, 8, rngs=nnx.Rngs(0))
    mha = MultiHeadAttention(2, 8, rngs=nnx.Rngs(0))
    with pytest.raises(
        LayerShapeError,
        match=r"MultiHeadAttention\(num_heads=2, in_features=8, qkv_features=8\) expected queries with last dimension 8, got shape \(1, 3, 4\)",
    ):
        mha(jnp.ones((1, 3, 4)))
    with pytest.raises(ValueError, match="inputs_v was given without inputs_k"):
        mha(jnp.ones((1, 3, 8)), inputs_v=jnp.ones((1, 3, 8)))


def test_mha_jit_and_grad():
    mha = MultiHeadAttention(2, 4, rngs=nnx.Rngs(0))
    x = rand(2, 3, 4)
    close(nnx.jit(lambda m, x: m(x))(mha, x), mha(x), 1e-5)
    grads = nnx.jit(nnx.grad(lambda m, x: jnp.sum(m(x) ** 2)))(mha, x)
    assert set(grads.keys()) == {"query", "key", "value", "out"}
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))


def test_mha_dot_generals_and_shardings():
    calls = {"qkv": 0, "out": 0}

    def counting(tag):
        def dot(*args, **kwargs):
            calls[tag] += 1
            return jax.lax.dot_general(*args, **kwargs)

        return dot

    class OutDot:
        def __call__(self, *args, **kwargs):
            calls["out"] += 1
            return jax.lax.dot_general(*args, **kwargs)

    x = rand(2, 3, 4)
    plain = MultiHeadAttention(2, 4, rngs=nnx.Rngs(0))
    mha = MultiHeadAttention(
        2, 4, qkv_dot_general=counting("qkv"), out_dot_general_cls=OutDot, rngs=nnx.Rngs(0)
    )
    close(mha(x), plain(x))
    assert calls == {"qkv": 3, "out": 1}
    P = jax.sharding.PartitionSpec
    mesh = jax.sharding.Mesh(
        np.asarray(jax.devices()[:1]), ("a",), axis_types=(jax.sharding.AxisType.Explicit,)
    )
    with jax.set_mesh(mesh):
        y = plain(x, qkv_sharding=P("a", None, None, None), out_sharding=P("a", None, None))
        assert y.sharding.spec == P("a", None, None)
        close(y, plain(x))
