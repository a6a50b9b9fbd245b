"""Tests of flaxgraph/nn/lora.py: LoRA and LoRALinear recomputed in NumPy; LoRAParam
as a filter for fine-tuning only the adapters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.nn import LayerShapeError, Linear, LoRA, LoRALinear, LoRAParam

RNG = np.random.default_rng(12)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


normal = jax.nn.initializers.normal(1.0)


def test_lora_param_is_a_param():
    p = LoRAParam(jnp.zeros((2, 3)), out_sharding=(None, "model"))
    assert isinstance(p, nnx.Param) and p.out_sharding == (None, "model")
    assert nnx.LoRAParam is LoRAParam


@given(
    in_features=st.integers(1, 5),
    rank=st.integers(1, 3),
    out_features=st.integers(1, 5),
    batch=st.lists(st.integers(1, 3), max_size=2),
)
def test_lora_numerics(in_features, rank, out_features, batch):
    layer = LoRA(in_features, rank, out_features, b_initializer=normal, rngs=nnx.Rngs(0))
    assert layer.lora_a.shape == (in_features, rank)
    assert layer.lora_b.shape == (rank, out_features)
    assert type(layer.lora_a) is LoRAParam and type(layer.lora_b) is LoRAParam
    x = rand(*batch, in_features)
    a, b = np.asarray(layer.lora_a.value, np.float64), np.asarray(layer.lora_b.value, np.float64)
    y = layer(x)
    assert y.shape == (*batch, out_features)
    close(y, np.asarray(x, np.float64) @ a @ b)


def test_lora_initializers():
    layer = LoRA(6, 2, 3, rngs=nnx.Rngs(0))
    assert not np.asarray(layer.lora_b.value).any()  # zeros: starts as no change
    a = np.asarray(layer.lora_a.value)
    bound = np.sqrt(6.0 / 6)  # he_uniform: U(-sqrt(6 / fan_in), sqrt(6 / fan_in))
    assert np.abs(a).max() <= bound and a.std() > 0.1
    keys = nnx.Rngs(0)
    expected = jax.nn.initializers.he_uniform()(keys.params(), (6, 2), jnp.float32)
    close(layer.lora_a.value, expected)


def test_lora_with_base_module_and_kwargs():
    base = Linear(3, 4, rngs=nnx.Rngs(1))
    layer = LoRA(3, 2, 4, base_module=base, b_initializer=normal, rngs=nnx.Rngs(0))
    x = rand(5, 3)
    a, b = np.asarray(layer.lora_a.value), np.asarray(layer.lora_b.value)
    close(layer(x), np.asarray(base(x)) + np.asarray(x) @ a @ b)
    einsum = nnx.Einsum("ab,bc->ac", (3, 4), rngs=nnx.Rngs(2))
    wrapped = LoRA(3, 2, 4, base_module=einsum, rngs=nnx.Rngs(0))
    close(wrapped(x, einsum_str="ab,bc->ac"), einsum(x))
    with pytest.raises(TypeError, match="base_module must be a callable"):
        LoRA(3, 2, 4, base_module=3, rngs=nnx.Rngs(0))


def test_lora_dtypes_and_metadata():
    layer = LoRA(
        3,
        2,
        4,
        param_dtype=jnp.bfloat16,
        lora_param_type=nnx.Param,
        a_metadata={"out_sharding": (None, "r")},
        rngs=nnx.Rngs(0),
    )
    assert type(layer.lora_a) is nnx.Param and layer.lora_a.value.dtype == jnp.bfloat16
    assert layer.lora_a.out_sharding == (None, "r")
    assert layer(rand(2, 3)).dtype == jnp.float32  # promoted with float32 inputs
    half = LoRA(3, 2, 4, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert half(rand(2, 3)).dtype == jnp.bfloat16


def test_lora_shape_error():
    with pytest.raises(
        LayerShapeError,
        match=r"LoRA\(in_features=3, lora_rank=2, out_features=4\) expected inputs with last "
        r"dimension 3, got shape \(2, 5\)",
    ):
        LoRA(3, 2, 4, rngs=nnx.Rngs(0))(jnp.ones((2, 5)))


def test_lora_linear_numerics_and_layout():
    layer = LoRALinear(3, 4, lora_rank=2, b_initializer=normal, rngs=nnx.Rngs(0))
    plain = Linear(3, 4, rngs=nnx.Rngs(0))
    close(layer.kernel.value, plain.kernel.value)  # same seed: same Linear params
    assert isinstance(layer, Linear)
    assert layer.lora.lora_a.shape == (3, 2) and layer.lora.lora_b.shape == (2, 4)
    x = rand(6, 3)
    k, bias = np.asarray(layer.kernel.value), np.asarray(layer.bias.value)
    a, b = np.asarray(layer.lora.lora_a.value), np.asarray(layer.lora.lora_b.value)
    xn = np.asarray(x, np.float64)
    close(layer(x), xn @ k + bias + xn @ a @ b)
    no_bias = LoRALinear(3, 4, lora_rank=1, use_bias=False, rngs=nnx.Rngs(0))
    assert no_bias.bias is None
    # a trained Linear's state loads into the LoRALinear's Linear part
    nnx.update(no_bias, nnx.state(Linear(3, 4, use_bias=False, rngs=nnx.Rngs(5))))
    close(no_bias(x), Linear(3, 4, use_bias=False, rngs=nnx.Rngs(5))(x))


def test_lora_linear_shape_error():
    with pytest.raises(LayerShapeError, match=r"LoRALinear\(in_features=3, out_features=4\)"):
        LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))(jnp.ones((2, 5)))


def test_fine_tuning_only_lora_params():
    model = LoRALinear(3, 2, lora_rank=2, rngs=nnx.Rngs(0))
    kernel0 = np.asarray(model.kernel.value)
    x, target = rand(8, 3), rand(8, 2)

    def loss(m):
        return jnp.mean((m(x) - target) ** 2)

    grads = nnx.grad(loss, argnums=nnx.DiffState(0, LoRAParam))(model)
    assert set(grads.keys()) == {"lora"}
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=LoRAParam)
    before = float(loss(model))
    for _ in range(5):
        optimizer.update(model, nnx.grad(loss, argnums=nnx.DiffState(0, LoRAParam))(model))
    assert float(loss(model)) < before
    np.testing.assert_array_equal(np.asarray(model.kernel.value), kernel0)


def test_jit():
    layer = LoRALinear(3, 4, lora_rank=2, b_initializer=normal, rngs=nnx.Rngs(0))
    x = rand(2, 3)
    close(nnx.jit(lambda m, x: m(x))(layer, x), layer(x))


def test_against_flax():
    flax_nnx = pytest.importorskip("flax.nnx")
    x = np.asarray(rand(5, 3))
    ours = LoRALinear(3, 4, lora_rank=2, b_initializer=normal, rngs=nnx.Rngs(0))
    theirs = flax_nnx.LoRALinear(3, 4, lora_rank=2, b_initializer=normal, rngs=flax_nnx.Rngs(0))
    close(ours(x), theirs(x))
    close(ours.lora.lora_a.value, theirs.lora.lora_a[...])
