"""Reference semantics through ``nnx.jit`` and ``nnx.grad``: the examples of
the "JAX-style NNX Transforms" FLIP flax#4107 and of Flax NNX's "Transformations" guide that concern jit,
grad and closures, run with ``import flaxgraph as nnx``.

The guide's examples use ``nnx.vmap``; where the point of an example is not
vectorisation (state propagation, graph updates, methods, initializers, random
state, consistent aliasing), it is run here with ``nnx.jit`` (prefixes are then
shardings: ``P()`` and ``P('x')`` on a one-device mesh play the roles of the
guide's axes ``0`` and ``1``) and checked against the result the guide shows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))
AXIS_0 = NamedSharding(MESH, P())
AXIS_1 = NamedSharding(MESH, P("x"))


class Count(nnx.Variable):
    pass


class Weights(nnx.Module):
    def __init__(self, kernel: jax.Array, bias: jax.Array, count: jax.Array):
        self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
        self.count = Count(count)


def make_weights() -> Weights:
    return Weights(
        kernel=random.uniform(random.key(0), (2, 3)),
        bias=jnp.zeros((3,)),
        count=jnp.array(0),
    )


x = jax.random.normal(random.key(1), (2,))


# -- the guide: Basic example / initializers / methods -------------------------------------


def test_objects_as_outputs_transform_initializers():
    def create_weights(seed: jax.Array):
        return Weights(
            kernel=random.uniform(random.key(seed), (2, 3)),
            bias=jnp.zeros((3,)),
            count=jnp.array(0),
        )

    weights = nnx.jit(create_weights)(jnp.array(7))
    assert isinstance(weights, Weights)
    np.testing.assert_allclose(weights.kernel.value, random.uniform(random.key(7), (2, 3)))


def test_transforming_methods():
    class WeightStack(nnx.Module):
        @nnx.jit
        def __init__(self, seed: jax.Array):
            self.kernel = nnx.Param(random.uniform(random.key(seed), (2, 3)))
            self.bias = nnx.Param(jnp.zeros((3,)))

        @nnx.jit
        def __call__(self, x: jax.Array):
            assert self.kernel.ndim == 2, "Batch dimensions not allowed"
            assert x.ndim == 1, "Batch dimensions not allowed"
            return x @ self.kernel + self.bias

    weights = WeightStack(jnp.array(0))
    y = weights(x)
    kernel = random.uniform(random.key(0), (2, 3))
    np.testing.assert_allclose(weights.kernel.value, kernel)
    np.testing.assert_allclose(y, x @ kernel, rtol=1e-6)


# -- the guide: State propagation ----------------------------------------------------------


def test_state_propagation():
    weights = make_weights()

    def stateful_vector_dot(weights: Weights, x: jax.Array):
        assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
        assert x.ndim == 1, "Batch dimensions not allowed"
        weights.count += 1
        return x @ weights.kernel + weights.bias

    y = nnx.jit(stateful_vector_dot)(weights, x)
    assert int(weights.count.value) == 1  # the guide: count incremented by 1
    np.testing.assert_allclose(y, x @ weights.kernel.value, rtol=1e-6)


# -- the guide: Graph updates propagation --------------------------------------------------


def test_graph_updates_propagation():
    weights = make_weights()
    kernel = weights.kernel

    def crazy_vector_dot(weights: Weights, x: jax.Array):
        assert weights.kernel.ndim == 2, "Batch dimensions not allowed"
        assert x.ndim == 1, "Batch dimensions not allowed"
        weights.count += 1
        y = x @ weights.kernel + weights.bias
        weights.some_property = ["a", 2, False]  # add attribute
        del weights.bias  # delete attribute
        weights.new_param = weights.kernel  # share reference
        return y

    y = nnx.jit(crazy_vector_dot)(weights, x)
    np.testing.assert_allclose(y, x @ kernel.value, rtol=1e-6)
    assert int(weights.count.value) == 1
    assert weights.some_property == ["a", 2, False]
    assert not hasattr(weights, "bias")
    assert weights.kernel is kernel and weights.new_param is kernel
    assert set(nnx.state(weights)) == {"count", "kernel"}  # new_param is the same Variable


# -- the guide: Lift types (StateSharding is jit's) ----------------------------------------


def test_state_sharding_lift_type():
    weights = make_weights()

    def stateful_vector_dot(weights: Weights, x: jax.Array):
        weights.count += 1
        return x @ weights.kernel + weights.bias

    state_sharding = nnx.StateSharding({nnx.Param: AXIS_1, Count: AXIS_0})
    y = nnx.jit(stateful_vector_dot, in_shardings=(state_sharding, AXIS_0))(weights, x)
    assert int(weights.count.value) == 1
    assert weights.kernel.value.sharding == AXIS_1 and weights.count.value.sharding == AXIS_0
    np.testing.assert_allclose(y, x @ weights.kernel.value, rtol=1e-6)


# -- the guide: Random state ---------------------------------------------------------------


def test_random_state_is_propagated():
    class NoisyWeights(nnx.Module):
        def __init__(self, kernel, bias, count, seed):
            self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
            self.count = Count(count)
            self.rngs = nnx.Rngs(noise=seed)

    weights = NoisyWeights(
        kernel=random.uniform(random.key(0), (2, 3)),
        bias=jnp.zeros((3,)),
        count=jnp.array(0),
        seed=0,
    )

    @nnx.jit
    def noisy_vector_dot(weights, x):
        weights.count += 1
        y = x @ weights.kernel + weights.bias
        return y + random.normal(weights.rngs.noise(), y.shape)

    y1 = noisy_vector_dot(weights, x)
    y2 = noisy_vector_dot(weights, x)
    assert not jnp.allclose(y1, y2)  # the guide prints False
    assert int(weights.count.value) == 2 and int(weights.rngs.noise.count.value) == 2


# -- the guide: Mutable Module cannot be passed by closure ---------------------------------


class Counter(nnx.Module):
    def __init__(self):
        self.count = nnx.Param(jnp.array(0))

    def increment(self):
        self.count += jnp.array(1)


def test_mutable_module_cannot_be_passed_by_closure():
    counter = Counter()

    @nnx.jit
    def f(x):
        counter.increment()
        return 2 * x

    with pytest.raises(Exception) as e:  # the guide: `except Exception as e: print(e)`
        f(3)
    assert isinstance(e.value, nnx.TraceContextError)
    message = str(e.value)
    assert "captured by closure" in message and "argument" in message
    assert int(counter.count.value) == 0


def test_the_fix_pass_the_module_as_an_argument():
    counter = Counter()

    @nnx.jit
    def f(counter, x):
        counter.increment()
        return 2 * x

    assert int(f(counter, 3)) == 6
    assert int(counter.count.value) == 1


# -- the guide: Consistent aliasing (with jit's in/out_shardings as the prefixes) ----------


class W(nnx.Module):
    def __init__(self, array: jax.Array):
        self.param = nnx.Param(array)


def test_inconsistent_aliasing_between_inputs():
    m = W(jnp.arange(10.0))
    arg1 = {"a": {"b": m}, "c": m}
    arg2 = [(m, m), m]

    @nnx.jit(in_shardings=(AXIS_0, AXIS_1))
    def f(arg1, arg2): ...

    with pytest.raises(ValueError, match=r"^Inconsistent aliasing detected") as e:
        f(arg1, arg2)
    for path in [
        "args[0]['a']['b'].param",
        "args[0]['c'].param",
        "args[1][0][0].param",
        "args[1][0][1].param",
        "args[1][1].param",
    ]:
        assert path + ":" in str(e.value)


def test_inconsistent_aliasing_between_inputs_and_outputs():
    m = W(jnp.arange(10.0))
    arg1 = {"a": {"b": m}, "c": m}

    @nnx.jit(in_shardings=AXIS_0, out_shardings=AXIS_1)
    def f(arg1):
        return arg1

    with pytest.raises(ValueError, match=r"^Inconsistent aliasing detected") as e:
        f(arg1)
    for path in [
        "args[0]['a']['b'].param",
        "args[0]['c'].param",
        "output['a']['b'].param",
        "output['c'].param",
    ]:
        assert path + ":" in str(e.value)


# -- the FLIP: the consistent aliasing rules -----------------------------------------------


def test_aliases_with_the_same_specification_are_accepted():
    m1, m2 = W(jnp.ones(2)), W(jnp.zeros(2))
    m1_axes, m2_axes = AXIS_0, AXIS_1

    @nnx.jit(in_shardings=(m1_axes, m2_axes, m1_axes), out_shardings=m2_axes)
    def f(m1, m2, m1_alias):
        assert m1 is m1_alias
        return m2

    assert f(m1, m2, m1) is m2


def test_inconsistent_input_aliases_are_rejected():
    m = W(jnp.ones(2))
    f = nnx.jit(lambda m1, m2: None, in_shardings=(AXIS_0, AXIS_1))
    with pytest.raises(
        nnx.InconsistentAliasingError, match=r"args\[0\]\.param(.|\n)*args\[1\]\.param"
    ):
        f(m, m)


def test_inconsistent_input_output_aliases_are_rejected():
    m = W(jnp.ones(2))
    g = nnx.jit(lambda m: m, in_shardings=AXIS_0, out_shardings=AXIS_1)
    with pytest.raises(
        nnx.InconsistentAliasingError, match=r"output\.param(.|\n)*args\[0\]\.param"
    ):
        g(m)


def test_inconsistent_aliases_in_nested_structures_are_rejected():
    class SomeModule(nnx.Module):
        def __init__(self, m):
            self.m = m

    m = W(jnp.ones(2))
    f = nnx.jit(lambda m: SomeModule(m), in_shardings=AXIS_0, out_shardings=AXIS_1)
    with pytest.raises(
        nnx.InconsistentAliasingError, match=r"output\.m\.param(.|\n)*args\[0\]\.param"
    ):
        f(m)


def test_shared_references_with_different_specifications_are_rejected():
    class Foo(nnx.Module):
        def __init__(self, shared):
            self.shared = shared

    shared = W(jnp.ones(2))
    m1, m2 = Foo(shared), Foo(shared)
    f = nnx.jit(lambda m1, m2: None, in_shardings=(AXIS_0, AXIS_1))
    with pytest.raises(
        nnx.InconsistentAliasingError,
        match=r"args\[0\]\.shared\.param(.|\n)*args\[1\]\.shared\.param",
    ):
        f(m1, m2)


def test_captured_modules_cannot_be_outputs():
    m = W(jnp.ones(2))

    @nnx.jit
    def f():
        return m

    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        f()


def test_diff_state_selects_lora_params():
    class LoRAParam(nnx.Param):
        pass

    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))
            self.lora = LoRAParam(jnp.array([0.5, -0.5]))

        def __call__(self, x):
            return x @ (self.w.value + self.lora.value)

    def loss_fn(model, x, y):
        return (model(x) - y) ** 2

    model, xs, y = Model(), jnp.array([3.0, 4.0]), jnp.array(1.0)
    grads = nnx.grad(loss_fn, argnums=(nnx.DiffState(0, LoRAParam),))(model, xs, y)
    (g,) = grads
    assert set(g) == {"lora"} and type(g["lora"]) is LoRAParam
    ref = jax.grad(lambda lora: (xs @ (model.w.value + lora) - y) ** 2)(model.lora.value)
    np.testing.assert_allclose(g["lora"].value, ref, rtol=1e-6)
