"""Reference semantics through ``nnx.vmap``: the vmap examples of
Flax NNX's "Transformations" guide, with its printed outputs.

Each test runs one example of the guide as written there (``from flax import
nnx`` read as ``import flaxgraph as nnx``) and checks what the guide prints or
displays, plus the values it implies, computed independently with plain
``jax.numpy`` on the arrays (a Python loop over the batch, or ``jax.vmap``).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import flaxgraph as nnx


class Count(nnx.Variable):
    pass


# -- Basic example -------------------------------------------------------------------------------


class Weights(nnx.Module):
    def __init__(self, kernel: jax.Array, bias: jax.Array):
        self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)


def vector_dot(weights: Weights, x: jax.Array) -> jax.Array:
    assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
    assert x.ndim == 1, "Batch dimensions not allowed"
    return x @ weights.kernel + weights.bias


def batch() -> tuple[Weights, jax.Array]:
    weights = Weights(
        kernel=random.uniform(random.key(0), (10, 2, 3)),
        bias=jnp.zeros((10, 3)),
    )
    x = jax.random.normal(random.key(1), (10, 2))
    return weights, x


def loop_vector_dot(kernel: Any, bias: Any, x: Any) -> np.ndarray:
    """The reference: one example at a time, stacked on axis 1 (out_axes=1)."""
    return np.stack([np.asarray(x[i] @ kernel[i] + bias[i]) for i in range(len(x))], axis=1)


@pytest.mark.parametrize("in_axes", [0, (0, 0)], ids=["in_axes=0", "in_axes=(0, 0)"])
def test_basic_example_objects_behave_as_pytrees_of_their_arrays(in_axes: Any) -> None:
    weights, x = batch()
    y = nnx.vmap(vector_dot, in_axes=in_axes, out_axes=1)(weights, x)
    assert y.shape == (3, 10)  # the guide prints `y.shape = (3, 10)`
    expected = loop_vector_dot(weights.kernel.value, weights.bias.value, x)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    # the weights are not changed by a stateless function
    assert weights.kernel.shape == (10, 2, 3) and weights.bias.shape == (10, 3)


def test_create_weights_objects_as_outputs() -> None:
    def create_weights(seed: jax.Array) -> Weights:
        return Weights(
            kernel=random.uniform(random.key(seed), (2, 3)),
            bias=jnp.zeros((3,)),
        )

    seeds = jnp.arange(10)
    weights = nnx.vmap(create_weights)(seeds)
    assert type(weights) is Weights
    assert isinstance(weights.kernel, nnx.Param) and isinstance(weights.bias, nnx.Param)
    assert weights.kernel.shape == (10, 2, 3) and weights.bias.shape == (10, 3)
    expected = np.stack([random.uniform(random.key(s), (2, 3)) for s in range(10)])
    np.testing.assert_array_equal(weights.kernel.value, expected)
    np.testing.assert_array_equal(weights.bias.value, np.zeros((10, 3)))


# -- Transforming methods -------------------------------------------------------------------------


class WeightStack(nnx.Module):
    @nnx.vmap
    def __init__(self, seed: jax.Array):
        self.kernel = nnx.Param(random.uniform(random.key(seed), (2, 3)))
        self.bias = nnx.Param(jnp.zeros((3,)))

    @nnx.vmap(in_axes=0, out_axes=1)
    def __call__(self, x: jax.Array) -> jax.Array:
        assert self.kernel.ndim == 2, "Batch dimensions not allowed"
        assert x.ndim == 1, "Batch dimensions not allowed"
        return x @ self.kernel + self.bias


def test_weight_stack_vmapped_init_and_call() -> None:
    # Regression: a vmapped __init__ used to set its attributes on a pytree copy of
    # `self` (spmd.map_boxes rebuilt Objects), so the stack came out empty.
    weights = WeightStack(jnp.arange(10))
    assert weights.kernel.shape == (10, 2, 3) and weights.bias.shape == (10, 3)
    expected = np.stack([random.uniform(random.key(s), (2, 3)) for s in range(10)])
    np.testing.assert_array_equal(weights.kernel.value, expected)

    x = jax.random.normal(random.key(1), (10, 2))
    y = weights(x)
    assert y.shape == (3, 10)
    np.testing.assert_allclose(
        y, loop_vector_dot(weights.kernel.value, weights.bias.value, x), rtol=1e-6
    )


# -- State propagation ----------------------------------------------------------------------------


class CountedWeights(nnx.Module):
    def __init__(self, kernel: jax.Array, bias: jax.Array, count: jax.Array):
        self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
        self.count = Count(count)


def counted(count: Any) -> tuple[CountedWeights, jax.Array]:
    weights = CountedWeights(
        kernel=random.uniform(random.key(0), (10, 2, 3)),
        bias=jnp.zeros((10, 3)),
        count=count,
    )
    return weights, jax.random.normal(random.key(1), (10, 2))


def stateful_vector_dot(weights: CountedWeights, x: jax.Array) -> jax.Array:
    assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
    assert x.ndim == 1, "Batch dimensions not allowed"
    weights.count += 1
    return x @ weights.kernel + weights.bias


def test_state_propagation_count_is_incremented_per_example() -> None:
    weights, x = counted(jnp.arange(10))
    count = weights.count
    y = nnx.vmap(stateful_vector_dot, in_axes=0, out_axes=1)(weights, x)
    assert weights.count is count  # the same Variable, updated in place
    np.testing.assert_array_equal(weights.count.value, np.arange(1, 11))
    assert weights.count.value.dtype == jnp.int32
    np.testing.assert_allclose(
        y, loop_vector_dot(weights.kernel.value, weights.bias.value, x), rtol=1e-6
    )


def test_graph_updates_propagation_crazy_vector_dot() -> None:
    weights, x = counted(jnp.arange(10))
    kernel = weights.kernel

    def crazy_vector_dot(weights: CountedWeights, x: jax.Array) -> jax.Array:
        assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
        assert x.ndim == 1, "Batch dimensions not allowed"
        weights.count += 1
        y = x @ weights.kernel + weights.bias
        weights.some_property = ["a", 2, False]  # add attribute
        del weights.bias  # delete attribute
        weights.new_param = weights.kernel  # share reference
        return y

    bias = weights.bias.value
    y = nnx.vmap(crazy_vector_dot, in_axes=0, out_axes=1)(weights, x)
    np.testing.assert_allclose(y, loop_vector_dot(kernel.value, bias, x), rtol=1e-6)
    np.testing.assert_array_equal(weights.count.value, np.arange(1, 11))
    assert weights.some_property == ["a", 2, False]
    assert not hasattr(weights, "bias")
    assert weights.kernel is kernel  # the caller's Variable, updated in place
    assert weights.new_param is weights.kernel  # the new shared reference
    assert weights.kernel.shape == (10, 2, 3)


# -- Transforming sub-states (lift types) ----------------------------------------------------------


def test_state_axes_broadcast_count_stays_scalar_incremented_once() -> None:
    weights, x = counted(jnp.array(0))
    state_axes = nnx.StateAxes({nnx.Param: 0, Count: None})  # broadcast Count
    y = nnx.vmap(stateful_vector_dot, in_axes=(state_axes, 0), out_axes=1)(weights, x)
    # The guide displays `Count( # 1 (4 B) value=Array(1, dtype=int32, weak_type=True))`.
    assert weights.count.value.shape == ()
    assert int(weights.count.value) == 1
    assert weights.count.value.dtype == jnp.int32
    assert weights.count.value.weak_type
    np.testing.assert_allclose(
        y, loop_vector_dot(weights.kernel.value, weights.bias.value, x), rtol=1e-6
    )


def test_state_axes_cannot_be_a_prefix_of_a_pytree_of_objects() -> None:
    weights, x = counted(jnp.array(0))
    state_axes = nnx.StateAxes({nnx.Param: 0, Count: None})
    pair = (weights, weights)
    with pytest.raises(nnx.PrefixError, match=r"StateAxes can only be used for an object") as info:
        nnx.vmap(lambda ws, x: x, in_axes=(state_axes, 0))(pair, x)
    assert "args[0]" in str(info.value)
    assert int(weights.count.value) == 0


# -- Random state ---------------------------------------------------------------------------------


class NoisyWeights(nnx.Module):
    def __init__(self, kernel: Any, bias: Any, count: Any, seed: Any):
        self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
        self.count = Count(count)
        self.rngs = nnx.Rngs(noise=seed)


def noisy_vector_dot(weights: NoisyWeights, x: jax.Array) -> jax.Array:
    assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
    assert x.ndim == 1, "Batch dimensions not allowed"
    weights.count += 1
    y = x @ weights.kernel + weights.bias
    return y + random.normal(weights.rngs.noise(), y.shape)


def test_random_state_with_pre_split_seeds() -> None:
    seeds = random.split(random.key(0), num=10)
    weights = NoisyWeights(
        kernel=random.uniform(random.key(0), (2, 3)),
        bias=jnp.zeros((3,)),
        count=jnp.array(0),
        seed=seeds,
    )
    x = random.normal(random.key(1), (10, 2))
    state_axes = nnx.StateAxes({nnx.RngState: 0, (nnx.Param, Count): None})
    y1 = nnx.vmap(noisy_vector_dot, in_axes=(state_axes, 0))(weights, x)
    y2 = nnx.vmap(noisy_vector_dot, in_axes=(state_axes, 0))(weights, x)
    assert not jnp.allclose(y1, y2)  # the guide prints False

    # Independent reference: stream i draws fold_in(seeds[i], call number).
    k, b = weights.kernel.value, weights.bias.value
    for call, y in enumerate((y1, y2)):
        expected = np.stack(
            [x[i] @ k + b + random.normal(random.fold_in(seeds[i], call), (3,)) for i in range(10)]
        )
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert int(weights.count.value) == 2  # broadcast: one scalar count, once per call
    np.testing.assert_array_equal(weights.rngs.noise.count.value, np.full(10, 2))


def test_random_state_with_split_rngs_decorator() -> None:
    weights = NoisyWeights(
        kernel=random.uniform(random.key(0), (2, 3)),
        bias=jnp.zeros((3,)),
        count=jnp.array(0),
        seed=0,
    )
    x = random.normal(random.key(1), (10, 2))
    state_axes = nnx.StateAxes({nnx.RngState: 0, (nnx.Param, Count): None})

    @nnx.split_rngs(splits=10)
    @nnx.vmap(in_axes=(state_axes, 0))
    def noisy_vector_dot(weights: NoisyWeights, x: jax.Array) -> jax.Array:
        assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
        assert x.ndim == 1, "Batch dimensions not allowed"
        weights.count += 1
        y = x @ weights.kernel + weights.bias
        return y + random.normal(weights.rngs.noise(), y.shape)

    y1 = noisy_vector_dot(weights, x)
    y2 = noisy_vector_dot(weights, x)
    assert not jnp.allclose(y1, y2)  # the guide prints False

    # Outside, the stream is usable again: unsplit key, counter advanced once per call.
    noise = weights.rngs.noise
    assert noise.key.value.shape == () and noise.count.value.shape == ()
    assert int(noise.count.value) == 2
    assert random.key_data(noise.key.value).tolist() == random.key_data(random.key(0)).tolist()
    assert int(weights.count.value) == 2

    # Independent reference: call c splits fold_in(key(0), c) into 10 keys.
    k, b = weights.kernel.value, weights.bias.value
    for call, y in enumerate((y1, y2)):
        keys = random.split(random.fold_in(random.key(0), call), 10)
        expected = np.stack(
            [x[i] @ k + b + random.normal(random.fold_in(keys[i], 0), (3,)) for i in range(10)]
        )
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


# -- Rules and limitations -----------------------------------------------------------------------


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.Param(jnp.array(0))

    def increment(self) -> None:
        self.count += jnp.array(1)


def test_mutable_module_cannot_be_passed_by_closure_under_vmap() -> None:
    counter = Counter()

    @nnx.vmap
    def f(x: jax.Array) -> jax.Array:
        counter.increment()
        return 2 * x

    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        f(jnp.arange(3))
    assert int(counter.count.value) == 0


class ParamWeights(nnx.Module):
    def __init__(self, array: jax.Array):
        self.param = nnx.Param(array)


ALIASES = re.compile(r"^\s+(\S+): (\S+)$", re.MULTILINE)


def test_consistent_aliasing_between_inputs_lists_every_alias_path() -> None:
    m = ParamWeights(jnp.arange(10))
    arg1 = {"a": {"b": m}, "c": m}
    arg2 = [(m, m), m]

    @nnx.vmap(in_axes=(0, 1))
    def f(arg1: Any, arg2: Any) -> None: ...

    with pytest.raises(ValueError, match="Inconsistent aliasing detected") as info:
        f(arg1, arg2)
    assert isinstance(info.value, nnx.InconsistentAliasingError)
    assert "Param" in str(info.value)
    assert ALIASES.findall(str(info.value)) == [
        ("args[0]['a']['b'].param", "0"),
        ("args[0]['c'].param", "0"),
        ("args[1][0][0].param", "1"),
        ("args[1][0][1].param", "1"),
        ("args[1][1].param", "1"),
    ]
    np.testing.assert_array_equal(m.param.value, np.arange(10))


def test_consistent_aliasing_between_inputs_and_outputs() -> None:
    m = ParamWeights(jnp.arange(10))
    arg1 = {"a": {"b": m}, "c": m}
    param = m.param

    @nnx.vmap(in_axes=0, out_axes=1)
    def f(arg1: Any) -> Any:
        return arg1

    with pytest.raises(ValueError, match="Inconsistent aliasing detected") as info:
        f(arg1)
    found = ALIASES.findall(str(info.value))
    assert ("output['a']['b'].param", "1") in found and ("output['c'].param", "1") in found
    assert ("args[0]['a']['b'].param", "0") in found and ("args[0]['c'].param", "0") in found
    assert m.param is param
    np.testing.assert_array_equal(m.param.value, np.arange(10))


# -- Axis metadata ---------------------------------------------------------------------------------


# The guide's "Axis metadata" examples, verbatim: tests/transforms/test_guide_axis_metadata.py
