"""Tests of flaxgraph/nn/stochastic.py: Dropout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import Dropout, LayerShapeError, Linear

X = jnp.ones((64, 64))


def test_rate_zero_and_deterministic_are_identity():
    x = jnp.arange(12.0).reshape(3, 4)
    assert (Dropout(0.0, rngs=nnx.Rngs(0))(x) == x).all()
    assert (Dropout(0.5, deterministic=True)(x) == x).all()  # no rngs needed
    assert (Dropout(0.5, rngs=nnx.Rngs(0))(x, deterministic=True) == x).all()


def test_rate_one_zeroes():
    assert (Dropout(1.0, rngs=nnx.Rngs(0))(X) == 0).all()


def test_mask_rate_and_scaling():
    drop = Dropout(0.3, rngs=nnx.Rngs(dropout=0))
    y = np.asarray(drop(X))
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)  # scaled by 1 / (1 - rate)
    # 4096 Bernoulli(0.7) draws: the kept fraction is within ~5 standard deviations
    assert abs(kept.mean() - 0.7) < 5 * np.sqrt(0.21 / kept.size)
    # the expected value is preserved
    assert abs(y.mean() - 1.0) < 0.05


def test_successive_calls_draw_new_masks():
    drop = Dropout(0.5, rngs=nnx.Rngs(dropout=0))
    a, b = drop(X), drop(X)
    assert not (a == b).all()


def test_forked_stream_per_layer():
    rngs = nnx.Rngs(dropout=0)
    d1, d2 = Dropout(0.5, rngs=rngs), Dropout(0.5, rngs=rngs)
    assert d1.rngs is not d2.rngs and d1.rngs is not rngs.dropout
    assert isinstance(d1.rngs, nnx.RngStream)
    assert not (d1(X) == d2(X)).all()  # independent masks
    # the layers do not advance the Rngs they were built from
    count = int(rngs.dropout.count.value)
    d1(X)
    assert int(rngs.dropout.count.value) == count
    # a stream can be given directly; a Rngs without 'dropout' uses its default stream
    assert isinstance(Dropout(0.5, rngs=nnx.Rngs(0).default).rngs, nnx.RngStream)
    assert isinstance(Dropout(0.5, rngs=nnx.Rngs(0)).rngs, nnx.RngStream)


def test_call_time_rngs():
    drop = Dropout(0.5)
    with pytest.raises(
        ValueError, match="`deterministic` is False, but no `rngs` argument was provided to Dropout"
    ):
        drop(X)
    key = jax.random.key(3)
    a = drop(X, rngs=key)
    b = drop(X, rngs=key)
    assert (a == b).all()
    c = drop(X, rngs=nnx.Rngs(dropout=3))
    assert c.shape == X.shape


def test_broadcast_dims():
    drop = Dropout(0.5, broadcast_dims=(0,), rngs=nnx.Rngs(0))
    y = np.asarray(drop(X))
    assert (y == y[:1]).all()  # one mask row shared along axis 0
    with pytest.raises(LayerShapeError, match="broadcast dim 0"):
        drop(jnp.float32(1.0))


def test_train_eval_toggle():
    drop = Dropout(0.5, rngs=nnx.Rngs(0))
    model = nnx.Sequential(drop)
    model.eval()
    assert drop.deterministic is True
    assert (model(X) == X).all()
    model.train()
    assert drop.deterministic is False
    assert not (model(X) == X).all()


def test_none_deterministic_error():
    drop = Dropout(0.5, deterministic=None, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="deterministic is None"):
        drop(X)


def test_invalid_rate():
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\]"):
        Dropout(1.5)


def test_jit_advances_stream_and_grad():
    drop = Dropout(0.5, rngs=nnx.Rngs(0))
    f = nnx.jit(lambda m, x: m(x))
    a, b = f(drop, X), f(drop, X)
    assert not (a == b).all()  # the stream's count is written back
    assert int(drop.rngs.count.value) == 2

    g = nnx.grad(lambda x: jnp.sum(Dropout(0.5, deterministic=True)(x)))(X)
    assert (g == 1).all()

    # through a model: the gradient flows through the kept entries only
    model = nnx.Sequential(Linear(64, 64, rngs=nnx.Rngs(0)), Dropout(0.5, rngs=nnx.Rngs(1)))
    grads = nnx.jit(nnx.grad(lambda m, x: jnp.sum(m(x))))(model, X[:1])
    assert int(model.layers[1].rngs.count.value) == 1
    kernel_grad = np.asarray(grads["layers"][0]["kernel"].value)
    kept = kernel_grad[0] != 0  # one example: column j gets 1 / keep if output j was kept
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(kernel_grad[0][kept], 2.0)


@pytest.mark.parametrize("broadcast_dims", [(), (1,), (0,)])
def test_dropout_keeps_the_inputs_explicit_sharding(broadcast_dims: tuple[int, ...]) -> None:
    from jax.sharding import AxisType, PartitionSpec

    mesh = jax.make_mesh((1,), ("X",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        x = jax.sharding.reshard(jnp.ones((2, 4)), PartitionSpec("X", None))
        layer = nnx.Dropout(0.5, broadcast_dims=broadcast_dims, rngs=nnx.Rngs(0))
        eager = layer(x)
        jitted = jax.jit(lambda x, rngs: layer(x, rngs=rngs))(x, nnx.Rngs(1))
    for y in (eager, jitted):
        assert jax.typeof(y).sharding.spec == PartitionSpec("X", None)
        assert y.shape == x.shape
