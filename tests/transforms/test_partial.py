"""Tests of flaxgraph/transforms/partial.py (jit_partial, cached_partial)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import flaxgraph as nnx


class Foo(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.Variable(jnp.array(0))
        self.w = nnx.Param(jnp.ones((2, 3)))


def step(m: Foo, x: jnp.ndarray) -> jnp.ndarray:
    m.count[...] += 1
    return x @ m.w[...]


def test_jit_partial_binds_and_updates_the_bound_object() -> None:
    for graph in (True, False):
        m = Foo()
        f = nnx.jit_partial(step, m, graph=graph, graph_updates=False)
        np.testing.assert_allclose(f(jnp.ones((1, 2))), 2.0)
        f(jnp.ones((1, 2)))
        assert int(m.count[...]) == 2 and f.cache_info().general_calls == 1


def test_jit_partial_lower_compile_takes_the_remaining_arguments() -> None:
    # Flax NNX 0.12: f_jit.lower(x).compile()(x) runs with the bound objects and
    # writes their updates back.
    for graph in (True, False):
        m = Foo()
        f = nnx.jit_partial(step, m, graph=graph, graph_updates=False)
        compiled = f.lower(jnp.ones((1, 2))).compile()
        assert "dot" in compiled.as_text()
        np.testing.assert_allclose(compiled(jnp.ones((1, 2))), 2.0)
        compiled(jnp.ones((1, 2)))
        assert int(m.count[...]) == 2


def test_cached_partial_adds_to_a_counter() -> None:
    counter = nnx.Variable(jnp.array(0))

    @nnx.jit
    def add(c: nnx.Variable, n: int) -> None:
        c[...] += n

    add_to = nnx.cached_partial(add, counter)
    add_to(2)
    add_to(3)
    assert int(counter[...]) == 5


def test_jit_partial_in_tree_mode_refuses_shared_variables_when_created() -> None:
    v = nnx.Param(jnp.array(1.0))
    c1, c2 = nnx.Dict(v=v), nnx.Dict(v=v)
    try:
        nnx.jit_partial(lambda a, b, x: x, c1, c2, graph=False)
    except nnx.SharedReferenceError as error:
        message = str(error)
    else:
        raise AssertionError("no error")
    assert "args[0].v" in message and "args[1].v" in message
    assert "Duplicate Param found at paths" in message
    # graph mode shares the Variable as usual
    f = nnx.jit_partial(lambda a, b, x: a.v[...] + b.v[...] + x, c1, c2, graph=True)
    assert float(f(jnp.array(1.0))) == 3.0
