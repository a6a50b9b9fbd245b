"""``ToLinen``/``to_linen``: a flaxgraph model and its Linen wrapper agree; under
Linen's lifted ``nn.scan``/``nn.vmap`` the sharding names of stacked Variables
carry the added axis at the right position."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph import bridge


class MLP(nnx.Module):
    def __init__(self, din: int, dout: int, *, rngs: nnx.Rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp"))
        self.fc = nnx.Linear(din, 5, kernel_init=init, rngs=rngs)
        self.bn = nnx.BatchNorm(5, rngs=rngs)
        self.out = nnx.Linear(5, dout, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.bn(self.fc(x))))


X = jax.random.normal(jax.random.key(1), (4, 3))


def test_outputs_and_gradients_match_the_flaxgraph_model() -> None:
    wrapper = bridge.to_linen(MLP, 3, 2)
    variables = wrapper.init(jax.random.key(0), X)
    assert set(variables) == {"params", "batch_stats"}
    kernel = variables["params"]["fc"]["kernel"]
    assert isinstance(kernel, bridge.NNXMeta) and kernel.metadata["out_sharding"] == (
        "embed",
        "mlp",
    )

    model = MLP(3, 2, rngs=nnx.Rngs(0))
    nnx.update(model, bridge.linen_params_to_state(variables))
    np.testing.assert_allclose(wrapper.apply(variables, X), model(X), rtol=1e-6)

    def linen_loss(params):
        return jnp.sum(wrapper.apply({**variables, "params": params}, X) ** 2)

    expected = nnx.grad(lambda m: jnp.sum(m(X) ** 2))(model)
    grads = nn.meta.unbox(jax.grad(linen_loss)(variables["params"]))
    jax.tree.map(
        np.testing.assert_allclose, grads, bridge.state_to_linen_params(expected)["params"]
    )


def test_apply_with_mutable_returns_updated_collections() -> None:
    wrapper = bridge.to_linen(MLP, 3, 2)
    variables = wrapper.init(jax.random.key(0), X)
    _, updates = wrapper.apply(variables, X, mutable=["batch_stats"])
    assert not np.allclose(
        updates["batch_stats"]["bn"]["mean"], variables["batch_stats"]["bn"]["mean"]
    )


class Block(nnx.Module):
    def __init__(self, d: int, *, rngs: nnx.Rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp"))
        self.linear = nnx.Linear(d, d, kernel_init=init, rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.linear(x))


class Stack(nn.Module):
    layers: int = 4

    @nn.compact
    def __call__(self, x):
        scan = nn.scan(
            lambda block, carry, _: (block(carry), None),
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        return scan(bridge.ToLinen(Block, args=(x.shape[-1],), name="blocks"), x, None)[0]


def test_scan_over_layers_adds_the_layer_axis_name() -> None:
    variables = Stack().init(jax.random.key(0), X)
    kernel = variables["params"]["blocks"]["linear"]["kernel"]
    assert kernel.value.shape == (4, 3, 3)
    assert kernel.metadata["out_sharding"] == ("layers", "embed", "mlp")
    spec = nn.get_partition_spec(variables)["params"]["blocks"]["linear"]["kernel"]
    assert spec == jax.sharding.PartitionSpec("layers", "embed", "mlp")

    # the stacked layers compute what four flaxgraph Blocks do one after the other
    y = Stack().apply(variables, X)
    expected = X
    for i in range(4):
        block = Block(3, rngs=nnx.Rngs(0))
        layer = jax.tree.map(lambda a, i=i: a[i], nn.meta.unbox(variables["params"]["blocks"]))
        nnx.update(block, bridge.linen_params_to_state(layer, collection="params"))
        expected = block(expected)
    np.testing.assert_allclose(y, expected, rtol=1e-5)

    # training under scan: gradients flow to the stacked kernel
    grads = jax.grad(lambda v: jnp.sum(Stack().apply(v, X) ** 2))(variables)
    assert grads["params"]["blocks"]["linear"]["kernel"].value.shape == (4, 3, 3)


class Kernel(nnx.Module):
    def __init__(self, d: int, *, rngs: nnx.Rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp"))
        self.linear = nnx.Linear(d, d, use_bias=False, kernel_init=init, rngs=rngs)

    def __call__(self, x):
        return self.linear(x)


@settings(max_examples=8, deadline=None)
@given(axis=st.integers(0, 2), use_scan=st.booleans())
def test_lifted_transforms_insert_the_axis_name_at_the_stacked_position(
    axis: int, use_scan: bool
) -> None:
    # property: for every variable axis, under nn.vmap and nn.scan, the partition
    # name lands where the array grew and the other names keep their order
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            common = dict(
                variable_axes={"params": axis},
                split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: "stack"},
            )
            if use_scan:
                lifted = nn.scan(lambda m, c, _: (m(c), None), length=2, **common)
                return lifted(_kernel(), x, None)[0]
            vmapped = nn.vmap(bridge.ToLinen, in_axes=None, axis_size=2, **common)
            return vmapped(Kernel, args=(3,), name="members")(x)

    variables = Outer().init(jax.random.key(0), X)
    kernel = variables["params"]["members"]["linear"]["kernel"]
    names = list(kernel.metadata["out_sharding"])
    assert names.pop(axis) == "stack" and names == ["embed", "mlp"]
    assert kernel.value.shape[axis] == 2 and len(kernel.value.shape) == 3
    assert Outer().apply(variables, X).shape == ((4, 3) if use_scan else (2, 4, 3))


def _kernel() -> bridge.ToLinen:
    return bridge.ToLinen(Kernel, args=(3,), name="members")


@given(
    names=st.lists(st.sampled_from(["a", "b", None]), max_size=4).map(tuple),
    data=st.data(),
)
def test_nnxmeta_add_and_remove_axis_are_inverses(names: tuple, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(names)))
    box = bridge.NNXMeta(nnx.Param, jnp.zeros(()), {"out_sharding": names})
    added = box.add_axis(index, {nn.PARTITION_NAME: "x"})
    assert added.metadata["out_sharding"][index] == "x"
    assert added.remove_axis(index, {nn.PARTITION_NAME: "x"}).metadata == box.metadata


def test_to_linen_class_and_method_calls() -> None:
    LinenEmbed = bridge.to_linen_class(nnx.Embed, num_embeddings=5)
    module = LinenEmbed(features=3)
    ids = jnp.array([0, 4])
    y, variables = module.init_with_output(jax.random.key(0), ids)
    assert y.shape == (2, 3) and variables["params"]["embedding"].shape == (5, 3)
    assert module.apply(variables, jnp.ones((1, 3)), nnx_method="attend").shape == (1, 5)


def test_under_nn_jit_and_nn_remat() -> None:
    for lift in (nn.jit, nn.remat):

        class Outer(nn.Module):
            @nn.compact
            def __call__(self, x):
                return lift(bridge.ToLinen)(nnx.Linear, args=(3, 2), name="inner")(x)

        variables = Outer().init(jax.random.key(0), X)
        plain = bridge.to_linen(nnx.Linear, 3, 2)
        inner = {"params": variables["params"]["inner"]}
        np.testing.assert_allclose(Outer().apply(variables, X), plain.apply(inner, X), rtol=1e-6)
        grads = jax.grad(lambda p: Outer().apply({"params": p}, X).sum())(variables["params"])
        expected = jax.grad(lambda p: plain.apply({"params": p}, X).sum())(inner["params"])
        jax.tree.map(np.testing.assert_allclose, grads["inner"], expected)
