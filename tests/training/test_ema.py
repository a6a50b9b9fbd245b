"""EMA (Flax 0.12 API): numerics against the numpy recurrence, kinds and metadata,
apply_to,
structure errors, and a full training step (Optimizer + EMA + metrics) under
nnx.jit with donation."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx
from flaxgraph.training import EMA, Optimizer
from flaxgraph.training.metrics import Average, MultiMetric


class Net(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.zeros((2, 3)), out_sharding=("data", None))
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
    ema = EMA(model, decay, only=nnx.Param)
    expected = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    for i in range(6):
        new = random_values(i)
        model.w.value, model.b.value = jnp.asarray(new["w"]), jnp.asarray(new["b"])
        ema.update(model)
        expected = {k: decay * expected[k] + (1 - decay) * new[k] for k in expected}
        for k in expected:
            np.testing.assert_allclose(ema.params[k].value, expected[k], rtol=1e-5, atol=1e-6)


def test_signature_matches_flax_012():
    import inspect

    params = inspect.signature(EMA.__init__).parameters
    assert list(params)[1:3] == ["params", "decay"]
    assert params["decay"].default is inspect.Parameter.empty
    assert params["only"].kind is inspect.Parameter.KEYWORD_ONLY and params["only"].default is ...


def test_params_keep_kinds_and_metadata_and_only_selects():
    model = Net()
    ema = EMA(model, 0.9)  # every Variable by default, as in Flax
    assert sorted(ema.params) == ["b", "stats", "w"]
    assert ema.filter is ...
    w = ema.params["w"]
    assert type(w) is nnx.Param and type(ema.params["stats"]) is nnx.BatchStat
    assert w is not model.w and w.value is not model.w.value  # a copy, own buffers
    assert w.out_sharding == ("data", None)
    specs = nnx.get_partition_spec(nnx.state(ema))
    assert specs["params"]["w"].value == jax.sharding.PartitionSpec("data", None)
    only = EMA(model, 0.9, only=nnx.BatchStat)
    assert sorted(only.params) == ["stats"] and only.filter is nnx.BatchStat
    assert sorted(EMA(model, 0.9, only=[nnx.BatchStat]).params) == ["stats"]


def test_update_from_a_state_and_integer_dtypes_cast_back():
    class Counter(nnx.Module):
        def __init__(self) -> None:
            self.n = nnx.Variable(jnp.zeros(2, jnp.int32))
            self.x = nnx.Param(jnp.zeros(2))

    model = Counter()
    ema = EMA(nnx.state(model), 0.5)
    model.n.value = jnp.array([3, 4], jnp.int32)
    model.x.value = jnp.array([1.0, 2.0])
    ema.update(nnx.state(model))
    assert ema.params["n"].value.dtype == jnp.int32
    np.testing.assert_array_equal(ema.params["n"].value, np.array([1.5, 2.0]).astype(np.int32))
    np.testing.assert_allclose(ema.params["x"].value, [0.5, 1.0])


def test_apply_to_uses_the_ema_variables_and_the_models_other_state():
    model = Net()
    ema = EMA(model, 0.5, only=nnx.Param)
    ema_model = ema.apply_to(model)
    assert type(ema_model) is Net and ema_model is not model
    assert ema_model.w is ema.params["w"] and ema_model.b is ema.params["b"]
    assert ema_model.stats is model.stats  # not tracked: the model's own
    model.w.value = jnp.ones((2, 3))
    ema.update(model)
    np.testing.assert_allclose(ema_model.w.value, 0.5)  # follows later updates
    np.testing.assert_allclose(model.w.value, 1.0)  # the model is left alone
    assert model.w is not ema.params["w"]
    x = jnp.ones((1, 2))
    np.testing.assert_allclose(ema_model(x), x @ (0.5 * np.ones((2, 3))))


def test_shared_variables_are_averaged_once_and_stay_shared():
    class Tied(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Param(jnp.zeros(2))
            self.b = self.a

    model = Tied()
    ema = EMA(model, 0.5)
    assert list(ema.params) == ["a"]
    tied = ema.apply_to(model)
    assert tied.a is tied.b is ema.params["a"]


def test_random_keys_are_refused_with_the_fix():
    class WithRngs(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.zeros(2))
            self.rngs = nnx.Rngs(0)

    with pytest.raises(TypeError, match=r"(?s)RngKey at rngs.*only=nnx\.Param"):
        EMA(WithRngs(), 0.9)
    assert list(EMA(WithRngs(), 0.9, only=nnx.Param).params) == ["w"]


def test_ema_structure_mismatch_names_paths():
    model = Net()
    ema = EMA(model, 0.9, only=nnx.Param)

    class Other(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.zeros((2, 3)))
            self.c = nnx.Param(jnp.zeros(3))

    before = ema.params["w"].value
    with pytest.raises(ValueError, match=r"missing \(1\): b\n  extra \(1\): c"):
        ema.update(Other())
    assert ema.params["w"].value is before
    with pytest.raises(nnx.GraphStructureError, match=r"EMA\.apply_to"):
        ema.apply_to(Other())


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
        optimizer = Optimizer(model, optax.adam(0.05), wrt=nnx.Param)
        ema = EMA(model, 0.8, only=nnx.Param)
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
            np.testing.assert_allclose(ema.params[k].value, avg[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(metrics.compute()["loss"], np.mean(losses), rtol=1e-5)
        assert int(optimizer.step.value) == 5
        np.testing.assert_array_equal(model.stats.value, 1.0)


def test_matches_flax_ema_with_integer_and_float_state():
    pytest.importorskip("flax")
    from flax import nnx as flax_nnx

    def build(lib: Any) -> Any:
        class Model(lib.Module):
            def __init__(self) -> None:
                self.w = lib.Param(jnp.zeros((2, 3)))
                self.n = lib.BatchStat(jnp.zeros(3, jnp.int32))

        return Model()

    ours, theirs = build(nnx), build(flax_nnx)
    ema, flax_ema = EMA(ours, 0.7), flax_nnx.EMA(theirs, 0.7)
    for i in range(4):
        new = random_values(i)["w"]
        for m in (ours, theirs):
            m.w[...] = jnp.asarray(new)
            m.n[...] = jnp.asarray([3 * i, 5 * i, 7], jnp.int32)
        ema.update(ours)
        with warnings.catch_warnings():  # Flax casts float to int with a FutureWarning
            warnings.simplefilter("ignore", FutureWarning)
            flax_ema.update(theirs)
    np.testing.assert_allclose(ema.params["w"][...], flax_ema.params["w"][...], rtol=1e-6)
    np.testing.assert_array_equal(ema.params["n"][...], flax_ema.params["n"][...])
