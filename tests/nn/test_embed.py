"""Tests of flaxgraph/nn/embed.py: Embed lookup and attend against jnp."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import Embed, LayerDtypeError, LayerShapeError


def test_lookup_and_attend():
    embed = Embed(10, 4, rngs=nnx.Rngs(0))
    assert embed.embedding.shape == (10, 4)
    ids = jnp.array([[1, 2, 9], [0, 0, 5]])
    out = embed(ids)
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(out, np.asarray(embed.embedding.value)[np.asarray(ids)])
    q = jnp.ones((2, 4))
    np.testing.assert_allclose(embed.attend(q), q @ embed.embedding.value.T, rtol=1e-6)


def test_out_of_range_ids_are_nan():
    embed = Embed(3, 2, rngs=nnx.Rngs(0))
    assert bool(jnp.isnan(embed(jnp.array([3]))).all())


def test_dtype_and_metadata():
    embed = Embed(
        5,
        2,
        dtype=jnp.bfloat16,
        embedding_metadata={"out_sharding": ("vocab", None)},
        rngs=nnx.Rngs(0),
    )
    assert embed.embedding.dtype == jnp.float32
    assert embed(jnp.array([1])).dtype == jnp.bfloat16
    assert embed.embedding.out_sharding == ("vocab", None)


def test_errors():
    embed = Embed(5, 2, rngs=nnx.Rngs(0))
    with pytest.raises(
        LayerDtypeError,
        match=r"Embed\(num_embeddings=5, features=2\) expected integer ids, got dtype float32",
    ) as info:
        embed(jnp.array([1.0]))
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert info.value.module is embed
    with pytest.raises(LayerShapeError, match="a query with last dimension 2, got shape"):
        embed.attend(jnp.ones((3,)))


def test_jit_and_grad():
    embed = Embed(5, 2, rngs=nnx.Rngs(0))
    ids = jnp.array([1, 1, 3])
    np.testing.assert_allclose(nnx.jit(lambda m, i: m(i))(embed, ids), embed(ids))
    grads = nnx.grad(lambda m, i: jnp.sum(m(i)))(embed, ids)
    expected = np.zeros((5, 2))
    expected[1] = 2.0
    expected[3] = 1.0
    np.testing.assert_allclose(grads["embedding"].value, expected)
    assert jax.tree.leaves(grads)


def test_out_sharding():
    P = jax.sharding.PartitionSpec
    mesh = jax.sharding.Mesh(
        np.asarray(jax.devices()[:1]), ("a",), axis_types=(jax.sharding.AxisType.Explicit,)
    )
    emb = Embed(5, 3, rngs=nnx.Rngs(0))
    ids = jnp.array([0, 4, -1, 7])
    with jax.set_mesh(mesh):
        rows = emb(ids, out_sharding=P("a", None))
        assert rows.sharding.spec == P("a", None)
        np.testing.assert_array_equal(np.asarray(rows), np.asarray(emb(ids)))  # NaN rows too
        q = jnp.ones((2, 3))
        logits = emb.attend(q, out_sharding=P("a", None))
        assert logits.sharding.spec == P("a", None)
        np.testing.assert_allclose(
            np.asarray(logits), np.asarray(q @ emb.embedding.value.T), rtol=1e-6
        )


def test_one_row_table_is_broadcast_to_every_id():
    embed = nnx.Embed(1, 3, rngs=nnx.Rngs(0))
    out = embed(jnp.array([[0, 5], [10, -1]]))
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out, jnp.broadcast_to(embed.embedding.value[0], (2, 2, 3)))
