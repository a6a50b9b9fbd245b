"""Tests of flaxgraph/graphlib/statics.py: structural partials and unhashable static
attributes (a non-frozen config) through split/merge and jit."""

from __future__ import annotations

import dataclasses
import functools
import operator
import warnings
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.graphlib.statics import PartialKey


@dataclasses.dataclass
class TransformerConfig:  # not frozen: unhashable, as many users write it
    width: int = 4
    heads: list[int] = dataclasses.field(default_factory=lambda: [1, 2])


class Transformer(nnx.Module):
    def __init__(self, config: TransformerConfig, rngs: nnx.Rngs):
        self.config = config
        self.proj = nnx.Linear(2, config.width, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        return self.proj(x) * len(self.config.heads)


def test_unhashable_config_splits_merges_and_runs():
    model = Transformer(TransformerConfig(), nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    again = nnx.merge(graphdef, state)
    assert again.config == model.config
    np.testing.assert_allclose(again(jnp.ones(2)), model(jnp.ones(2)))
    # Equal structures compare equal even though they cannot be hashed.
    assert graphdef == nnx.graphdef(Transformer(TransformerConfig(), nnx.Rngs(1)))
    assert graphdef != nnx.graphdef(Transformer(TransformerConfig(width=3), nnx.Rngs(1)))


def test_unhashable_config_through_jit_runs_and_compares_configs_by_equality():
    # As in Flax (JAX compares a treedef's aux data with ==): a model holding a
    # non-frozen dataclass config runs under nnx.jit; an equal config on another
    # model reuses the compilation, a different one compiles again.
    traces = []

    @nnx.jit
    def step(m: Transformer, x: Any) -> Any:
        traces.append(m.config.width)
        m.proj.kernel[...] += 1.0
        return m(x)

    model = Transformer(TransformerConfig(), nnx.Rngs(0))
    expected_kernel = model.proj.kernel[...] + 2.0
    y = step(model, jnp.ones(2))
    np.testing.assert_allclose(y, model(jnp.ones(2)), rtol=1e-6)  # the updated model
    step(model, jnp.ones(2))
    np.testing.assert_allclose(model.proj.kernel[...], expected_kernel, rtol=1e-6)
    step(Transformer(TransformerConfig(), nnx.Rngs(1)), jnp.ones(2))
    assert traces == [4]
    wider = Transformer(TransformerConfig(width=3), nnx.Rngs(1))
    assert step(wider, jnp.ones(2)).shape == (3,)
    assert traces == [4, 3]
    # Hashing the GraphDef itself still names the value and the fix (as Flax raises).
    with pytest.raises(nnx.StaticAttributeError, match=r"node\.config is a TransformerConfig"):
        hash(nnx.graphdef(model))


@given(widths=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_unhashable_config_compiles_once_per_distinct_value(widths: list[int]) -> None:
    traces = []
    step = nnx.jit(lambda m, x: traces.append(1) or m(x))
    for width in widths:
        model = Transformer(TransformerConfig(width=width), nnx.Rngs(0))
        np.testing.assert_allclose(step(model, jnp.ones(2)), model(jnp.ones(2)), rtol=1e-6)
    assert len(traces) == len(set(widths))


def test_frozen_config_through_jit_works():
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        width: int = 4

    class M(nnx.Module):
        def __init__(self) -> None:
            self.config = Frozen()
            self.w = nnx.Param(jnp.ones(2))

    out = nnx.jit(lambda m: m.w[...] * m.config.width)(M())
    np.testing.assert_allclose(out, 4.0)


class CNN(nnx.Module):
    """Flax's CNN tutorial: a partial of avg_pool as a static attribute."""

    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(1, 2, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = functools.partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.out = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x: Any) -> Any:
        x = self.avg_pool(nnx.relu(self.conv(x)))
        return self.out(x.reshape(x.shape[0], -1))


def test_partial_attribute_trains_without_warning_and_compiles_once_for_two_models():
    traces = []

    @nnx.jit
    def train_step(model: CNN, optimizer: nnx.Optimizer, x: Any, y: Any) -> Any:
        traces.append(1)

        def loss_fn(m: CNN) -> Any:
            return jnp.mean((m(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    x, y = jnp.ones((2, 4, 4, 1)), jnp.zeros((2, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", nnx.IdentityHashWarning)
        tx = optax.sgd(0.1)  # optax builds closures per call: share one transformation
        for seed in (0, 1):  # two models built the same way
            model = CNN(nnx.Rngs(seed))
            optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
            first = train_step(model, optimizer, x, y)
            second = train_step(model, optimizer, x, y)
            assert second < first
    assert len(traces) == 1
    assert nnx.graphdef(CNN(nnx.Rngs(0))) == nnx.graphdef(CNN(nnx.Rngs(1)))
    assert hash(nnx.graphdef(CNN(nnx.Rngs(0)))) == hash(nnx.graphdef(CNN(nnx.Rngs(1))))


def test_merge_gives_the_partial_back():
    model = CNN(nnx.Rngs(0))
    again = nnx.merge(*nnx.split(model))
    assert again.avg_pool is model.avg_pool


def test_partial_of_a_lambda_still_warns():
    class M(nnx.Module):
        def __init__(self) -> None:
            self.f = functools.partial(lambda a, b: a + b, 1)

    with pytest.warns(nnx.IdentityHashWarning, match=r"node\.f is a partial"):
        nnx.graphdef(M())


values = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.tuples(st.integers(0, 2)))


@given(
    st.lists(values, max_size=3),
    st.dictionaries(st.sampled_from("abc"), values, max_size=3),
    st.lists(values, max_size=3),
    st.dictionaries(st.sampled_from("abc"), values, max_size=3),
)
def test_partial_keys_compare_by_function_args_and_keywords(args1, kw1, args2, kw2):
    a = PartialKey(functools.partial(operator.add, *args1, **kw1))
    b = PartialKey(functools.partial(operator.add, *args2, **kw2))
    same = args1 == args2 and kw1 == kw2
    assert (a == b) == same
    if same:
        assert hash(a) == hash(b)
    # Nested partials compare the same way.
    assert (
        PartialKey(functools.partial(max, a.partial))
        == PartialKey(functools.partial(max, b.partial))
    ) == same
    assert PartialKey(functools.partial(operator.add, *args1, **kw1)) != PartialKey(
        functools.partial(operator.sub, *args1, **kw1)
    )


class Sharded(nnx.Module):
    """A layer whose kernel carries list metadata, as configs often write it."""

    def __init__(self, rngs: nnx.Rngs):
        self.kernel = nnx.Param(rngs.params.normal((2, 3)), out_sharding=["data", None])

    def __call__(self, x: Any) -> Any:
        return x @ self.kernel[...]


def test_list_metadata_runs_under_jit_and_grad_as_in_flax():
    model = Sharded(nnx.Rngs(0))
    x = jnp.ones((4, 2))

    @nnx.jit
    def step(m: Sharded, x: Any) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(m)
        m.kernel[...] -= 0.1 * grads.kernel[...]
        return loss

    expected_kernel = model.kernel[...] - 0.1 * 2 * x.T @ (x @ model.kernel[...])
    step(model, x)
    np.testing.assert_allclose(model.kernel[...], expected_kernel, rtol=1e-5)
    assert model.kernel.get_metadata()["out_sharding"] == ["data", None]
    again = nnx.merge(*nnx.split(model))
    assert again.kernel.get_metadata()["out_sharding"] == ["data", None]
