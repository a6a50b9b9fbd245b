"""Tests of flaxgraph/transforms/make_jaxpr.py."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.graphlib.walk import flatten_with_paths


class Model(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.arange(3.0))
        self.count = nnx.BatchStat(jnp.zeros(()))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count.value += 1
        return self.w * x + 1


def input_values(*args: Any, **kwargs: Any) -> list[Any]:
    """The jaxpr's inputs: the arrays of (args, kwargs) in graph-walk order."""
    _, leaves = flatten_with_paths((args, kwargs))
    return [v.raw_value if isinstance(v, nnx.Variable) else v for _, v in leaves]


def run(jaxpr: Any, values: list[Any]) -> list[Any]:
    return jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *values)


def test_the_jaxpr_computes_what_the_eager_call_returns() -> None:
    model, x = Model(), jnp.array([1.0, -2.0, 3.0])
    jaxpr = nnx.make_jaxpr(lambda m, x: m(x))(model, x)
    (out,) = run(jaxpr, input_values(model, x))
    expected = np.arange(3.0) * np.array([1.0, -2.0, 3.0]) + 1
    np.testing.assert_allclose(out, expected)
    # Nothing ran: the model is unchanged.
    assert float(model.count.value) == 0.0
    assert len(jaxpr.jaxpr.invars) == 3 and len(jaxpr.jaxpr.outvars) == 1


def test_updates_are_traced_but_not_outputs() -> None:
    jaxpr = nnx.make_jaxpr(lambda m, x: m(x))(Model(), jnp.ones(3))
    assert [e.primitive.name for e in jaxpr.eqns].count("add") == 2  # count+1 and +1


def test_a_module_is_accepted_and_a_bound_method_refused() -> None:
    model = Model()
    jaxpr = nnx.make_jaxpr(model)(jnp.ones(3))
    (out,) = run(jaxpr, input_values(model, jnp.ones(3)))
    np.testing.assert_allclose(out, np.arange(3.0) + 1)
    with pytest.raises(ValueError, match=r"nnx\.make_jaxpr does not support bound methods"):
        nnx.make_jaxpr(model.__call__)


def test_objects_in_the_output_contribute_their_arrays() -> None:
    def make(x: jax.Array) -> Model:
        m = Model()
        m.w.value = m.w.value * x
        return m

    jaxpr = nnx.make_jaxpr(make)(jnp.full(3, 2.0))
    outs = run(jaxpr, [jnp.full(3, 2.0)])
    assert sorted(o.shape for o in outs) == [(), (3,)]


def test_shared_variables_are_one_input() -> None:
    model = Model()
    model.alias = model.w
    jaxpr = nnx.make_jaxpr(lambda m: m.w + m.alias)(model)
    assert len(jaxpr.jaxpr.invars) == 2  # w once, count


def test_static_argnums_and_the_decorator_form() -> None:
    @nnx.make_jaxpr(static_argnums=1)
    def scaled(x: jax.Array, n: int) -> jax.Array:
        return x * n

    jaxpr = scaled(jnp.ones(2), 3)
    assert len(jaxpr.jaxpr.invars) == 1
    np.testing.assert_allclose(run(jaxpr, [jnp.ones(2)])[0], [3.0, 3.0])
    with pytest.raises(TypeError, match=r"args\[1\] is not"):
        scaled(jnp.ones(2), [3])


def test_static_argnums_counts_from_the_user_arguments_of_a_module_instance() -> None:
    class Scale(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones(2))

        def __call__(self, x: jax.Array, n: int) -> jax.Array:
            return self.w * x * n

    jaxpr = nnx.make_jaxpr(Scale(), static_argnums=1)(jnp.ones(2), 4)
    assert len(jaxpr.jaxpr.invars) == 2


def test_returning_a_captured_object_is_an_error() -> None:
    captured = Model()
    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        nnx.make_jaxpr(lambda x: captured)(jnp.ones(3))


def test_same_inputs_and_outputs_as_flax() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")

    class FlaxModel(flax_nnx.Module):
        def __init__(self) -> None:
            self.w = flax_nnx.Param(jnp.arange(3.0))
            self.count = flax_nnx.BatchStat(jnp.zeros(()))

        def __call__(self, x: jax.Array) -> jax.Array:
            self.count[...] += 1
            return self.w[...] * x + 1

    theirs = flax_nnx.make_jaxpr(lambda m, x: m(x), graph_updates=False)(FlaxModel(), jnp.ones(3))
    ours = nnx.make_jaxpr(lambda m, x: m(x), graph_updates=False)(Model(), jnp.ones(3))
    avals = lambda vs: sorted(str(v.aval) for v in vs)
    assert avals(ours.jaxpr.invars) == avals(theirs.jaxpr.invars)
    assert avals(ours.jaxpr.outvars) == avals(theirs.jaxpr.outvars)


def test_explicit_graph_updates_is_refused_and_the_default_works() -> None:
    # Flax NNX 0.12: make_jaxpr(graph_updates=True) raises; flaxgraph raises only when
    # it is asked for explicitly, so the default mode still gives the jaxpr.
    model = Model()
    with pytest.raises(ValueError, match=r"does not support graph_updates=True.*\n.*omit"):
        nnx.make_jaxpr(lambda m: m(jnp.ones(3)), graph=True, graph_updates=True)
    with nnx.set_graph_updates(True):
        jaxpr = nnx.make_jaxpr(lambda m: m(jnp.ones(3)))(model)
    assert len(jaxpr.jaxpr.outvars) == 1 and float(model.count.value) == 0.0
