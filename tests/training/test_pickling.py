"""Training objects through pickle, cloudpickle and copy.deepcopy (flax#4247).

Differential: N training steps, a round trip, N more steps give bitwise the state of
2N steps without the round trip (optimizer, EMA, metrics, the model's BatchNorm
statistics and dropout RNG counts included); objects shared before the round trip
are shared after it.
"""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx

N = 3

ROUND_TRIPS: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "cloudpickle": lambda obj: pickle.loads(cloudpickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
}

TXS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "adam": lambda: optax.adam(1e-2),
    "chain_schedule": lambda: optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10), weight_decay=1e-3),
    ),
    "inject_hyperparams": lambda: optax.inject_hyperparams(optax.sgd)(
        learning_rate=0.1, momentum=0.9
    ),
}


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.dropout(nnx.relu(self.norm(self.linear(x)))))


def batch(step: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(jax.random.key(100 + step))
    return jax.random.normal(kx, (8, 3)), jax.random.normal(ky, (8, 2))


@nnx.jit
def train_step(bundle: dict[str, Any], x: jax.Array, y: jax.Array) -> jax.Array:
    model, optimizer = bundle["model"], bundle["optimizer"]
    loss, grads = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
    optimizer.update(model, grads)
    bundle["ema"].update(model)
    bundle["metrics"].update(loss=loss, values=loss)
    return loss


def make_bundle(tx_name: str) -> dict[str, Any]:
    model = Net(nnx.Rngs(0, dropout=1))
    return {
        "model": model,
        "optimizer": nnx.Optimizer(model, TXS[tx_name](), wrt=nnx.Param),
        "ema": nnx.EMA(model, 0.9, only=nnx.Param),
        "metrics": nnx.MultiMetric(
            loss=nnx.metrics.Average("loss"), spread=nnx.metrics.Welford("values")
        ),
    }


def leaves(obj: Any) -> list[np.ndarray]:
    state = nnx.state(obj)
    return [
        np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
        for x in jax.tree.leaves(state)
    ]


def assert_same(a: Any, b: Any) -> None:
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)


def test_the_script_of_flax_4247_pickles_an_optimizer() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    restored = pickle.loads(pickle.dumps(optimizer))
    assert type(restored) is nnx.Optimizer and restored.wrt is nnx.Param
    assert_same(restored, optimizer)


# Each transformation with one round trip, each round trip once (a step compiles per pair).
PAIRS = [("adam", "deepcopy"), ("chain_schedule", "pickle"), ("inject_hyperparams", "cloudpickle")]


@pytest.mark.parametrize(("tx_name", "trip"), PAIRS)
def test_training_continues_identically_after_a_round_trip(tx_name: str, trip: str) -> None:
    straight, resumed = make_bundle(tx_name), make_bundle(tx_name)
    for step in range(2 * N):
        train_step(straight, *batch(step))
    for step in range(N):
        train_step(resumed, *batch(step))
    resumed = ROUND_TRIPS[trip](resumed)
    for step in range(N, 2 * N):
        train_step(resumed, *batch(step))
    assert_same(resumed, straight)
    for name in ("loss", "spread"):
        np.testing.assert_array_equal(
            jax.tree.leaves(resumed["metrics"].compute()[name]),
            jax.tree.leaves(straight["metrics"].compute()[name]),
        )


@pytest.mark.parametrize("trip", list(ROUND_TRIPS))
def test_model_and_optimizer_keeps_sharing_with_the_model_beside_it(trip: str) -> None:
    model = Net(nnx.Rngs(0, dropout=1))
    state = nnx.ModelAndOptimizer(model, optax.adam(1e-2))
    ema = nnx.EMA(model, 0.5, only=nnx.Param)
    ema_model = ema.apply_to(model)
    model2, state2, ema2, ema_model2 = ROUND_TRIPS[trip]((model, state, ema, ema_model))
    assert state2.model is model2
    assert ema_model2.linear.kernel is ema2.params["linear"]["kernel"]
    assert ema_model2.norm.mean is model2.norm.mean  # Variables EMA does not average
    assert (
        model2 is not model
        and ema2.params["linear"]["kernel"] is not ema.params["linear"]["kernel"]
    )

    @nnx.jit
    def step(state: nnx.ModelAndOptimizer, x: jax.Array, y: jax.Array) -> None:
        grads = nnx.grad(lambda m: ((m(x) - y) ** 2).mean())(state.model)
        state.update(grads)

    step(state, *batch(0))
    step(state2, *batch(0))
    assert_same(model2, model)
    assert_same(state2, state)


@pytest.mark.parametrize(("tx_name", "trip"), PAIRS)
def test_train_state_continues_identically_after_a_round_trip(tx_name: str, trip: str) -> None:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def step(state: nnx.TrainState, x: jax.Array, y: jax.Array) -> nnx.TrainState:
        def loss_fn(params: nnx.State) -> jax.Array:
            out, _ = state.apply(params)(x)
            return ((out - y) ** 2).mean()

        return state.apply_gradients(jax.grad(loss_fn)(state.params))

    straight = resumed = nnx.TrainState.create(graphdef, params=params, tx=TXS[tx_name]())
    for i in range(2 * N):
        straight = step(straight, *batch(i))
    for i in range(N):
        resumed = step(resumed, *batch(i))
    resumed = ROUND_TRIPS[trip](resumed)
    assert resumed.graphdef == graphdef
    for i in range(N, 2 * N):
        resumed = step(resumed, *batch(i))
    for x, y in zip(jax.tree.leaves(resumed), jax.tree.leaves(straight)):
        np.testing.assert_array_equal(x, y)


def test_a_function_filter_goes_by_value() -> None:
    model = Net(nnx.Rngs(0, dropout=1))

    def kernels(path: tuple[Any, ...], value: Any) -> bool:
        return path[-1] == "kernel"

    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=kernels)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(kernels)  # a local function: the standard pickle refuses it
    restored = pickle.loads(pickle.dumps(optimizer))
    assert restored.wrt((0, "kernel"), None) and not restored.wrt((0, "bias"), None)
    assert nnx.state(restored.opt_state).flat_state().paths == (
        nnx.state(optimizer.opt_state).flat_state().paths
    )


def test_deepcopy_shares_the_transformation() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    twin = copy.deepcopy(optimizer)
    assert twin.tx is optimizer.tx and copy.copy(optimizer).tx is optimizer.tx
    assert twin.opt_state[0].mu["kernel"] is not optimizer.opt_state[0].mu["kernel"]


def _init(params: Any) -> optax.EmptyState:
    return optax.EmptyState()


def _update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
    return jax.tree.map(lambda g: -0.5 * g, updates), state


def test_without_cloudpickle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # `import cloudpickle` fails
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    importable = optax.GradientTransformation(_init, _update)
    optimizer = nnx.Optimizer(model, importable, wrt=nnx.Param)
    assert pickle.loads(pickle.dumps(optimizer)).tx == importable
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    with pytest.raises(pickle.PicklingError, match=r"(?s)Optimizer\.tx .*pip install cloudpickle"):
        pickle.dumps(optimizer)
