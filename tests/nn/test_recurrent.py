"""Tests of flaxgraph/nn/recurrent.py: the cells' equations recomputed in NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import GRUCell, LayerShapeError, LSTMCell, OptimizedLSTMCell, SimpleCell
from flaxgraph.nn.recurrent import modified_orthogonal

RNG = np.random.default_rng(4)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def W(linear):
    return np.asarray(linear.kernel.value)


def b(linear):
    return np.asarray(linear.bias.value)


def normal_bias():
    return jax.nn.initializers.normal(1.0)


def test_lstm_cell_equations():
    cell = LSTMCell(3, 4, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    x, c, h = rand(2, 3), rand(2, 4), rand(2, 4)
    xn, cn, hn = map(np.asarray, (x, c, h))
    i = sigmoid(xn @ W(cell.ii) + hn @ W(cell.hi) + b(cell.hi))
    f = sigmoid(xn @ W(cell.if_) + hn @ W(cell.hf) + b(cell.hf))
    g = np.tanh(xn @ W(cell.ig) + hn @ W(cell.hg) + b(cell.hg))
    o = sigmoid(xn @ W(cell.io) + hn @ W(cell.ho) + b(cell.ho))
    new_c = f * cn + i * g
    new_h = o * np.tanh(new_c)
    (c2, h2), y = cell((c, h), x)
    close(c2, new_c)
    close(h2, new_h)
    close(y, new_h)


def test_gru_cell_equations():
    cell = GRUCell(3, 4, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    assert cell.dense_i.kernel.shape == (3, 12) and cell.dense_h.bias is None
    x, h = rand(2, 3), rand(2, 4)
    xn, hn = np.asarray(x), np.asarray(h)
    xi = xn @ W(cell.dense_i) + b(cell.dense_i)
    hh = hn @ W(cell.dense_h)
    r = sigmoid(xi[:, :4] + hh[:, :4])
    z = sigmoid(xi[:, 4:8] + hh[:, 4:8])
    n = np.tanh(xi[:, 8:] + r * hh[:, 8:])
    expected = (1 - z) * n + z * hn
    h2, y = cell(h, x)
    close(h2, expected)
    close(y, expected)


def test_simple_cell_equations():
    cell = SimpleCell(3, 4, residual=True, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    x, h = rand(2, 3), rand(2, 4)
    expected = np.tanh(  # the residual inside the activation, as in Flax NNX
        np.asarray(x) @ W(cell.dense_i)
        + b(cell.dense_i)
        + np.asarray(h) @ W(cell.dense_h)
        + np.asarray(h)
    )
    close(cell(h, x)[0], expected)


def test_initialize_carry():
    cell = LSTMCell(3, 4, rngs=nnx.Rngs(0))
    c, h = cell.initialize_carry((5, 3))
    assert c.shape == h.shape == (5, 4) and not c.any()
    gru = GRUCell(3, 4, carry_init=jax.nn.initializers.normal(1.0), rngs=nnx.Rngs(0))
    h1 = gru.initialize_carry((2, 3), rngs=nnx.Rngs(carry=1))
    h2 = gru.initialize_carry((2, 3), rngs=nnx.Rngs(carry=2))
    assert h1.shape == (2, 4) and not np.allclose(h1, h2)


def test_errors():
    cell = LSTMCell(3, 4, rngs=nnx.Rngs(0))
    with pytest.raises(
        LayerShapeError,
        # the cell's input projection checks the features (the cell reads no in_features)
        match=r"Linear\(in_features=3, out_features=4\) expected inputs with last dimension 3, got shape \(2, 5\)",
    ):
        cell(cell.initialize_carry((2, 3)), jnp.ones((2, 5)))
    with pytest.raises(LayerShapeError, match=r"expected a carry of shape \(2, 4\)"):
        cell((jnp.ones((2, 4)), jnp.ones((2, 6))), jnp.ones((2, 3)))


def test_optimized_lstm_cell_equations():
    cell = OptimizedLSTMCell(3, 4, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    assert cell.dense_i.kernel.shape == (3, 16) and cell.dense_i.bias is None
    assert cell.dense_h.kernel.shape == (4, 16) and cell.dense_h.bias.shape == (16,)
    x, c, h = rand(2, 3), rand(2, 4), rand(2, 4)
    xn, cn, hn = map(np.asarray, (x, c, h))
    z = xn @ W(cell.dense_i) + hn @ W(cell.dense_h) + b(cell.dense_h)
    i, f, g, o = (z[:, 4 * k : 4 * k + 4] for k in range(4))
    new_c = sigmoid(f) * cn + sigmoid(i) * np.tanh(g)
    new_h = sigmoid(o) * np.tanh(new_c)
    (c2, h2), y = cell((c, h), x)
    close(c2, new_c)
    close(h2, new_h)
    close(y, new_h)


def test_optimized_lstm_cell_matches_lstm_cell_with_the_same_weights():
    """The concatenated kernels hold the four gates' kernels in the order i, f, g, o."""
    ref = LSTMCell(3, 4, bias_init=normal_bias(), rngs=nnx.Rngs(0))
    opt = OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(1))
    opt.dense_i.kernel.value = jnp.concatenate(
        [ref.ii.kernel.value, ref.if_.kernel.value, ref.ig.kernel.value, ref.io.kernel.value], -1
    )
    opt.dense_h.kernel.value = jnp.concatenate(
        [ref.hi.kernel.value, ref.hf.kernel.value, ref.hg.kernel.value, ref.ho.kernel.value], -1
    )
    opt.dense_h.bias.value = jnp.concatenate(
        [ref.hi.bias.value, ref.hf.bias.value, ref.hg.bias.value, ref.ho.bias.value], -1
    )
    carry, x = (rand(5, 4), rand(5, 4)), rand(5, 3)
    (c1, h1), _ = ref(carry, x)
    (c2, h2), _ = opt(carry, x)
    close(c1, c2)
    close(h1, h2)


def test_optimized_lstm_cell_kernels_are_initialized_whole():
    shapes = []

    def recording(key, shape, dtype=jnp.float32):
        shapes.append(tuple(shape))
        return jnp.zeros(shape, dtype)

    OptimizedLSTMCell(
        3, 4, kernel_init=recording, recurrent_kernel_init=recording, rngs=nnx.Rngs(0)
    )
    assert shapes == [(3, 16), (4, 16)]


def test_optimized_lstm_cell_errors_and_carry():
    cell = OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(0))
    c, h = cell.initialize_carry((2, 3))
    assert c.shape == h.shape == (2, 4)
    with pytest.raises(LayerShapeError, match=r"expected inputs with last dimension 3"):
        cell((c, h), jnp.ones((2, 5)))
    with pytest.raises(LayerShapeError, match=r"expected a carry of shape \(2, 4\)"):
        cell((c, jnp.ones((2, 6))), jnp.ones((2, 3)))


def test_optimized_lstm_cell_in_rnn_jit():
    rnn = nnx.RNN(OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(0)))
    xs = rand(2, 5, 3)
    carry = rnn.cell.initialize_carry((2, 3))
    ys = []
    for t in range(5):
        carry, y = rnn.cell(carry, xs[:, t])
        ys.append(y)
    close(nnx.jit(lambda m, x: m(x))(rnn, xs), jnp.stack(ys, 1))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_modified_orthogonal(dtype):
    key = jax.random.key(3)
    w = modified_orthogonal(key, (5, 5), dtype)
    ref = np.asarray(jax.nn.initializers.orthogonal()(key, (5, 5), jnp.float32))
    assert w.dtype == dtype
    np.testing.assert_array_equal(
        np.asarray(w.astype(jnp.float32)), ref.astype(dtype).astype(np.float32)
    )
    np.testing.assert_allclose(ref @ ref.T, np.eye(5), atol=1e-5)


def test_lstm_cell_default_recurrent_init_is_modified_orthogonal():
    cell = LSTMCell(3, 4, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    k = np.asarray(cell.hi.kernel.value.astype(jnp.float32))
    assert cell.hi.kernel.value.dtype == jnp.bfloat16
    np.testing.assert_allclose(k @ k.T, np.eye(4), atol=3e-2)


def test_simple_cell_computes_in_float32_by_default():
    cell = SimpleCell(3, 4, rngs=nnx.Rngs(0))
    h, _ = cell(jnp.zeros((2, 4), jnp.bfloat16), jnp.ones((2, 3), jnp.bfloat16))
    assert h.dtype == jnp.float32
