"""``bridge.Module``: Linen-style modules (``setup``, ``@compact``, ``init``/``apply``)
that are flaxgraph Modules, checked against the same model written in Linen."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

import flaxgraph as nnx
from flaxgraph import bridge


class Dense(bridge.Module):
    features: int

    @bridge.compact
    def __call__(self, x):
        w = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        b = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        return x @ w + b[None]


class MLP(bridge.Module):
    def setup(self):
        self.hidden = Dense(4)

    @bridge.compact
    def __call__(self, x):
        count = self.variable("counts", "calls", lambda: jnp.zeros((), jnp.int32))
        count[...] += 1
        return Dense(2)(nn.relu(self.hidden(x)))


class LinenMLP(nn.Module):
    def setup(self):
        self.hidden = nn.Dense(4)

    @nn.compact
    def __call__(self, x):
        count = self.variable("counts", "calls", lambda: jnp.zeros((), jnp.int32))
        count.value += 1
        return nn.Dense(2, name="Dense_0")(nn.relu(self.hidden(x)))


X = jnp.ones((3, 5))


def test_same_variables_and_outputs_as_linen() -> None:
    variables = MLP().init(jax.random.key(0), X)
    linen_variables = LinenMLP().init(jax.random.key(0), X)
    assert jax.tree.structure(variables) == jax.tree.structure(linen_variables)
    assert jax.tree.map(jnp.shape, variables) == jax.tree.map(jnp.shape, linen_variables)
    y, updates = MLP().apply(variables, X, mutable="counts")
    linen_y, linen_updates = LinenMLP().apply(variables, X, mutable="counts")
    np.testing.assert_allclose(y, linen_y, rtol=1e-6)
    assert updates["counts"]["calls"] == linen_updates["counts"]["calls"] == 2


def test_apply_leaves_the_module_unbound_and_unchanged() -> None:
    model = MLP()
    before = nnx.graphdef(model)
    model.init(jax.random.key(0), X)
    assert model.scope is None and nnx.graphdef(model) == before


def test_param_outside_init_is_an_error() -> None:
    with pytest.raises(ValueError, match="setup"):
        Dense(3).param("w", nn.initializers.zeros_init(), (1,))


def test_shared_submodule_is_stored_under_the_highest_priority_name() -> None:
    class Top(bridge.Module):
        def setup(self):
            self.zzz = Dense(2)
            self.set_attr_priority("zzz", bridge.AttrPriority.HIGH)
            self.aaa = self.zzz

        def __call__(self, x):
            return self.aaa(x)

    assert list(Top().init(jax.random.key(0), X)["params"]) == ["zzz"]


def test_flaxgraph_and_linen_submodules() -> None:
    class Mixed(bridge.Module):
        @bridge.compact
        def __call__(self, x):
            x = bridge.nnx_in_bridge_mdl(lambda rngs: nnx.Linear(5, 4, rngs=rngs))(x)
            return bridge.linen_in_bridge_mdl(nn.Dense(2), name="head")(x)

    variables = Mixed().init(jax.random.key(0), X)
    assert set(variables["params"]) == {"Linear_0", "head"}
    expected = variables["params"]["head"]["kernel"].T @ (
        variables["params"]["Linear_0"]["kernel"].T @ X.T
        + variables["params"]["Linear_0"]["bias"][:, None]
    )
    y = Mixed().apply(variables, X)
    np.testing.assert_allclose(y, expected.T + variables["params"]["head"]["bias"][None], rtol=1e-5)
