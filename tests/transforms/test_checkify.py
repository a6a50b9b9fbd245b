"""Tests of flaxgraph/transforms/checkify.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from jax.experimental import checkify

import flaxgraph as nnx
from flaxgraph.testing import (
    MutationStep,
    apply_mutations,
    assert_graphs_equal,
    graphs,
    mutations,
)


class Model(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.arange(3.0))
        self.count = nnx.BatchStat(jnp.zeros(()))

    def __call__(self, x: jax.Array) -> jax.Array:
        checkify.check(jnp.all(x > 0), "x must be positive, got {}", x)
        self.count.value += 1
        return self.w * x


def step(m: Model, x: jax.Array) -> jax.Array:
    return m(x)


def test_a_passing_check_returns_no_error_and_the_eager_effect() -> None:
    model, eager = Model(), Model()
    x = jnp.array([1.0, 2.0, 3.0])
    err, out = nnx.checkify(step)(model, x)
    assert err.get() is None
    expected = eager.w.value * x
    eager.count.value += 1
    np.testing.assert_allclose(out, expected)
    assert float(model.count.value) == float(eager.count.value) == 1.0


def test_a_failing_check_is_returned_and_updates_still_reach_the_caller() -> None:
    model = Model()
    err, _ = nnx.checkify(step)(model, -jnp.ones(3))
    assert "x must be positive" in err.get()
    assert float(model.count.value) == 1.0
    with pytest.raises(checkify.JaxRuntimeError, match="x must be positive"):
        err.throw()


def test_errors_selects_the_checks() -> None:
    def log_sum(m: Model, x: jax.Array) -> jax.Array:
        return jnp.log(m.w * x).sum()

    model = Model()  # w[0] == 0: log(-0.0 * x) is -inf, log of negative is nan
    err, _ = nnx.checkify(log_sum)(model, -jnp.ones(3))
    assert err.get() is None  # default: user checks only
    err, _ = nnx.checkify(log_sum, errors=checkify.float_checks)(model, -jnp.ones(3))
    assert "nan generated" in err.get()


def test_structural_updates_reach_the_caller() -> None:
    def grow(m: Model) -> Model:
        m.extra = nnx.Param(m.w.value * 2)
        return m

    model = Model()
    err, out = nnx.checkify(grow)(model)
    assert err.get() is None and out is model
    np.testing.assert_allclose(model.extra.value, np.arange(3.0) * 2)


def test_under_jit_and_with_a_module_as_the_function() -> None:
    model = Model()
    err, _ = nnx.jit(nnx.checkify(step))(model, -jnp.ones(3))
    assert "x must be positive" in err.get() and float(model.count.value) == 1.0
    err, _ = nnx.checkify(model)(jnp.ones(3))
    assert err.get() is None and float(model.count.value) == 2.0


def test_mutating_a_captured_object_is_an_error() -> None:
    captured = Model()
    with pytest.raises(nnx.TraceContextError):
        nnx.checkify(lambda x: captured(x))(jnp.ones(3))
    assert float(captured.count.value) == 0.0


def test_default_errors_match_flax() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    import inspect

    default = inspect.signature(flax_nnx.checkify).parameters["errors"].default
    assert inspect.signature(nnx.checkify).parameters["errors"].default == default


# -- differential: a random mutation program under checkify does what it does eagerly -------------


@given(graph=graphs(max_nodes=4, max_depth=2, max_attributes=3), steps=mutations(max_steps=4))
def test_a_mutation_program_under_checkify_matches_it_run_eagerly(
    graph: object, steps: list[MutationStep]
) -> None:
    def run(root: object) -> object:
        return apply_mutations(root, steps), root

    eager = nnx.clone(graph)
    eager_out = run(eager)
    err, out = nnx.checkify(run)(graph)
    assert err.get() is None and out[1] is graph
    assert_graphs_equal((graph, out), (eager, eager_out))
