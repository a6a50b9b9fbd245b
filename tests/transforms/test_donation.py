"""Automatic donation in ``nnx.jit(..., donate_variables=True)``
(``flaxgraph/transforms/donation.py``): the arrays a step writes are donated; one
another holder also holds is donated as a copy, so the holder's array stays
readable; a train step aliases its parameters and optimizer state; the function is
traced and compiled once. Explicit donation donates an array met twice once."""

from __future__ import annotations

import itertools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.transforms.donation import BASELINE, DONATE_VARIABLES, holder_counts, unheld


class MLP(nnx.Module):
    def __init__(self, sizes: tuple[int, ...], seed: int = 0):
        rngs = nnx.Rngs(seed)
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


def make(seed: int = 0) -> tuple[MLP, nnx.Optimizer]:
    model = MLP((4, 8, 3), seed)
    return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)


def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(m: MLP) -> jax.Array:
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


X = jnp.linspace(-1.0, 1.0, 8 * 4).reshape(8, 4)
Y = jnp.cos(X[:, :3])


def arrays(obj: object) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(obj))


def state_bytes(*objs: object) -> int:
    return sum(a.nbytes for o in objs for a in arrays(o))


def test_baseline_counts_the_variable_and_the_values_list_only():
    v = nnx.Param(jnp.arange(3.0))
    values = [v.raw_value]
    assert holder_counts(values, (0,)) == [BASELINE]
    assert unheld(values, (0,)) == [True]
    other = v.raw_value  # a second holder
    assert holder_counts(values, (0,)) == [BASELINE + 1]
    assert unheld(values, (0,)) == [False]
    del other
    values.append(values[0])  # the same array twice
    assert unheld(values, (0, 1)) == [False, False]


def test_default_train_step_aliases_params_and_optimizer_state():
    model, optimizer = make()
    step = nnx.jit(train_step, donate_variables=True)
    total = state_bytes(model, optimizer)
    stats = step.lower(model, optimizer, X, Y).compile().memory_analysis()
    assert stats.alias_size_in_bytes >= 0.95 * total
    off = nnx.jit(train_step, donate_variables=False)
    assert off.lower(model, optimizer, X, Y).compile().memory_analysis().alias_size_in_bytes == 0


def test_steady_loop_compiles_once_and_takes_the_fast_path():
    model, optimizer = make()
    step = nnx.jit(train_step, donate_variables=True)
    for _ in range(5):
        step(model, optimizer, X, Y)
    assert step.jitted_fn._cache_size() == 1
    assert step.cache_info().general_calls == 1


def test_results_equal_the_non_donating_call_bit_for_bit():
    a, opt_a = make(3)
    b, opt_b = make(3)
    donating, plain = (
        nnx.jit(train_step, donate_variables=True),
        nnx.jit(train_step, donate_variables=False),
    )
    for i in range(4):
        la = donating(a, opt_a, X * i, Y)
        lb = plain(b, opt_b, X * i, Y)
        assert np.array_equal(la, lb)
    for u, v in zip(arrays((a, opt_a)), arrays((b, opt_b))):
        assert np.array_equal(u, v)


HOLDERS = ("array", "pure_dict", "closure", "clone", "argument")


@given(holder=st.sampled_from(HOLDERS), calls=st.integers(1, 3))
def test_a_held_reference_keeps_its_array_readable(holder: str, calls: int):
    model, optimizer = make()
    kept: object
    extra = ()
    if holder == "array":
        kept = model.layers[0].kernel[...]
    elif holder == "pure_dict":
        kept = nnx.to_pure_dict(nnx.state(model))
    elif holder == "closure":
        w = model.layers[1].bias.raw_value

        def kept() -> jax.Array:
            return w

    elif holder == "clone":
        kept = nnx.to_pure_dict(nnx.state(nnx.clone(model)))
    else:  # the same array also passed as a plain argument
        kept = model.layers[0].bias.raw_value
        extra = (kept,)

    def step(m, o, x, y, *rest):
        return train_step(m, o, x, y) + sum(jnp.sum(r) for r in rest)

    before = [np.asarray(a) for a in jax.tree.leaves(kept() if callable(kept) else kept)]
    jitted = nnx.jit(step, donate_variables=True)
    for _ in range(calls):
        jitted(model, optimizer, X, Y, *extra)
    after = jax.tree.leaves(kept() if callable(kept) else kept)
    assert not any(a.is_deleted() for a in after)
    for u, v in zip(before, after):
        assert np.array_equal(u, v)
    assert not any(a.is_deleted() for a in arrays((model, optimizer)))


@pytest.mark.parametrize("how", ["state", "split"])
def test_a_kept_state_stays_readable(how: str):
    model, optimizer = make()
    state = nnx.state(model) if how == "state" else nnx.split(model)[1]
    step = nnx.jit(train_step, donate_variables=True)
    step(model, optimizer, X, Y)
    # The State holds the model's Variables, which hold the new arrays.
    for a, b in zip(jax.tree.leaves(state), arrays(model)):
        assert not a.is_deleted() and np.array_equal(a, b)


def test_a_clone_still_trains_and_donation_resumes():
    model, optimizer = make()
    step = nnx.jit(train_step, donate_variables=True)
    step(model, optimizer, X, Y)
    target = nnx.clone(model)  # shares the arrays (as Flax's clone)
    before = [np.asarray(a) for a in arrays(target)]
    target_opt = nnx.Optimizer(target, optimizer.tx, wrt=nnx.Param)  # the same structure
    losses = [float(step(target, target_opt, X, Y)) for _ in range(3)]
    assert losses[0] > losses[-1]
    # The online model kept its (shared) arrays readable, unchanged.
    for a, b in zip(arrays(model), before):
        assert not a.is_deleted() and np.array_equal(a, b)
    step(model, optimizer, X, Y)
    stats = step.lower(model, optimizer, X, Y).compile().memory_analysis()
    assert stats.alias_size_in_bytes >= 0.95 * state_bytes(model, optimizer)
    # Copies, not another partition: one executable for every call above.
    assert step.jitted_fn._cache_size() == 1


def test_traced_once_and_compiled_once_whoever_holds_the_arrays():
    model, optimizer = make()
    traces = []

    @nnx.jit(donate_variables=True)
    def step(m, o, x, y):
        traces.append(None)
        return train_step(m, o, x, y)

    held = []
    for i in range(6):
        if i % 2:
            held.append(model.layers[0].kernel[...])  # a holder gained every other step
        step(model, optimizer, X, Y)
    assert len(traces) == 1
    assert step.jitted_fn._cache_size() == 1
    assert step.cache_info().general_calls == 1
    assert not any(a.is_deleted() for a in held)
    stats = step.lower(model, optimizer, X, Y).compile().memory_analysis()
    assert stats.alias_size_in_bytes >= 0.95 * state_bytes(model, optimizer)
    assert len(traces) == 1  # lower() re-uses the trace too


class Pair(nnx.Module):
    def __init__(self) -> None:
        self.online = MLP((4, 8, 3))
        self.target = nnx.clone(self.online)  # the same arrays in two models


def pair_step(t: Pair, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(m: MLP) -> jax.Array:
        return jnp.mean((m(x) - y) ** 2) + jnp.mean(t.target(x))

    loss, grads = nnx.value_and_grad(loss_fn)(t.online)
    params = nnx.state(t.online, nnx.Param)
    nnx.update(t.online, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads))
    return loss


@pytest.mark.parametrize("auto", [True, False])
def test_explicit_donation_after_a_clone(auto: bool):
    # flax#5461: "Attempt to donate the same buffer twice" on Flax and on jax.jit.
    a, b = Pair(), Pair()
    donating = nnx.jit(pair_step, donate_argnames="t", donate_variables=auto)
    plain = nnx.jit(pair_step, donate_variables=False)
    for i in range(4):
        if i == 2:  # a hard target update outside the step: shared arrays again
            nnx.update(a.target, nnx.state(a.online))
            nnx.update(b.target, nnx.state(b.online))
        assert np.array_equal(donating(a, X * i, Y), plain(b, X * i, Y))
    for u, v in zip(arrays(a), arrays(b)):
        assert not u.is_deleted() and np.array_equal(u, v)
    assert donating.jitted_fn._cache_size() == 1


def test_the_same_array_in_two_variables_is_not_donated():
    class Two(nnx.Module):
        def __init__(self, shared: jax.Array):
            self.a = nnx.Param(shared)
            self.b = nnx.Param(shared)

    m = Two(jnp.ones((3,)))

    @nnx.jit(donate_variables=True)
    def f(m):
        m.a[...] = m.a[...] * 2

    f(m)
    assert np.array_equal(m.b[...], np.ones(3)) and np.array_equal(m.a[...], 2 * np.ones(3))


def test_a_failing_trace_leaves_the_objects_as_they_were():
    model, optimizer = make()
    before = [np.asarray(a) for a in arrays((model, optimizer))]

    @nnx.jit(donate_variables=True)
    def bad(m, o, x):
        train_step(m, o, x, Y)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        bad(model, optimizer, X)
    after = arrays((model, optimizer))
    assert not any(a.is_deleted() for a in after)
    for u, v in zip(before, after):
        assert np.array_equal(u, v)


def test_read_only_variables_stay_readable_through_a_forward_pass():
    model, _ = make()
    forward = nnx.jit(lambda m, x: m(x), donate_variables=True)
    out = [forward(model, X) for _ in range(3)]
    assert all(np.array_equal(out[0], o) for o in out)
    assert not any(a.is_deleted() for a in arrays(model))
    assert forward.cache_info().general_calls == 1


def test_inside_a_trace_nothing_is_donated():
    model, optimizer = make()
    inner = nnx.jit(train_step, donate_variables=True)

    @jax.jit
    def outer(x):
        m, o = make()
        return inner(m, o, x, Y)

    outer(X)
    assert not any(a.is_deleted() for a in arrays((model, optimizer)))


def test_explicit_donation_and_the_switch():
    model, optimizer = make()
    with DONATE_VARIABLES.scoped(False):
        off = nnx.jit(train_step)
    assert off.lower(model, optimizer, X, Y).compile().memory_analysis().alias_size_in_bytes == 0
    explicit = nnx.jit(train_step, donate_argnums=(0, 1), donate_variables=False)
    held = model.layers[0].kernel[...]
    explicit(model, optimizer, X, Y)
    assert held.is_deleted()  # JAX's semantics: an explicit donation donates anyway
    assert sys.getrefcount(held) >= 2


def test_off_by_default_so_a_device_put_alias_stays_readable():
    # jax.device_put to an array's own sharding returns another Array object on the
    # same buffer, which no reference count sees (Tunix's weight sync makes them).
    model, optimizer = make()
    alias = jax.device_put(model.layers[0].kernel[...], model.layers[0].kernel[...].sharding)
    step = nnx.jit(train_step)
    assert step.lower(model, optimizer, X, Y).compile().memory_analysis().alias_size_in_bytes == 0
    step(model, optimizer, X, Y)
    assert not alias.is_deleted()
