"""JAX's errors about mapped and scanned inputs name the user's paths.

The thread's script (issue 24, item 6): ``nnx.vmap(lambda m, x: m(x), in_axes=(0,
0))(model, x)`` on an unstacked model. JAX says "inconsistent sizes" and names
``boxed[0][0]``; flaxgraph names ``args[0].hidden.kernel: axis 0 has size 2`` and
``args[1]: axis 0 has size 8`` and the fix. The same for ``scan`` lengths and for
axes that do not fit an array's rank. The caller's objects are unchanged.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(2, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.hidden(x)


def _raises(f: Any, *args: Any) -> str:
    with pytest.raises(ValueError) as info:
        f(*args)
    return str(info.value)


def test_vmap_over_an_unstacked_model_names_paths_and_sizes() -> None:
    model, x = MLP(nnx.Rngs(0)), jnp.ones((8, 2))
    before = nnx.state(model)
    message = _raises(nnx.vmap(lambda m, x: m(x), in_axes=(0, 0)), model, x)
    assert "boxed" not in message
    assert "args[0].hidden.kernel: axis 0 has size 2" in message
    assert "args[0].hidden.bias: axis 0 has size 3" in message
    assert "args[1]: axis 0 has size 8" in message
    assert "Fix: give args[0] in_axes None" in message
    # The caller's objects are as before, and the suggested fix works.
    assert jax.tree.all(jax.tree.map(lambda a, b: a is b, before, nnx.state(model)))
    y = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(model, x)
    np.testing.assert_allclose(y, model(x), rtol=1e-6)


def test_vmap_axis_beyond_rank_names_the_path() -> None:
    model, x = MLP(nnx.Rngs(0)), jnp.ones((8, 2))
    message = _raises(nnx.vmap(lambda m, x: m(x), in_axes=(None, 2)), model, x)
    assert "map args[1] along in_axes 2" in message and "(8, 2)" in message
    message = _raises(nnx.vmap(lambda m: m.hidden.kernel.sum(), in_axes=-3), model)
    assert "args[0].hidden" in message and "rank" in message


def test_a_scalar_under_an_int_axis_names_its_path() -> None:
    model = MLP(nnx.Rngs(0))
    model.count = nnx.BatchStat(jnp.zeros(()))
    message = _raises(nnx.vmap(lambda m, x: m(x), in_axes=(0, 0)), model, jnp.ones((8, 2)))
    assert "map args[0].count along in_axes 0" in message and "is only 0" in message


def test_vmap_axis_size_disagreeing_with_the_inputs() -> None:
    message = _raises(nnx.vmap(lambda x: x, axis_size=4), jnp.ones((3,)))
    assert "here 4 (axis_size)" in message and "args[0]: axis 0 has size 3" in message


def test_scan_length_mismatch_names_paths() -> None:
    body = nnx.scan(lambda c, x, y: (c, x + y), in_axes=(nnx.Carry, 0, 0))
    message = _raises(body, 0.0, jnp.ones(3), {"y": jnp.ones(4)}["y"])
    assert "args[1]: axis 0 has size 3" in message and "args[2]: axis 0 has size 4" in message
    message = _raises(nnx.scan(lambda c, x: (c, x), length=5), 0.0, jnp.ones(3))
    assert "here 5 (length)" in message and "args[1]: axis 0 has size 3" in message


def test_scan_axis_beyond_rank_names_the_path() -> None:
    model = MLP(nnx.Rngs(0))
    before = nnx.state(model)
    body = nnx.scan(lambda c, m: (c, m(c)), in_axes=(nnx.Carry, 1), out_axes=(nnx.Carry, 0))
    message = _raises(body, jnp.ones(2), model)
    assert "map args[1].hidden.bias along in_axes 1" in message
    assert jax.tree.all(jax.tree.map(lambda a, b: a is b, before, nnx.state(model)))


def test_errors_of_the_users_function_are_left_alone() -> None:
    def f(x: jax.Array) -> jax.Array:
        raise ValueError("mine")

    assert _raises(nnx.vmap(f), jnp.ones((3, 2))) == "mine"


@given(st.lists(st.integers(1, 4), min_size=2, max_size=4))
def test_vmap_reports_exactly_when_jax_would(sizes: list[int]) -> None:
    """Differential: the rewritten error appears exactly when ``jax.vmap`` itself
    rejects the same arrays, and lists every size JAX saw."""
    xs = [jnp.zeros((n, 2)) for n in sizes]
    try:
        jax.vmap(lambda *a: sum(v.sum() for v in a))(*xs)
        jax_failed = False
    except ValueError:
        jax_failed = True
    try:
        nnx.vmap(lambda *a: sum(v.sum() for v in a))(*xs)
        message = None
    except ValueError as error:
        message = str(error)
    assert (message is not None) == jax_failed
    if message is not None:
        for i, n in enumerate(sizes):
            assert f"args[{i}]: axis 0 has size {n}" in message
