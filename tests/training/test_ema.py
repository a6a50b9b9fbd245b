"""EMA: numerics against the numpy recurrence, metadata, applying the average,
structure errors, and a full training step (Optimizer + EMA + metrics) under
nnx.jit with donation."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx
from flaxgraph.training import EMA, EMAState, Optimizer
from flaxgraph.training.metrics import Average, MultiMetric


class Net(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.zeros((2, 3)), sharding=("data", None))
        self.b = nnx.Param(jnp.zeros(3))
        self.stats = nnx.BatchStat(jnp.ones(3))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w + self.b[None]


def random_values(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {
        "w": rng.normal(size=(2, 3)).astype(np.float32),
        "b": rng.normal(size=(3,)).astype(np.float32),
    }


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9, 0.999, 1.0])
def test_ema_matches_numpy_recurrence(decay: float):
    model = Net()
    ema = EMA(model, decay)
    expected = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    for i in range(6):
        new = random_values(i)
        model.w.value, model.b.value = jnp.asarray(new["w"]), jnp.asarray(new["b"])
        ema.update(model)
        expected = {k: decay * expected[k] + (1 - decay) * new[k] for k in expected}
        for k in expected:
            np.testing.assert_allclose(ema.averages[k].value, expected[k], rtol=1e-5, atol=1e-6)


def test_ema_state_kind_and_metadata():
    model = Net()
    ema = EMA(model, 0.9)
    assert sorted(ema.averages) == ["b", "w"]
    w = ema.averages["w"]
    assert type(w) is EMAState
    assert w.sharding == ("data", None) and w.source_type is nnx.Param
    specs = nnx.get_partition_spec(nnx.state(ema))
    assert specs["averages"]["w"].value == jax.sharding.PartitionSpec("data", None)
    # BatchStats are not averaged by default; wrt selects them
    assert "stats" not in ema.averages
    assert sorted(EMA(model, 0.9, wrt=nnx.BatchStat).averages) == ["stats"]


def test_averaged_state_and_copy_to():
    model = Net()
    ema = EMA(model, 0.5)
    model.w.value = jnp.ones((2, 3))
    ema.update(model)
    averaged = ema.averaged_state()
    assert type(averaged["w"]) is nnx.Param
    assert averaged["w"].sharding == ("data", None)
    assert averaged["w"].get_metadata("source_type", None) is None
    np.testing.assert_allclose(averaged["w"].value, 0.5)
    # use it for evaluation with merge, leaving the model alone
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    eval_model = nnx.merge(graphdef, averaged, rest)
    np.testing.assert_allclose(eval_model.w.value, 0.5)
    np.testing.assert_allclose(model.w.value, 1.0)
    # or write it into the model in place
    w = model.w
    ema.copy_to(model)
    assert model.w is w
    np.testing.assert_allclose(model.w.value, 0.5)
    assert model.w.sharding == ("data", None)


def test_ema_structure_mismatch_names_paths():
    model = Net()
    ema = EMA(model, 0.9)

    class Other(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.zeros((2, 3)))
            self.c = nnx.Param(jnp.zeros(3))

    with pytest.raises(ValueError, match=r"missing \(1\): b\n  extra \(1\): c"):
        ema.update(Other())
    with pytest.raises(nnx.GraphStructureError, match=r"EMA\.copy_to"):
        ema.copy_to(Other())


def test_decay_out_of_range():
    for decay in (-0.1, 1.5):
        with pytest.raises(ValueError, match="decay must be in"):
            EMA(Net(), decay)


def test_train_step_with_optimizer_ema_and_metrics_under_jit():
    x = jax.random.normal(jax.random.key(0), (16, 2))
    y = jax.random.normal(jax.random.key(1), (16, 3))

    def loss_fn(model: Net) -> jax.Array:
        return ((model(x) - y) ** 2).mean()

    def train_step(model: Net, optimizer: Optimizer[Net], ema: EMA, metrics: MultiMetric) -> None:
        traces.append(1)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        ema.update(model)
        metrics.update(loss=loss)

    objects: list[Any] = []
    for donate in (False, True):
        traces: list[int] = []
        model = Net()
        optimizer = Optimizer(model, optax.adam(0.05))
        ema = EMA(model, 0.8)
        metrics = MultiMetric(loss=Average("loss"))
        step = nnx.jit(train_step, donate_argnums=(0, 1, 2, 3) if donate else None)
        for _ in range(5):
            step(model, optimizer, ema, metrics)
        assert len(traces) == 1
        objects.append((model, optimizer, ema, metrics))

    # eager reference: optax on pure arrays and the numpy EMA recurrence
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    tx = optax.adam(0.05)
    state = tx.init(params)
    avg = jax.tree.map(np.asarray, params)
    losses = []
    for _ in range(5):
        loss, grads = jax.value_and_grad(lambda p: ((x @ p["w"] + p["b"][None] - y) ** 2).mean())(
            params
        )
        losses.append(float(loss))
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        avg = {k: 0.8 * avg[k] + 0.2 * np.asarray(params[k]) for k in avg}
    for model, optimizer, ema, metrics in objects:
        for k in ("w", "b"):
            np.testing.assert_allclose(getattr(model, k).value, params[k], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ema.averages[k].value, avg[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(metrics.compute()["loss"], np.mean(losses), rtol=1e-5)
        assert int(optimizer.step.value) == 5
        np.testing.assert_array_equal(model.stats.value, 1.0)
