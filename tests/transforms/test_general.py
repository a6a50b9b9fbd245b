"""transforms.general: split_inputs / merge_inputs carry objects through plain JAX
transforms; resolve_kwargs binds keyword arguments to positions.

Each test compares with the same computation done by hand on the arrays.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.transforms import general


class Counter(nnx.Module):
    def __init__(self, n: int = 0) -> None:
        self.count = nnx.BatchStat(jnp.array(n))
        self.w = nnx.Param(jnp.ones((3,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count[...] += 1
        return x * self.w[...]


def test_jit_updates_the_callers_object_and_returns_the_output() -> None:
    model = Counter()

    @general.split_inputs
    @jax.jit
    @general.merge_inputs
    def forward(model: Counter, x: jax.Array) -> jax.Array:
        return model(x)

    y = forward(model, jnp.arange(3.0))
    np.testing.assert_allclose(y, jnp.arange(3.0))
    assert int(model.count[...]) == 1
    forward(model, jnp.arange(3.0))
    assert int(model.count[...]) == 2


@given(st.booleans(), st.integers(0, 5))
@settings(max_examples=10, deadline=None)
def test_cond_takes_the_branch_of_the_predicate(pred: bool, start: int) -> None:
    counter = Counter(start)

    @general.merge_inputs
    def bump(c: Counter) -> None:
        c.count[...] += 1

    @general.merge_inputs
    def keep(c: Counter) -> None:
        pass

    general.split_inputs(jax.lax.cond)(pred, bump, keep, counter)
    assert int(counter.count[...]) == start + int(pred)


def test_vmap_maps_changes_back_per_instance() -> None:
    class Env(nnx.Module):
        def __init__(self) -> None:
            self.index = nnx.Variable(jnp.arange(6))
            self.step = nnx.Variable(jnp.zeros((6,), jnp.int32))

    env, model = Env(), Counter()

    @general.split_inputs
    @partial(jax.vmap, in_axes=(0, None), out_axes=((0, None), None))
    @general.merge_inputs
    def f(env: Env, model: Counter) -> None:
        env.step[...] += env.index[...] % 2

    f(env, model)
    np.testing.assert_array_equal(env.step[...], np.arange(6) % 2)


def test_shared_objects_stay_shared_and_outputs_alias_the_callers_object() -> None:
    shared = Counter()
    pair = nnx.List([shared, shared])

    @general.split_inputs
    @jax.jit
    @general.merge_inputs
    def f(pair: nnx.List, alone: Counter) -> Counter:
        assert pair[0] is pair[1] and pair[0] is alone
        pair[0].count[...] += 1
        return alone

    out = f(pair, shared)
    assert out is shared
    assert int(shared.count[...]) == 1


def test_new_attributes_come_back() -> None:
    model = Counter()

    @general.split_inputs
    @jax.jit
    @general.merge_inputs
    def f(model: Counter) -> None:
        model.extra = nnx.Variable(jnp.array(7))

    f(model)
    assert int(model.extra[...]) == 7


def test_split_inputs_rejects_a_function_without_merge_inputs() -> None:
    with pytest.raises(TypeError, match="merge_inputs"):
        general.split_inputs(jax.jit(lambda m: 1.0))(Counter())


def test_resolve_kwargs_moves_keywords_to_positions() -> None:
    def f(a: int, b: int = 2, *, c: int = 3) -> None: ...

    assert general.resolve_kwargs(f, (1,), {"c": 4}) == ((1, 2), {"c": 4})
    assert general.resolve_kwargs(f, (), {"b": 5, "a": 0}) == ((0, 5), {"c": 3})
    with pytest.raises(TypeError):
        general.resolve_kwargs(f, (1, 2, 3), {})
