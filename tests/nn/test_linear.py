"""Tests of flaxgraph/nn/linear.py: Linear, LinearGeneral, Einsum against jnp."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import Einsum, LayerShapeError, Linear, LinearGeneral

RNG = np.random.default_rng(0)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


class TestLinear:
    def test_shapes_and_numerics(self):
        layer = Linear(4, 3, bias_init=jax.nn.initializers.normal(1.0), rngs=nnx.Rngs(0))
        assert layer.kernel.shape == (4, 3) and layer.bias.shape == (3,)
        assert isinstance(layer.kernel, nnx.Param)
        x = rand(2, 5, 4)
        expected = x @ layer.kernel.value + layer.bias.value[None, None, :]
        close(layer(x), expected)

    def test_no_bias(self):
        layer = Linear(4, 3, use_bias=False, rngs=nnx.Rngs(0))
        assert layer.bias is None
        x = rand(2, 4)
        close(layer(x), x @ layer.kernel.value)

    def test_dtypes(self):
        layer = Linear(4, 3, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        assert layer.kernel.dtype == jnp.bfloat16
        assert layer(rand(2, 4)).dtype == jnp.float32  # promoted with the inputs
        layer = Linear(4, 3, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        assert layer.kernel.dtype == jnp.float32
        assert layer(rand(2, 4)).dtype == jnp.bfloat16
        # integer inputs compute in float32
        assert Linear(2, 2, rngs=nnx.Rngs(0))(jnp.ones((1, 2), jnp.int32)).dtype == jnp.float32

    def test_initializers_and_metadata(self):
        layer = Linear(
            2,
            3,
            kernel_init=jax.nn.initializers.ones,
            bias_init=jax.nn.initializers.constant(2.0),
            kernel_metadata={"out_sharding": (None, "model")},
            bias_metadata={"out_sharding": ("model",)},
            rngs=nnx.Rngs(0),
        )
        assert (layer.kernel.value == 1).all() and (layer.bias.value == 2).all()
        assert layer.kernel.out_sharding == (None, "model")
        assert layer.bias.out_sharding == ("model",)

    def test_with_partitioning(self):
        init = nnx.with_partitioning(jax.nn.initializers.lecun_normal(), ("data", "model"))
        layer = Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
        assert layer.kernel.out_sharding == ("data", "model")
        assert layer.kernel.shape == (2, 3)

    def test_rngs_params_stream(self):
        a = Linear(2, 3, rngs=nnx.Rngs(params=0))
        b = Linear(2, 3, rngs=nnx.Rngs(params=0))
        c = Linear(2, 3, rngs=nnx.Rngs(params=1))
        close(a.kernel.value, b.kernel.value)
        assert not np.allclose(a.kernel.value, c.kernel.value)

    def test_shape_error(self):
        layer = Linear(64, 10, rngs=nnx.Rngs(0))
        with pytest.raises(LayerShapeError) as info:
            layer(jnp.ones((8, 32)))
        assert str(info.value) == (
            "Linear(in_features=64, out_features=10) expected inputs with last dimension 64, "
            "got shape (8, 32)."
        )
        assert info.value.module is layer
        assert isinstance(info.value, ValueError)
        with pytest.raises(LayerShapeError, match=r"got shape \(\)"):
            layer(jnp.float32(1.0))

    def test_jit_and_grad(self):
        layer = Linear(3, 2, rngs=nnx.Rngs(0))
        x = rand(4, 3)

        @nnx.jit
        def f(m, x):
            return m(x)

        close(f(layer, x), layer(x))

        def loss(m, x):
            return jnp.sum(m(x))

        grads = nnx.grad(loss)(layer, x)
        close(grads["kernel"].value, jnp.broadcast_to(x.sum(0)[:, None], (3, 2)))
        close(grads["bias"].value, jnp.full((2,), 4.0))

    def test_shape_error_under_jit(self):
        layer = Linear(3, 2, rngs=nnx.Rngs(0))
        with pytest.raises(LayerShapeError, match="last dimension 3"):
            nnx.jit(lambda m, x: m(x))(layer, jnp.ones((4, 5)))


class TestLinearGeneral:
    def test_heads_projection(self):
        layer = LinearGeneral(
            6, (2, 3), rngs=nnx.Rngs(0), bias_init=jax.nn.initializers.normal(1.0)
        )
        assert layer.kernel.shape == (6, 2, 3) and layer.bias.shape == (2, 3)
        x = rand(4, 5, 6)
        expected = jnp.einsum("btd,dnh->btnh", x, layer.kernel.value) + layer.bias.value[None, None]
        close(layer(x), expected)

    def test_multi_axis_contraction(self):
        layer = LinearGeneral(
            (2, 3), 6, axis=(-2, -1), rngs=nnx.Rngs(0), bias_init=jax.nn.initializers.normal(1.0)
        )
        assert layer.kernel.shape == (2, 3, 6)
        x = rand(4, 5, 2, 3)
        expected = jnp.einsum("btnh,nhd->btd", x, layer.kernel.value) + layer.bias.value[None, None]
        close(layer(x), expected)

    def test_non_trailing_axis(self):
        layer = LinearGeneral(5, 2, axis=1, use_bias=False, rngs=nnx.Rngs(0))
        x = rand(3, 5, 4)
        close(layer(x), jnp.einsum("atb,to->abo", x, layer.kernel.value))

    def test_batch_axis(self):
        layer = LinearGeneral(
            3, 4, batch_axis={0: 2}, rngs=nnx.Rngs(0), bias_init=jax.nn.initializers.normal(1.0)
        )
        assert layer.kernel.shape == (2, 3, 4) and layer.bias.shape == (2, 4)
        # each batch index has its own, independently initialized kernel
        assert not np.allclose(layer.kernel.value[0], layer.kernel.value[1])
        x = rand(2, 5, 3)
        expected = jnp.einsum("bti,bio->bto", x, layer.kernel.value) + layer.bias.value[:, None, :]
        close(layer(x), expected)

    def test_fan_in_of_whole_contraction(self):
        layer = LinearGeneral((16, 16), 64, axis=(-2, -1), use_bias=False, rngs=nnx.Rngs(0))
        # lecun_normal over a fan-in of 256: std about 1/16
        assert 0.04 < float(jnp.std(layer.kernel.value)) < 0.09

    def test_numpy_integer_axes_as_a_projection_head_passes_them(self):
        # A feature-projection head built from a feature shape: axis=np.arange(n)
        # (and NumPy ints as features) are ints, kept as a static tuple of Python
        # ints, so the layer runs eagerly and under nnx.jit.
        features = np.array([3, 2])[-2:]
        layer = LinearGeneral(
            tuple(features), np.int64(4), axis=np.arange(len(features)), rngs=nnx.Rngs(0)
        )
        assert layer.axis == (0, 1) and all(type(a) is int for a in layer.axis)
        assert layer.in_features == (3, 2) and layer.out_features == (4,)
        assert nnx.state(layer, nnx.Not(nnx.Param)) == nnx.State({})
        x = rand(3, 2, 5)
        expected = jnp.einsum("ijb,ijo->bo", x, layer.kernel.value) + layer.bias.value[None]
        close(layer(x), expected)
        close(nnx.jit(lambda m, x: m(x))(layer, x), expected)

    def test_errors(self):
        with pytest.raises(ValueError, match="one entry per in_features"):
            LinearGeneral((2, 3), 4, axis=-1, rngs=nnx.Rngs(0))
        layer = LinearGeneral((2, 3), 4, axis=(-2, -1), rngs=nnx.Rngs(0))
        with pytest.raises(
            LayerShapeError, match=r"sizes \(2, 3\) at axes \(-2, -1\), got shape \(5, 3, 2\)"
        ):
            layer(jnp.ones((5, 3, 2)))
        with pytest.raises(LayerShapeError, match="axis -2"):
            layer(jnp.ones((3,)))
        batched = LinearGeneral(3, 4, batch_axis={0: 2}, rngs=nnx.Rngs(0))
        with pytest.raises(LayerShapeError, match="size 2 at batch axis 0"):
            batched(jnp.ones((5, 3)))

    def test_jit_and_grad(self):
        layer = LinearGeneral(4, (2, 2), rngs=nnx.Rngs(0))
        x = rand(3, 4)
        close(nnx.jit(lambda m, x: m(x))(layer, x), layer(x))
        grads = nnx.grad(lambda m, x: jnp.sum(m(x) ** 2))(layer, x)
        assert grads["kernel"].value.shape == (4, 2, 2)


class TestEinsum:
    def test_numerics_with_bias(self):
        layer = Einsum(
            "nta,hab->nthb",
            (8, 2, 4),
            (8, 4),
            rngs=nnx.Rngs(0),
            bias_init=jax.nn.initializers.normal(1.0),
        )
        x = rand(3, 5, 2)
        expected = jnp.einsum("nta,hab->nthb", x, layer.kernel.value) + layer.bias.value[None, None]
        out = layer(x)
        assert out.shape == (3, 5, 8, 4)
        close(out, expected)

    def test_call_time_equation(self):
        layer = Einsum("ab,bc->ac", (3, 3), rngs=nnx.Rngs(0))
        x = rand(2, 3)
        close(layer(x, "ab,cb->ac"), jnp.einsum("ab,cb->ac", x, layer.kernel.value))

    def test_ellipsis(self):
        layer = Einsum("...d,df->...f", (4, 6), rngs=nnx.Rngs(0))
        x = rand(2, 3, 4)
        close(layer(x), x @ layer.kernel.value)

    def test_errors(self):
        with pytest.raises(ValueError, match="inputs,kernel->outputs"):
            Einsum("ab,bc", (2, 2), rngs=nnx.Rngs(0))
        with pytest.raises(ValueError, match="does not match the kernel operand"):
            Einsum("ab,bc->ac", (2, 2, 2), rngs=nnx.Rngs(0))
        layer = Einsum("ab,bc->ac", (3, 5), rngs=nnx.Rngs(0))
        with pytest.raises(LayerShapeError, match="size 3 for 'b'"):
            layer(jnp.ones((2, 4)))
        with pytest.raises(LayerShapeError, match="matching 'ab'"):
            layer(jnp.ones((2, 4, 3)))

    def test_jit_and_grad(self):
        layer = Einsum("ab,bc->ac", (3, 5), (5,), rngs=nnx.Rngs(0))
        x = rand(2, 3)
        close(nnx.jit(lambda m, x: m(x))(layer, x), layer(x))
        grads = nnx.grad(lambda m, x: jnp.sum(m(x)))(layer, x)
        close(grads["bias"].value, jnp.full((5,), 2.0))


def one_device_mesh():
    devices = np.asarray(jax.devices()[:1])
    return jax.sharding.Mesh(devices, ("a",), axis_types=(jax.sharding.AxisType.Explicit,))


def test_out_sharding_is_passed_to_the_product():
    P = jax.sharding.PartitionSpec
    x = rand(2, 3)
    with jax.set_mesh(one_device_mesh()):
        for layer, spec in [
            (Linear(3, 4, rngs=nnx.Rngs(0)), P("a", None)),
            (LinearGeneral(3, (2, 2), rngs=nnx.Rngs(0)), P("a", None, None)),
            (Einsum("ab,bc->ac", (3, 4), rngs=nnx.Rngs(0)), P("a", None)),
        ]:
            y = layer(x, out_sharding=spec)
            assert y.sharding.spec == spec
            close(y, layer(x))


def test_out_sharding_none_keeps_custom_dot_general_working():
    seen = {}

    def dot(lhs, rhs, dims, precision=None):
        seen["called"] = True
        return jax.lax.dot_general(lhs, rhs, dims, precision=precision)

    layer = Linear(3, 4, dot_general=dot, rngs=nnx.Rngs(0))
    x = rand(2, 3)
    close(layer(x), x @ layer.kernel.value + layer.bias.value[None])
    assert seen["called"]


def test_linear_general_dot_general_cls():
    made = []

    class Dot:
        def __init__(self):
            made.append(self)

        def __call__(self, *args, **kwargs):
            return jax.lax.dot_general(*args, **kwargs)

    # As Flax's: one instance per call, and the class wins over dot_general.
    def never(*args, **kwargs):
        raise AssertionError("dot_general used although dot_general_cls is given")

    layer = LinearGeneral(3, 4, dot_general=never, dot_general_cls=Dot, rngs=nnx.Rngs(0))
    assert made == [] and layer.dot_general is never and layer.dot_general_cls is Dot
    x = rand(2, 3)
    close(layer(x), x @ layer.kernel.value + layer.bias.value[None])
    close(layer(x), x @ layer.kernel.value + layer.bias.value[None])
    assert len(made) == 2


def test_einsum_bias_shape_may_be_an_int():
    layer = Einsum("ik,kj->ij", (5, 4), 4, rngs=nnx.Rngs(0))
    assert layer.bias_shape == (4,) and layer.bias.value.shape == (4,)
    assert layer(jnp.ones((2, 5))).shape == (2, 4)
