"""``ToNNX``/``lazy_init``: a Linen model and its wrapper agree (differential tests)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import errors as flax_errors
from flax import linen as nn

import flaxgraph as nnx
from flaxgraph import bridge


class LinenCNN(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(4, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x).reshape((x.shape[0], -1))
        return nn.Dense(3)(x)


X = jax.random.normal(jax.random.key(1), (2, 6, 6, 1))


def _wrapped() -> bridge.ToNNX:
    return bridge.lazy_init(bridge.ToNNX(LinenCNN(), rngs=nnx.Rngs(0)), X)


def _linen_variables(model: bridge.ToNNX) -> dict:
    return bridge.state_to_linen_params(nnx.state(model))


def test_outputs_and_gradients_match_linen() -> None:
    model = _wrapped()
    variables = _linen_variables(model)
    assert set(variables) == {"params", "batch_stats"}
    np.testing.assert_array_equal(model(X), LinenCNN().apply(variables, X))

    def linen_loss(params):
        return jnp.sum(LinenCNN().apply({**variables, "params": params}, X) ** 2)

    grads = nnx.grad(lambda m: jnp.sum(m(X) ** 2))(model)
    expected = jax.grad(linen_loss)(variables["params"])
    flat = bridge.state_to_linen_params(grads)["params"]
    jax.tree.map(np.testing.assert_allclose, flat, expected)


def test_kinds_follow_collections_and_split_sees_them() -> None:
    model = _wrapped()
    assert isinstance(model.Dense_0["kernel"], nnx.Param)
    assert isinstance(model.BatchNorm_0["mean"], nnx.BatchStat)
    _, params, stats, _ = nnx.split(model, nnx.Param, nnx.BatchStat, ...)
    assert len(jax.tree.leaves(params)) == 6 and len(jax.tree.leaves(stats)) == 2  # conv, bn, dense


def test_mutable_batch_stats_update_in_place_under_jit() -> None:
    model = _wrapped()
    mean = model.BatchNorm_0["mean"]

    @nnx.jit
    def step(model, x):
        return model(x, train=True, mutable=["batch_stats"])

    for _ in range(3):
        step(model, X)
    assert model.BatchNorm_0["mean"] is mean  # the same Variable, updated in place
    assert not np.allclose(mean[...], 0.0)
    assert step.cache_info().general_calls == 1  # later calls took the fast path


def test_missing_variable_error_is_also_linens() -> None:
    class TwoMethods(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.param("b", nn.initializers.zeros_init(), (3,)) + self.dot(x)

        @nn.compact
        def dot(self, x):
            return x @ self.param("w", nn.initializers.ones_init(), (2, 3))

    model = bridge.ToNNX(TwoMethods(), rngs=nnx.Rngs(0))
    bridge.lazy_init(model.dot, jnp.ones((1, 2)))
    with pytest.raises(flax_errors.ScopeParamNotFoundError, match=r"lazy_init\(model\.<method>"):
        model(jnp.ones((1, 2)))
    with pytest.raises(nnx.errors.ScopeParamNotFoundError):
        model(jnp.ones((1, 2)))


def test_lazy_init_needs_a_module() -> None:
    with pytest.raises(ValueError, match="needs a flaxgraph Module"):
        bridge.lazy_init(lambda x: x, 1)


def test_linen_boxes_become_variables_with_the_same_names() -> None:
    dense = nn.Dense(
        4,
        kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), ("in", "out")),
        bias_init=nn.with_logical_partitioning(
            nn.initializers.zeros_init(), ("o",), rules=(("o", "out"),)
        ),
    )
    model = bridge.ToNNX(dense, rngs=nnx.Rngs(0)).lazy_init(jnp.ones((1, 2)))
    assert model.kernel.out_sharding == ("in", "out")
    assert nnx.get_partition_spec(nnx.state(model))[
        "bias"
    ].get_value() == jax.sharding.PartitionSpec("out")
    back = bridge.state_to_linen_params(nnx.state(model), boxed=True)["params"]
    assert isinstance(back["kernel"], nn.Partitioned) and back["kernel"].names == ("in", "out")
    assert isinstance(back["bias"], nn.LogicallyPartitioned) and back["bias"].rules == (
        ("o", "out"),
    )


class LayerStack(nnx.Module):
    """Four Linen Dense layers created with nnx.vmap and applied with nnx.scan."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.layers = bridge.ToNNX(nn.Dense(3), rngs=rngs)

    def create(self, x):
        @nnx.split_rngs(splits=4)
        @nnx.vmap(in_axes=(0, None), axis_size=4)
        def create_layer(layer, x):
            return layer(x)

        return create_layer(self.layers, x)

    def __call__(self, x):
        @nnx.split_rngs(splits=4)
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def forward(layer, x):
            return layer(x)

        return forward(self.layers, x)


def test_lazy_init_under_vmap_then_scan_and_jit() -> None:
    model = LayerStack(rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3))
    bridge.lazy_init(model.create, x)
    assert model.layers.kernel.shape == (4, 3, 3) and model.layers.bias.shape == (4, 3)
    expected = x
    for i in range(4):
        expected = expected @ model.layers.kernel[i] + model.layers.bias[i][None]
    np.testing.assert_allclose(model(x), expected, rtol=1e-6)
    np.testing.assert_allclose(nnx.jit(lambda m, x: m(x))(model, x), expected, rtol=1e-6)
