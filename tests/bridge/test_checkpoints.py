"""A Linen checkpoint restores into the flaxgraph port of the model, path for path."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph import bridge


class LinenNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(6)(x))
        x = nn.BatchNorm(use_running_average=True)(x)
        return nn.Dense(2)(x)


class Port(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(3, 6, rngs=rngs)
        self.bn = nnx.BatchNorm(6, use_running_average=True, rngs=rngs)
        self.fc2 = nnx.Linear(6, 2, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.bn(nnx.relu(self.fc1(x))))


RENAMES = {"Dense_0": "fc1", "BatchNorm_0": "bn", "Dense_1": "fc2"}
X = jax.random.normal(jax.random.key(2), (4, 3))


def test_linen_checkpoint_restores_into_the_port_and_back() -> None:
    variables = LinenNet().init(jax.random.key(0), X)
    variables = jax.tree.map(lambda a: a + 0.5, variables)  # as after some training
    port = Port(rngs=nnx.Rngs(1))
    state = bridge.linen_params_to_state(variables, renames=RENAMES)
    assert isinstance(state["bn"]["mean"], nnx.BatchStat)
    nnx.update(port, state)
    np.testing.assert_allclose(port(X), LinenNet().apply(variables, X), rtol=1e-6)

    back = bridge.state_to_linen_params(nnx.state(port), renames={v: k for k, v in RENAMES.items()})
    assert jax.tree.structure(back) == jax.tree.structure(variables)
    jax.tree.map(np.testing.assert_array_equal, back, variables)


def test_two_variables_on_one_path_is_an_error() -> None:
    with pytest.raises(ValueError, match="same flaxgraph path fc"):
        bridge.linen_params_to_state(
            {"a": {"w": jnp.ones(1)}, "b": {"w": jnp.ones(1)}},
            collection="params",
            renames={"a": "fc", "b": "fc"},
        )


_names = st.sampled_from(["Dense_0", "Dense_1", "kernel", "bias", "scale", "block"])
_arrays = st.integers(1, 3).map(lambda n: np.arange(n, dtype=np.float32))
_trees = st.recursive(
    _arrays,
    lambda children: st.dictionaries(_names, children, min_size=1, max_size=3),
    max_leaves=6,
)


@settings(max_examples=50)
@given(params=st.dictionaries(_names, _trees, min_size=1, max_size=3), stats=st.booleans())
def test_round_trip_is_path_for_path(params: dict, stats: bool) -> None:
    # property: Linen variables -> State -> Linen variables is the identity, and
    # every State path is the Linen path without the collection
    variables = {
        "params": params,
        **({"batch_stats": {"bn": {"mean": np.zeros(2)}}} if stats else {}),
    }
    state = bridge.linen_params_to_state(variables)
    back = bridge.state_to_linen_params(state)
    assert jax.tree.structure(back) == jax.tree.structure(variables)
    jax.tree.map(np.testing.assert_array_equal, back, variables)
    kinds = {type(v).__name__ for _, v in state.flat_state()}
    assert kinds == ({"Param", "BatchStat"} if stats else {"Param"})
