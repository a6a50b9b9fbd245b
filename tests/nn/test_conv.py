"""Tests of flaxgraph/nn/conv.py: Conv and ConvTranspose against jax.lax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import Conv, ConvTranspose, LayerShapeError

RNG = np.random.default_rng(1)
NHWC = ("NHWC", "HWIO", "NHWC")


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def normal_bias():
    return jax.nn.initializers.normal(1.0)


@pytest.mark.parametrize(
    "kwargs, lax_padding",
    [
        ({}, "SAME"),
        ({"padding": "VALID", "strides": 2}, "VALID"),
        ({"padding": 1, "kernel_dilation": 2}, ((1, 1), (1, 1))),
        ({"padding": [(0, 1), (2, 0)], "input_dilation": (2, 1)}, ((0, 1), (2, 0))),
    ],
)
def test_conv2d_matches_lax(kwargs, lax_padding):
    conv = Conv(3, 4, (3, 3), bias_init=normal_bias(), rngs=nnx.Rngs(0), **kwargs)
    assert conv.kernel.shape == (3, 3, 3, 4)
    x = rand(2, 7, 6, 3)
    strides = kwargs.get("strides", 1)
    expected = (
        jax.lax.conv_general_dilated(
            x,
            conv.kernel.value,
            (strides, strides),
            lax_padding,
            lhs_dilation=kwargs.get("input_dilation", (1, 1)),
            rhs_dilation=(kwargs.get("kernel_dilation", 1),) * 2,
            dimension_numbers=NHWC,
        )
        + conv.bias.value[None, None, None, :]
    )
    close(conv(x), expected)


def test_grouped_conv_and_batch_shapes():
    conv = Conv(4, 6, (3,), feature_group_count=2, use_bias=False, rngs=nnx.Rngs(0))
    assert conv.kernel.shape == (3, 2, 6)
    x = rand(2, 3, 8, 4)  # two batch axes
    expected = jax.lax.conv_general_dilated(
        x.reshape(6, 8, 4),
        conv.kernel.value,
        (1,),
        "SAME",
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=2,
    ).reshape(2, 3, 8, 6)
    close(conv(x), expected)
    # no batch axis
    close(conv(x[0, 0]), expected[0, 0])


def test_circular_padding():
    conv = Conv(1, 1, 3, padding="CIRCULAR", use_bias=False, rngs=nnx.Rngs(0))
    x = rand(1, 8, 1)
    w = np.asarray(conv.kernel.value)[:, 0, 0]
    xs = np.asarray(x)[0, :, 0]
    # out[i] = sum_t x[(i + t - 1) mod n] w[t]
    expected = sum(np.roll(xs, 1 - t) * w[t] for t in range(3))
    close(conv(x)[0, :, 0], expected)


def test_causal_padding():
    conv = Conv(1, 1, 3, padding="CAUSAL", use_bias=False, rngs=nnx.Rngs(0))
    x = rand(1, 6, 1)
    y = conv(x)
    assert y.shape == (1, 6, 1)
    # changing a later input never changes an earlier output
    y2 = conv(x.at[0, 4, 0].add(10.0))
    close(y[0, :4], y2[0, :4])
    assert not np.allclose(y[0, 4:], y2[0, 4:])


def test_mask():
    mask = jnp.zeros((3, 1, 1)).at[0].set(1.0)
    conv = Conv(1, 1, 3, mask=mask, use_bias=False, rngs=nnx.Rngs(0))
    x = rand(1, 5, 1)
    w0 = conv.kernel.value[0, 0, 0]
    # only the first tap is used: out[i] = x[i - 1] * w0 (SAME padding)
    expected = jnp.concatenate([jnp.zeros((1,)), x[0, :4, 0]]) * w0
    close(conv(x)[0, :, 0], expected)


def test_conv_errors():
    with pytest.raises(ValueError, match="divisible by feature_group_count"):
        Conv(3, 4, 3, feature_group_count=2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="CAUSAL"):
        Conv(1, 1, (3, 3), padding="CAUSAL", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="mask shape"):
        Conv(1, 1, 3, mask=jnp.ones((2, 1, 1)), rngs=nnx.Rngs(0))
    conv = Conv(3, 4, (3, 3), rngs=nnx.Rngs(0))
    with pytest.raises(
        LayerShapeError,
        match=r"Conv\(in_features=3, out_features=4, kernel_size=\(3, 3\)\) expected inputs with last dimension 3, got shape \(2, 5, 5, 2\)",
    ):
        conv(jnp.ones((2, 5, 5, 2)))
    with pytest.raises(LayerShapeError, match="rank >= 3"):
        conv(jnp.ones((5, 3)))


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2),)])
def test_conv_transpose_matches_lax(padding):
    layer = ConvTranspose(
        2, 3, (4,), strides=2, padding=padding, bias_init=normal_bias(), rngs=nnx.Rngs(0)
    )
    assert layer.kernel.shape == (4, 2, 3)
    x = rand(2, 5, 2)
    expected = (
        jax.lax.conv_transpose(
            x,
            layer.kernel.value,
            (2,),
            padding if isinstance(padding, str) else [(1, 2)],
            dimension_numbers=("NWC", "WIO", "NWC"),
        )
        + layer.bias.value[None, None, :]
    )
    close(layer(x), expected)


def test_conv_transpose_is_transpose_of_conv():
    # with transpose_kernel, ConvTranspose is the adjoint (VJP) of a strided Conv
    conv = Conv(2, 3, (3, 3), strides=2, padding="VALID", use_bias=False, rngs=nnx.Rngs(0))
    up = ConvTranspose(
        3,
        2,
        (3, 3),
        strides=2,
        padding="VALID",
        use_bias=False,
        transpose_kernel=True,
        rngs=nnx.Rngs(1),
    )
    assert up.kernel.shape == (3, 3, 2, 3)
    up.kernel.value = conv.kernel.value
    x = rand(1, 9, 9, 2)
    y, vjp = jax.vjp(conv, x)
    cot = rand(*y.shape)
    close(up(cot), vjp(cot)[0], tol=1e-4)


def test_conv_transpose_circular_equals_circular_conv():
    # stride 1, odd kernel: the periodic transposed convolution (no kernel flip)
    # is the periodic correlation
    up = ConvTranspose(1, 1, 3, padding="CIRCULAR", use_bias=False, rngs=nnx.Rngs(0))
    conv = Conv(1, 1, 3, padding="CIRCULAR", use_bias=False, rngs=nnx.Rngs(1))
    conv.kernel.value = up.kernel.value
    x = rand(1, 7, 1)
    close(up(x), conv(x))


def test_conv_transpose_circular_stride():
    up = ConvTranspose(1, 1, 4, strides=2, padding="CIRCULAR", use_bias=False, rngs=nnx.Rngs(0))
    x = rand(1, 5, 1)
    y = up(x)
    assert y.shape == (1, 10, 1)
    valid = jax.lax.conv_transpose(
        x, up.kernel.value, (2,), "VALID", dimension_numbers=("NWC", "WIO", "NWC")
    )[0, :, 0]
    # the VALID result (length 12) wrapped onto 10 positions, centred (offset 1)
    expected = np.zeros(10)
    for j, v in enumerate(np.asarray(valid)):
        expected[(j - 1) % 10] += v
    close(y[0, :, 0], expected)
    # total mass is preserved
    close(jnp.sum(y), jnp.sum(valid))


def test_conv_transpose_errors():
    with pytest.raises(ValueError, match="CAUSAL"):
        ConvTranspose(1, 1, 3, padding="CAUSAL", rngs=nnx.Rngs(0))
    layer = ConvTranspose(2, 3, (2, 2), rngs=nnx.Rngs(0))
    with pytest.raises(LayerShapeError, match="last dimension 2"):
        layer(jnp.ones((1, 4, 4, 3)))


def test_jit_and_grad():
    conv = Conv(2, 3, (3,), rngs=nnx.Rngs(0))
    up = ConvTranspose(3, 2, (3,), strides=2, rngs=nnx.Rngs(0))
    model = nnx.Sequential(conv, up)
    x = rand(2, 6, 2)
    close(nnx.jit(lambda m, x: m(x))(model, x), model(x))
    grads = nnx.grad(lambda m, x: jnp.sum(m(x) ** 2))(model, x)
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == 4 and all(bool(jnp.isfinite(g).all()) for g in leaves)


def test_out_sharding():
    P = jax.sharding.PartitionSpec
    mesh = jax.sharding.Mesh(
        np.asarray(jax.devices()[:1]), ("a",), axis_types=(jax.sharding.AxisType.Explicit,)
    )
    conv = Conv(3, 4, (2,), rngs=nnx.Rngs(0))
    x = rand(2, 5, 3)
    with jax.set_mesh(mesh):
        y = conv(x, out_sharding=P("a", None, None))
        assert y.sharding.spec == P("a", None, None)
        close(y, conv(x))
