"""Metrics: numerics against numpy over streams of batches, errors, MultiMetric,
and updates inside nnx.jit (no retrace, hashable GraphDef)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.training import metrics
from flaxgraph.training.metrics import (
    Accuracy,
    Average,
    Metric,
    MetricState,
    MultiMetric,
    Statistics,
    Welford,
)

RNG = np.random.default_rng(0)


def stream() -> list[np.ndarray]:
    """Batches of several shapes, including a scalar and a single element."""
    return [
        RNG.normal(size=(5,)).astype(np.float32),
        np.float32(RNG.normal()),
        RNG.normal(3.0, 2.0, size=(4, 3)).astype(np.float32),
        RNG.normal(size=(1,)).astype(np.float32),
        RNG.normal(-1.0, 0.5, size=(7,)).astype(np.float32),
    ]


def close(a: Any, b: Any) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)


# -- Average -------------------------------------------------------------------------------------


def test_average_matches_numpy_over_a_stream():
    avg = Average()
    seen: list[float] = []
    for batch in stream():
        avg.update(values=jnp.asarray(batch))
        seen.extend(np.ravel(batch))
        close(avg.compute(), np.mean(seen))
    assert int(avg.count.value) == len(seen)
    assert avg.compute().dtype == jnp.float32


def test_average_nan_before_update_and_after_reset():
    avg = Average()
    assert np.isnan(avg.compute())
    avg.update(values=jnp.array([1, 2, 3, 4]))  # integers are averaged as floats
    close(avg.compute(), 2.5)
    total = avg.total
    avg.reset()
    assert np.isnan(avg.compute())
    assert avg.total is total, "reset must keep the same Variables"


def test_average_argname_and_ignored_kwargs():
    avg = Average("loss")
    avg.update(loss=2.0, logits=jnp.ones((3, 2)), labels=jnp.zeros(3, int))
    avg.update(loss=nnx.Variable(jnp.array(4.0)))  # Variables are unboxed
    close(avg.compute(), 3.0)


def test_average_missing_argument_names_it():
    with pytest.raises(TypeError, match=r"expected the keyword argument 'loss', got \['values'\]"):
        Average("loss").update(values=1.0)


def test_state_is_metric_state_variables():
    avg = Average()
    state = nnx.state(avg)
    assert sorted(state) == ["count", "total"]
    assert all(type(v) is MetricState for v in state.values())
    assert len(jax.tree.leaves(avg)) == 2


def test_base_metric_methods_are_abstract():
    # as in Flax 0.12: Metric's __init__ must be overridden (this test used to
    # instantiate Metric() directly, which Flax refuses)
    with pytest.raises(NotImplementedError, match="must override __init__"):
        Metric()

    class Empty(Metric):
        def __init__(self) -> None:
            pass

    m = Empty()
    for call in (m.reset, m.update, m.compute):
        with pytest.raises(NotImplementedError):
            call()


# -- Welford -------------------------------------------------------------------------------------


def test_welford_matches_numpy_over_a_stream():
    w = Welford()
    seen: list[float] = []
    for batch in stream():
        w.update(values=jnp.asarray(batch))
        seen.extend(np.ravel(batch))
        stats = w.compute()
        assert isinstance(stats, Statistics)
        data = np.asarray(seen, dtype=np.float64)
        close(stats.mean, data.mean())
        close(stats.standard_deviation, data.std())
        close(stats.standard_error_of_mean, data.std() / np.sqrt(data.size))


def test_welford_is_stable_far_from_zero():
    # a sum-of-squares formula loses every digit here in float32
    w = Welford()
    data = (1e4 + RNG.normal(size=(3, 100))).astype(np.float32)
    for row in data:
        w.update(values=jnp.asarray(row))
    np.testing.assert_allclose(w.compute().standard_deviation, data.std(), rtol=1e-3)


def test_welford_initial_empty_and_reset():
    w = Welford()
    stats = w.compute()
    assert float(stats.mean) == 0.0
    assert np.isnan(stats.standard_deviation) and np.isnan(stats.standard_error_of_mean)
    w.update(values=jnp.zeros((0,)))  # an empty batch changes nothing
    assert int(w.count.value) == 0
    w.update(values=jnp.array([1.0, 2.0, 3.0, 4.0]))
    close(w.compute().standard_deviation, np.std([1, 2, 3, 4]))
    w.reset()
    assert int(w.count.value) == 0 and np.isnan(w.compute().standard_deviation)


def test_welford_flax_documented_example():
    w = Welford()
    w.update(values=jnp.array([1, 2, 3, 4]))
    w.update(values=jnp.array([3, 2, 1, 0]))
    stats = w.compute()
    close(stats.mean, 2.0)
    close(stats.standard_error_of_mean, 0.43301272)
    close(stats.standard_deviation, 1.2247449)


# -- Accuracy ------------------------------------------------------------------------------------


def test_multiclass_accuracy_matches_numpy():
    acc = Accuracy()
    correct = total = 0
    for i in range(4):
        logits = RNG.normal(size=(6, 2, 5)).astype(np.float32)
        labels = RNG.integers(0, 5, size=(6, 2))
        acc.update(logits=jnp.asarray(logits), labels=jnp.asarray(labels), loss=float(i))
        correct += int((logits.argmax(-1) == labels).sum())
        total += labels.size
        close(acc.compute(), correct / total)


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64, np.bool_])
def test_binary_accuracy_matches_numpy(label_dtype: Any):
    acc = Accuracy(threshold=0.25)
    logits = RNG.normal(size=(20,)).astype(np.float32)
    labels = RNG.integers(0, 2, size=(20,)).astype(label_dtype)
    acc.update(logits=jnp.asarray(logits), labels=jnp.asarray(labels))
    close(acc.compute(), np.mean((logits > 0.25) == labels.astype(bool)))


def test_accuracy_flax_documented_example():
    logits = jax.random.normal(jax.random.key(0), (5, 2))
    labels = jnp.array([0, 1, 1, 1, 0])
    acc = Accuracy()
    acc.update(logits=logits, labels=labels)
    expected = np.mean(np.asarray(logits).argmax(-1) == np.asarray(labels))
    close(acc.compute(), expected)


@pytest.mark.parametrize(
    ("threshold", "logits", "labels", "match"),
    [
        (None, jnp.ones((3,)), jnp.ones((3,), int), r"logits\.ndim == labels\.ndim \+ 1"),
        (None, jnp.ones((3, 2)), jnp.ones((3,)), "integer class labels"),
        (0.5, jnp.ones((3, 2)), jnp.ones((3,), int), "same rank"),
        (0.5, jnp.ones((3,)), jnp.ones((3,)), "integer .0/1. or bool labels"),
    ],
)
def test_accuracy_errors(threshold: Any, logits: Any, labels: Any, match: str):
    with pytest.raises(ValueError, match=match):
        Accuracy(threshold=threshold).update(logits=logits, labels=labels)


def test_accuracy_missing_labels_is_a_type_error():
    with pytest.raises(TypeError):
        Accuracy().update(logits=jnp.ones((3, 2)))  # type: ignore[call-arg]


# -- MultiMetric ---------------------------------------------------------------------------------


def make_multi() -> MultiMetric:
    return MultiMetric(accuracy=Accuracy(), loss=Average("loss"), loss_stats=Welford("loss"))


def eval_batches() -> list[tuple[jax.Array, jax.Array, jax.Array]]:
    out = []
    for i in range(4):
        k1, k2, k3 = jax.random.split(jax.random.key(i), 3)
        out.append(
            (
                jax.random.normal(k1, (8, 3)),
                jax.random.randint(k2, (8,), 0, 3),
                jax.random.uniform(k3, (8,)),
            )
        )
    return out


def test_multimetric_updates_every_metric_and_computes_a_dict():
    multi = make_multi()
    refs = {"accuracy": Accuracy(), "loss": Average("loss"), "loss_stats": Welford("loss")}
    for logits, labels, loss in eval_batches():
        multi.update(logits=logits, labels=labels, loss=loss)
        for ref in refs.values():
            ref.update(logits=logits, labels=labels, loss=loss)
    result = multi.compute()
    assert list(result) == ["accuracy", "loss", "loss_stats"]
    close(result["accuracy"], refs["accuracy"].compute())
    close(result["loss"], refs["loss"].compute())
    close(result["loss_stats"].mean, refs["loss_stats"].compute().mean)
    assert multi.loss is multi.loss  # attributes by name
    multi.reset()
    assert all(int(getattr(multi, n).count.value) == 0 for n in ("accuracy", "loss", "loss_stats"))


def test_multimetric_under_jit_propagates_without_retracing():
    multi, eager = make_multi(), make_multi()
    traces = []

    @nnx.jit
    def eval_step(metrics: MultiMetric, logits: jax.Array, labels: jax.Array, loss: jax.Array):
        traces.append(1)
        metrics.update(logits=logits, labels=labels, loss=loss)

    for logits, labels, loss in eval_batches():
        eval_step(multi, logits, labels, loss)
        eager.update(logits=logits, labels=labels, loss=loss)
    assert len(traces) == 1
    got, want = multi.compute(), eager.compute()
    close(got["accuracy"], want["accuracy"])
    close(got["loss"], want["loss"])
    for a, b in zip(jax.tree.leaves(got["loss_stats"]), jax.tree.leaves(want["loss_stats"])):
        close(a, b)
    # compute and reset work under jit too
    result = nnx.jit(lambda m: m.compute())(multi)
    close(result["loss"], want["loss"])
    nnx.jit(lambda m: m.reset())(multi)
    assert int(multi.loss.count.value) == 0


def test_multimetric_graphdef_is_hashable_and_static_names_are_a_tuple():
    multi = make_multi()
    assert multi._metric_names == ("accuracy", "loss", "loss_stats")
    graphdef = nnx.graphdef(multi)
    assert hash(graphdef) == hash(nnx.graphdef(make_multi()))
    assert graphdef == nnx.graphdef(make_multi())
    multi.update(logits=jnp.ones((2, 3)), labels=jnp.zeros(2, int), loss=jnp.ones(2))
    assert nnx.graphdef(multi) == graphdef
    # the pytree view works with plain jax.jit too (static parts are hashable)
    out = jax.jit(lambda m: m.compute())(multi)
    close(out["loss"], 1.0)


def test_multimetric_rejects_bad_arguments():
    with pytest.raises(TypeError, match=r"expects an nnx\.metrics\.Metric"):
        MultiMetric(loss=3.0)  # type: ignore[arg-type]
    for name in ("update", "compute", "reset", "_metric_names"):
        with pytest.raises(ValueError, match="reserved"):
            MultiMetric(**{name: Average()})


def test_custom_metric_in_multimetric():
    class Maximum(Metric):
        def __init__(self) -> None:
            self.max = MetricState(jnp.array(-jnp.inf))

        def reset(self) -> None:
            self.max.value = jnp.array(-jnp.inf)

        def update(self, *, values: Any, **_: Any) -> None:  # type: ignore[override]
            self.max.value = jnp.maximum(self.max.value, jnp.max(values))

        def compute(self) -> jax.Array:
            return self.max.value

    multi = MultiMetric(max=Maximum(), mean=Average())
    step = nnx.jit(lambda m, v: m.update(values=v))
    step(multi, jnp.array([1.0, 5.0]))
    step(multi, jnp.array([3.0]))
    assert {k: float(v) for k, v in multi.compute().items()} == {"max": 5.0, "mean": 3.0}


def test_module_exports_flax_names():
    for name in (
        "Metric",
        "MetricState",
        "Average",
        "Welford",
        "Statistics",
        "Accuracy",
        "MultiMetric",
    ):
        assert hasattr(metrics, name)


def test_accuracy_rejects_mismatched_batch_shapes():
    import jax.numpy as jnp
    import pytest

    from flaxgraph.training import metrics

    with pytest.raises(ValueError, match=r"got shapes \(4, 3\) and \(5,\)"):
        metrics.Accuracy().update(logits=jnp.ones((4, 3)), labels=jnp.ones((5,), jnp.int32))
    with pytest.raises(ValueError, match=r"same rank and shape, got shapes \(4,\) and \(5,\)"):
        metrics.Accuracy(threshold=0.5).update(
            logits=jnp.ones((4,)), labels=jnp.ones((5,), jnp.int32)
        )


# -- masks (Flax 0.12 ``update(mask=...)``) --------------------------------------------------------

MASKED_BATCHES = st.lists(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(-100, 100, width=32), min_size=n, max_size=n),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    ),
    min_size=1,
    max_size=4,
)


@settings(deadline=None, max_examples=25)
@given(MASKED_BATCHES)
def test_masked_average_and_welford_match_numpy_on_the_selected_values(batches: Any):
    avg, wel = Average(), Welford()
    selected: list[float] = []
    for values, mask in batches:
        v, m = np.asarray(values, np.float32), np.asarray(mask)
        avg.update(values=jnp.asarray(v), mask=jnp.asarray(m))
        wel.update(values=jnp.asarray(v), mask=jnp.asarray(m.astype(np.int32)))  # 0/1 ints
        selected.extend(v[m])
    assert int(avg.count.value) == len(selected) == int(wel.count.value)
    if selected:
        ref = np.asarray(selected, np.float64)
        np.testing.assert_allclose(float(avg.compute()), ref.mean(), rtol=1e-4, atol=1e-3)
        stats = wel.compute()
        np.testing.assert_allclose(float(stats.mean), ref.mean(), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(float(stats.standard_deviation), ref.std(), rtol=1e-3, atol=1e-3)
    else:
        assert np.isnan(avg.compute())


def test_mask_broadcasts_and_counts_each_selected_element():
    avg = Average()
    values = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    avg.update(values=jnp.asarray(values), mask=jnp.array([[True], [False]]))
    assert int(avg.count.value) == 3
    close(avg.compute(), values[0].mean())
    with pytest.raises(ValueError, match=r"mask of shape \(2,\) does not broadcast.*\(2, 3\)"):
        Average().update(values=jnp.asarray(values), mask=jnp.array([True, False]))


def test_masked_accuracy_matches_numpy():
    logits = RNG.normal(size=(12, 4)).astype(np.float32)
    labels = RNG.integers(0, 4, size=12)
    mask = RNG.random(12) < 0.5
    acc = Accuracy()
    acc.update(logits=jnp.asarray(logits), labels=jnp.asarray(labels), mask=jnp.asarray(mask))
    expected = (logits.argmax(-1) == labels)[mask].mean()
    close(acc.compute(), expected)


def test_multimetric_mask_for_all_or_per_metric():
    logits = jnp.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    labels = jnp.array([0, 0, 1])
    loss = jnp.array([1.0, 2.0, 6.0])
    every = MultiMetric(acc=Accuracy(), loss=Average("loss"))
    every.update(logits=logits, labels=labels, loss=loss, mask=jnp.array([1, 1, 0]))
    close(every.compute()["acc"], 0.5)
    close(every.compute()["loss"], 1.5)
    per = MultiMetric(acc=Accuracy(), loss=Average("loss"))
    per.update(logits=logits, labels=labels, loss=loss, mask={"acc": jnp.array([1, 0, 0])})
    close(per.compute()["acc"], 1.0)
    close(per.compute()["loss"], 3.0)  # no mask for the metric the dict does not name
    with pytest.raises(ValueError, match=r"do not exist: \['accuracy'\]"):
        per.update(logits=logits, labels=labels, loss=loss, mask={"accuracy": jnp.ones(3)})
    close(per.compute()["loss"], 3.0)  # the refused update changed nothing


def test_masked_update_under_jit():
    avg = Average()
    step = nnx.jit(lambda m, v, k: m.update(values=v, mask=k))
    step(avg, jnp.array([1.0, 5.0]), jnp.array([True, False]))
    step(avg, jnp.array([3.0, 7.0]), jnp.array([True, True]))
    close(avg.compute(), (1 + 3 + 7) / 3)


def test_update_signatures_match_flax_012():
    import inspect

    assert "mask" in inspect.signature(Average.update).parameters
    acc = inspect.signature(Accuracy.update).parameters
    assert [p for p in acc if p != "self"][:3] == ["logits", "labels", "mask"]
    assert inspect.signature(Average.__init__).parameters["argname"].default == "values"


def test_masked_average_and_accuracy_match_flax():
    pytest.importorskip("flax")
    from flax import nnx as flax_nnx

    rng = np.random.default_rng(3)
    ours = MultiMetric(acc=Accuracy(), loss=Average("loss"))
    theirs = flax_nnx.MultiMetric(
        acc=flax_nnx.metrics.Accuracy(), loss=flax_nnx.metrics.Average("loss")
    )
    for _ in range(3):
        batch = {
            "logits": jnp.asarray(rng.normal(size=(6, 3)).astype(np.float32)),
            "labels": jnp.asarray(rng.integers(0, 3, size=6).astype(np.int32)),
            "loss": jnp.asarray(rng.normal(size=6).astype(np.float32)),
        }
        mask = jnp.asarray(rng.random(6) < 0.6)
        ours.update(**batch, mask=mask)
        theirs.update(**batch, mask=mask)
        ours.update(**batch, mask={"acc": mask})
        theirs.update(**batch, mask={"acc": mask})
    for name, value in theirs.compute().items():
        close(ours.compute()[name], value)


def test_metric_split_merge_roundtrip():
    acc = metrics.Accuracy()
    acc.update(logits=jnp.array([[0.0, 1.0], [1.0, 0.0]]), labels=jnp.array([1, 1]))
    graphdef, state = acc.split()
    again = nnx.merge(graphdef, state)
    assert float(again.compute()) == 0.5
    _, counts, _ = acc.split(nnx.PathContains("count"), ...)
    assert list(counts.to_pure_dict()) == ["count"]


def test_average_mask_with_python_scalar_is_an_error():
    avg = metrics.Average()
    with pytest.raises(ValueError, match="if mask is provided, values should be a jax array"):
        avg.update(values=2, mask=jnp.ones(5))
    assert int(avg.count.value) == 0  # nothing was added


def test_binary_accuracy_threshold_is_inclusive_and_labels_positive_above_zero():
    acc = metrics.Accuracy(threshold=0.5)
    acc.update(logits=jnp.array([0.5, 0.4, 0.9]), labels=jnp.array([1, 0, 2]))
    assert float(acc.compute()) == 1.0


@pytest.mark.parametrize(
    "threshold", [None, 0.5, np.float64(0.25), 1, 0, True, np.float32(0.5), np.int32(1), "0.5"]
)
def test_accuracy_threshold_type_is_checked_as_flax(threshold: Any):
    # Flax NNX 0.12.8 accepts None or an instance of float, and raises TypeError
    # with the same first sentence for anything else.
    pytest.importorskip("flax")
    from flax import nnx as flax_nnx

    try:
        flax_nnx.metrics.Accuracy(threshold=threshold)
    except TypeError as flax_error:
        with pytest.raises(TypeError) as ours:
            Accuracy(threshold=threshold)
        assert str(ours.value).startswith(str(flax_error))
        assert "Pass a Python float" in str(ours.value)
    else:
        assert Accuracy(threshold=threshold).threshold == threshold
