"""Tests of flaxgraph/nn/rnn.py: RNN and Bidirectional vs a Python loop over the cell."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import (
    RNN,
    Bidirectional,
    Dropout,
    GRUCell,
    LayerShapeError,
    LSTMCell,
)

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


def python_loop(cell, xs, carry):
    ys = []
    for t in range(xs.shape[1]):
        carry, y = cell(carry, xs[:, t])
        ys.append(y)
    return carry, jnp.stack(ys, axis=1)


@pytest.mark.parametrize(
    "make_cell",
    [
        lambda: LSTMCell(3, 4, rngs=nnx.Rngs(0)),
        lambda: GRUCell(3, 4, rngs=nnx.Rngs(0)),
    ],
)
def test_rnn_equals_python_loop(make_cell):
    cell = make_cell()
    rnn = RNN(cell, return_carry=True)
    xs = rand(2, 6, 3)
    carry, ys = rnn(xs)
    ref_carry, ref_ys = python_loop(cell, xs, cell.initialize_carry((2, 3)))
    close(ys, ref_ys)
    jax.tree.map(close, carry, ref_carry)
    assert rnn(xs, return_carry=False).shape == (2, 6, 4)


def test_rnn_time_major_reverse_keep_order():
    cell = GRUCell(3, 4, rngs=nnx.Rngs(0))
    xs = rand(2, 5, 3)
    _, ref_ys = python_loop(cell, xs[:, ::-1], cell.initialize_carry((2, 3)))
    close(RNN(cell, reverse=True)(xs), ref_ys)
    close(RNN(cell, reverse=True, keep_order=True)(xs), ref_ys[:, ::-1])
    tm = RNN(cell, time_major=True)(jnp.swapaxes(xs, 0, 1))
    close(jnp.swapaxes(tm, 0, 1), RNN(cell)(xs))


def test_rnn_initial_carry_and_seq_lengths():
    cell = GRUCell(3, 4, rngs=nnx.Rngs(0))
    rnn = RNN(cell, return_carry=True)
    xs = rand(2, 5, 3)
    h0 = rand(2, 4)
    carry, _ = rnn(xs, initial_carry=h0)
    close(carry, python_loop(cell, xs, h0)[0])
    lengths = jnp.array([3, 5])
    carry, _ = rnn(xs, initial_carry=h0, seq_lengths=lengths)
    close(carry[0], python_loop(cell, xs[:1, :3], h0[:1])[0][0])  # stopped after 3 steps
    close(carry[1], python_loop(cell, xs[1:], h0[1:])[0][0])
    # reverse with lengths flips only the valid steps of each sequence
    carry, _ = rnn(xs, initial_carry=h0, seq_lengths=lengths, reverse=True)
    close(carry[0], python_loop(cell, xs[:1, :3][:, ::-1], h0[:1])[0][0])


def test_rnn_carries_cell_rng_state():
    class NoisyCell(GRUCell):
        def __init__(self, *args, rngs, **kwargs):
            super().__init__(*args, rngs=rngs, **kwargs)
            self.drop = Dropout(0.5, rngs=rngs)

        def __call__(self, carry, x):
            return super().__call__(carry, self.drop(x))

    cell = NoisyCell(3, 4, rngs=nnx.Rngs(0))
    rnn = RNN(cell)
    xs = jnp.ones((1, 4, 3))
    rnn(xs)
    assert int(cell.drop.rngs.count.value) == 4  # one key per step, carried through the scan
    cell.eval()
    close(rnn(xs), RNN(GRUCell(3, 4, rngs=nnx.Rngs(0)))(xs))


def test_rnn_broadcast_rngs_gives_every_step_one_key_per_call():
    class MaskCell(GRUCell):
        # outputs the dropout mask of ones, so each step's mask is visible
        def __init__(self, *args, rngs, **kwargs):
            super().__init__(*args, rngs=rngs, **kwargs)
            self.drop = Dropout(0.5, rng_collection="recurrent", rngs=rngs)

        def __call__(self, carry, x):
            new_carry, _ = super().__call__(carry, x)
            return new_carry, self.drop(jnp.ones_like(new_carry))

    cell = MaskCell(3, 16, rngs=nnx.Rngs(0, recurrent=1))
    rnn = RNN(cell, broadcast_rngs="recurrent")
    xs = jnp.ones((2, 5, 3))
    ys = rnn(xs)
    assert int(cell.drop.rngs.count.value) == 1  # one draw per call
    for t in range(1, 5):
        close(ys[:, t], ys[:, 0])  # the same mask at every step
    assert not np.array_equal(np.asarray(rnn(xs)), np.asarray(ys))  # a new one per call
    assert int(cell.drop.rngs.count.value) == 2
    # without broadcast_rngs the stream is carried: one key per step
    carried = RNN(MaskCell(3, 16, rngs=nnx.Rngs(0, recurrent=1)))(xs)
    assert not np.array_equal(np.asarray(carried[:, 1]), np.asarray(carried[:, 0]))


def test_bidirectional():
    fwd = RNN(GRUCell(3, 4, rngs=nnx.Rngs(0)))
    bwd = RNN(GRUCell(3, 4, rngs=nnx.Rngs(1)))
    bi = Bidirectional(fwd, bwd)
    xs = rand(2, 5, 3)
    expected = jnp.concatenate([fwd(xs), bwd(xs, reverse=True, keep_order=True)], axis=-1)
    close(bi(xs), expected)
    # reverse/keep_order at the call are accepted and ignored (as in Flax NNX 0.12)
    close(bi(xs, reverse=True, keep_order=False), expected)


def test_rnn_errors():
    cell = LSTMCell(3, 4, rngs=nnx.Rngs(0))
    with pytest.raises(
        LayerShapeError,
        match=r"RNN\(cell=LSTMCell\(in_features=3, hidden_features=4\)\) expected inputs with last dimension 3",
    ):
        RNN(cell)(jnp.ones((2, 5, 7)))
    with pytest.raises(LayerShapeError, match="rank >= 2"):
        RNN(cell)(jnp.ones((3,)))


def test_rnn_jit_and_grad():
    rnn = RNN(LSTMCell(3, 4, rngs=nnx.Rngs(0)))
    xs = rand(2, 5, 3)
    close(nnx.jit(lambda m, x: m(x))(rnn, xs), rnn(xs))

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    grads = nnx.grad(loss)(rnn, xs)

    # the scan gradient equals the gradient through the Python loop
    def loop_loss(cell, x):
        return jnp.sum(python_loop(cell, x, cell.initialize_carry((2, 3)))[1] ** 2)

    ref = nnx.grad(loop_loss)(rnn.cell, xs)
    jax.tree.map(lambda a, b: close(a, b, 1e-4), grads["cell"], ref)


def normal_carry(key, shape, dtype=jnp.float32):
    return jax.random.normal(key, shape, dtype)


def test_rnn_keeps_a_carry_stream():
    xs = rand(2, 4, 3)
    rnn = RNN(GRUCell(3, 4, carry_init=normal_carry, rngs=nnx.Rngs(0)), return_carry=True)
    assert isinstance(rnn.rngs, nnx.RngStream) and rnn.rngs.tag == "carry"
    # the default stream is seeded with 0: its first key draws the first carry
    first_key = nnx.RngStream(jax.random.key(0), tag="carry")()
    expected_carry = normal_carry(first_key, (2, 4))
    loop_carry, _ = python_loop(rnn.cell, xs, expected_carry)
    close(rnn(xs)[0], loop_carry)
    assert int(rnn.rngs.count.value) == 1
    assert not np.allclose(rnn(xs)[0], loop_carry)  # the stream advanced
    # a call's rngs wins over the kept stream
    call_carry = normal_carry(nnx.Rngs(carry=5)["carry"](), (2, 4))
    close(rnn(xs, rngs=nnx.Rngs(carry=5))[0], python_loop(rnn.cell, xs, call_carry)[0])
    assert RNN(GRUCell(3, 4, rngs=nnx.Rngs(0)), rngs=False).rngs is None
    with pytest.raises(TypeError, match=r"RNN: rngs must be an nnx\.Rngs"):
        RNN(GRUCell(3, 4, rngs=nnx.Rngs(0)), rngs=3)
    bi = Bidirectional(RNN(GRUCell(3, 4, rngs=nnx.Rngs(0))), RNN(GRUCell(3, 4, rngs=nnx.Rngs(1))))
    bi(xs)
    assert int(bi.rngs.count.value) == 2  # one carry per direction
