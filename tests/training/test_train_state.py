"""TrainState: a functional training loop under plain jax.jit against the same loop
written with optax on a dict of arrays; pytree structure (static tx and graphdef),
subclass fields, apply with field names or States, immutability."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx
from flaxgraph.training import TrainState


class Model(nnx.Module):
    def __init__(self) -> None:
        k1, k2 = jax.random.split(jax.random.key(0))
        self.w = nnx.Param(jax.random.normal(k1, (3, 2)))
        self.b = nnx.Param(jax.random.normal(k2, (2,)))
        self.calls = nnx.BatchStat(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.value = self.calls.value + 1
        return jnp.tanh(x @ self.w + self.b[None])

    def double(self, x: jax.Array) -> jax.Array:
        return 2 * self(x)


def batch(i: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(jax.random.key(10 + i))
    return jax.random.normal(kx, (4, 3)), jax.random.normal(ky, (4, 2))


def test_train_loop_under_jit_matches_pure_optax():
    graphdef, params, rest = nnx.split(Model(), nnx.Param, ...)
    state = TrainState.create(graphdef, params=params, tx=optax.adam(1e-1))
    assert int(state.step) == 0

    @jax.jit
    def step(state: TrainState[Model], rest: nnx.State, x: jax.Array, y: jax.Array):
        def loss_fn(params: nnx.State) -> jax.Array:
            out, _ = state.apply(params, rest)(x)
            return ((out - y) ** 2).mean()

        return state.apply_gradients(jax.grad(loss_fn)(state.params))

    # the reference: optax on a plain dict of arrays
    ref = {"w": params["w"].value, "b": params["b"].value}
    tx = optax.adam(1e-1)
    opt = tx.init(ref)
    for i in range(4):
        x, y = batch(i)
        state = step(state, rest, x, y)
        grads = jax.grad(lambda p: ((jnp.tanh(x @ p["w"] + p["b"][None]) - y) ** 2).mean())(ref)
        updates, opt = tx.update(grads, opt, ref)
        ref = optax.apply_updates(ref, updates)
    assert int(state.step) == 4
    for k in ref:
        np.testing.assert_allclose(state.params[k].value, ref[k], rtol=1e-5, atol=1e-6)
    assert type(state.params["w"]) is nnx.Param


def test_pytree_structure_tx_and_graphdef_are_static():
    graphdef, params = nnx.split(Model(), nnx.Param, ...)[:2]
    tx = optax.sgd(0.1)
    state = TrainState.create(graphdef, params=params, tx=tx, step=3)
    leaves, treedef = jax.tree.flatten(state)
    # only params' arrays and step are leaves (sgd has no arrays in its state)
    assert len(leaves) == 3
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert rebuilt.tx is tx and rebuilt.graphdef == graphdef and int(rebuilt.step) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.step = jnp.asarray(0)  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(TrainState)] == [
        "graphdef",
        "params",
        "opt_state",
        "step",
        "tx",
    ]


def test_apply_by_field_name_and_method_returns_the_new_state():
    class WithRest(TrainState[Model]):
        rest: nnx.State

    graphdef, params, rest = nnx.split(Model(), nnx.Param, ...)
    state = WithRest.create(graphdef, params=params, tx=optax.sgd(0.1), rest=rest)
    x = jnp.ones((1, 3))
    out, (new_graphdef, new_state) = state.apply("params", "rest")(x)
    expected = jnp.tanh(x @ params["w"].value + params["b"].value[None])
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert new_graphdef == graphdef
    assert int(new_state["calls"].value) == 1  # the call's update comes back
    assert int(rest["calls"].value) == 0  # the state it was given is untouched
    out2, _ = state.apply("params", "rest").double(x)
    np.testing.assert_allclose(out2, 2 * expected, rtol=1e-6)
    # subclass fields travel through apply_gradients' kwargs and the pytree
    grads = jax.tree.map(jnp.zeros_like, state.params)
    new_rest = new_state.filter(nnx.BatchStat)
    stepped = state.apply_gradients(grads, rest=new_rest)
    assert isinstance(stepped, WithRest) and stepped.rest is new_rest
    assert int(stepped.step) == 1
    assert len(jax.tree.leaves(stepped)) == len(jax.tree.leaves(state))


def test_create_with_an_unknown_field_is_a_type_error():
    graphdef, params = nnx.split(Model(), nnx.Param, ...)[:2]
    with pytest.raises(TypeError):
        TrainState.create(graphdef, params=params, tx=optax.sgd(0.1), extra=1)


def test_flax_name_and_signature():
    import inspect

    assert nnx.TrainState is TrainState
    create = inspect.signature(TrainState.create).parameters
    assert list(create) == ["graphdef", "params", "tx", "step", "kwargs"]
    assert create["step"].default == 0
