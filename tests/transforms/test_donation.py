"""Automatic donation in ``nnx.jit`` (on by default; ``flaxgraph/transforms/donation.py``):
the arrays a step writes are donated; an array nnx.jit did not install, or that was
read or is held since, is donated as a copy, so no code sees a deleted array (a
``jax.device_put`` alias included); a train step aliases its parameters and optimizer
state; the function is traced and compiled once. Explicit donation donates an array
met twice once."""

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
from flaxgraph.variablelib.variable import read_slot


class MLP(nnx.Module):
    def __init__(self, sizes: tuple[int, ...], seed: int = 0):
        rngs = nnx.Rngs(seed)
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


TX = optax.adam(1e-2)  # one transformation: its functions are part of the jit's cache key


def make(seed: int = 0) -> tuple[MLP, nnx.Optimizer]:
    model = MLP((4, 8, 3), seed)
    return model, nnx.Optimizer(model, TX, wrt=nnx.Param)


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


def test_baseline_counts_the_variable_its_fresh_array_and_the_values_list_only():
    v = nnx.Param(jnp.arange(3.0))
    bump = nnx.jit(lambda p: p.set_value(p.get_value() + 1.0))
    values = [read_slot(v)]
    assert unheld(values, (0,), [v]) == [False]  # made by the user: not fresh
    del values
    bump(v)  # nnx.jit installs a new array: fresh until anything reads it
    values = [read_slot(v)]
    assert holder_counts(values, (0,)) == [BASELINE]
    assert unheld(values, (0,), [v]) == [True]
    other = values[0]  # a second holder
    assert holder_counts(values, (0,)) == [BASELINE + 1]
    assert unheld(values, (0,), [v]) == [False]
    del other
    values.append(values[0])  # the same array twice
    assert unheld(values, (0, 1), [v, v]) == [False, False]
    del values[1]
    assert unheld(values, (0,), [v]) == [True]
    _ = v.shape, v.dtype  # what describes the array is not a read
    assert unheld(values, (0,), [v]) == [True]
    v[...]  # a read: the array may have been handed out
    assert unheld(values, (0,), [v]) == [False]


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


def _step_with_rest(m, o, x, y, *rest):
    return train_step(m, o, x, y) + sum(jnp.sum(r) for r in rest)


_HELD_STEP = nnx.jit(_step_with_rest, donate_variables=True)


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

    before = [np.asarray(a) for a in jax.tree.leaves(kept() if callable(kept) else kept)]
    jitted = _HELD_STEP  # compiled once for every example
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


def _pointers(obj: object) -> list[int]:
    """The buffers of ``obj``'s Variables, read without counting as a read."""
    return [
        read_slot(v).unsafe_buffer_pointer()
        for v in jax.tree.leaves(nnx.state(obj), is_leaf=lambda x: isinstance(x, nnx.Variable))
    ]


def test_on_by_default_and_in_place_once_the_arrays_are_fresh():
    model, optimizer = make()
    step = nnx.jit(train_step)
    total = state_bytes(model, optimizer)
    assert (
        step.lower(model, optimizer, X, Y).compile().memory_analysis().alias_size_in_bytes
        >= 0.95 * total
    )
    variables = [
        v
        for v in jax.tree.leaves((model, optimizer), is_leaf=lambda x: isinstance(x, nnx.Variable))
        if isinstance(v, nnx.Variable)
    ]
    step(model, optimizer, X, Y)  # the user's arrays: donated as copies
    step(model, optimizer, X, Y)  # the arrays nnx.jit installed: donated themselves
    before = [read_slot(v).unsafe_buffer_pointer() for v in variables]
    step(model, optimizer, X, Y)
    after = [read_slot(v).unsafe_buffer_pointer() for v in variables]
    reused = sum(a == b for a, b in zip(before, after))
    assert reused >= 0.9 * len(variables)  # XLA wrote the new state into the old buffers


READS = (
    "value",
    "index",
    "raw_value",
    "get_value",
    "state",
    "split",
    "tree",
    "pure_dict",
    "clone",
    "iter",
)


def _read(model: MLP, how: str, layer: int) -> jax.Array:
    """One layer's kernel, read the way a user might."""
    kernel = model.layers[layer].kernel
    if how == "value":
        return kernel.value
    if how == "index":
        return kernel[...]
    if how == "raw_value":
        return kernel.raw_value
    if how == "get_value":
        return kernel.get_value()
    if how == "state":
        return nnx.state(model)["layers"][layer]["kernel"][...]
    if how == "split":
        return nnx.split(model)[1]["layers"][layer]["kernel"][...]
    if how == "tree":
        return jax.tree.leaves(model.layers[layer])[1]
    if how == "pure_dict":
        return nnx.to_pure_dict(nnx.state(model))["layers"][layer]["kernel"]
    if how == "clone":
        return nnx.clone(model).layers[layer].kernel[...]
    found = dict(nnx.iter_graph(model))[("layers", layer, "kernel")]
    return found.value


_STEP = nnx.jit(train_step)
_PLAIN = nnx.jit(train_step, donate_variables=False)


@given(
    ops=st.lists(
        st.one_of(
            st.just(("step",)),
            st.tuples(st.just("alias"), st.sampled_from(READS), st.integers(0, 1)),
            st.tuples(st.just("write"), st.integers(0, 1)),
        ),
        max_size=8,
    )
)
def test_a_device_put_alias_made_from_any_read_stays_readable(ops):
    # jax.device_put to an array's own sharding returns another Array object on the
    # same buffer, which no reference count sees (Tunix's weight sync makes them): the
    # read that handed the array out keeps nnx.jit from donating it in place.
    model, optimizer = make()
    twin, twin_opt = make()
    step, plain = _STEP, _PLAIN  # compiled once for every example
    aliases: list[tuple[jax.Array, np.ndarray]] = []
    for op in (*ops, ("step",), ("step",)):
        if op[0] == "step":
            assert np.array_equal(step(model, optimizer, X, Y), plain(twin, twin_opt, X, Y))
        elif op[0] == "alias":
            array = _read(model, op[1], op[2])
            alias = jax.device_put(array, array.sharding)
            aliases.append((alias, np.asarray(alias)))
            del array
        else:
            for m in (model, twin):
                m.layers[op[1]].kernel.value = m.layers[op[1]].kernel.value * 0.5
    for alias, seen in aliases:
        assert not alias.is_deleted()
        assert np.array_equal(alias, seen)
    for u, v in zip(arrays((model, optimizer)), arrays((twin, twin_opt))):
        assert np.array_equal(u, v)


def test_new_shapes_that_leave_a_donated_leaf_unchanged_fall_back_to_the_general_path():
    # The second call's arrays have the dtype the first call wrote: astype returns its
    # input, so the leaf donated for the first shapes comes back unchanged.
    class Cast(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(jnp.ones((4,)))
            self.b = nnx.BatchStat(jnp.ones((3,)))

    @nnx.jit
    def cast(m: Cast) -> jax.Array:
        m.a.value = m.a.value.astype(jnp.bfloat16)
        m.b.value = m.b.value + 1.0
        return m.a.value.sum()

    first, second = Cast(), Cast()
    cast(first)
    cast(second)
    assert float(cast(second)) == 4.0  # the plan of `second` finds `a` unchanged
    assert second.a.value.dtype == jnp.bfloat16 and not second.a.value.is_deleted()
    assert np.array_equal(second.b.value, np.full(3, 3.0))


class Growing(nnx.Module):
    def __init__(self):
        self.cache = nnx.Variable(jnp.zeros((2,)))
        self.count = nnx.Variable(jnp.zeros((), jnp.int32))
        self.w = nnx.Param(jnp.arange(3.0))


def grow(m: Growing) -> jax.Array:
    m.cache.value = jnp.concatenate([m.cache.value, m.w.value[:1]])  # one more element
    m.count.value = (m.count.value + 1).astype(jnp.float32)  # another dtype, as many elements
    m.w.value = m.w.value * 2.0
    return m.w.value.sum() + m.cache.value.sum()


def test_a_variable_that_grows_is_not_donated_so_jax_does_not_warn():
    # No output can take the buffer of a Variable whose new value has more elements (a
    # growing cache): donated, JAX would warn "Some donated buffers were not usable" on
    # every compile (an error under this suite's filterwarnings). It is left out; the
    # others are still donated (a dtype change of as many elements is XLA's to reuse).
    jitted, eager = nnx.jit(grow), Growing()
    m = Growing()
    for _ in range(4):
        assert float(jitted(m)) == float(grow(eager))
        for a, b in zip(jax.tree.leaves(nnx.state(m)), jax.tree.leaves(nnx.state(eager))):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    stats = jitted.lower(m).compile().memory_analysis()
    assert stats.alias_size_in_bytes == m.w.value.nbytes + m.count.value.nbytes  # not the cache
    assert m.cache.value.shape == (6,) and not m.cache.value.is_deleted()


def test_jax_jit_outputs_are_new_arrays_never_an_input():
    # donation.mark_installed and the plans note a compiled output as fresh: no code
    # has seen it. That holds because jax.jit returns new arrays for outputs that are
    # inputs, passed through or swapped (no input array object, no alias of its buffer).
    a, b = jnp.arange(3.0), jnp.arange(3.0) + 1
    outs = jax.jit(lambda x, y: (y, x, x))(a, b)
    pointers = {a.unsafe_buffer_pointer(), b.unsafe_buffer_pointer()}
    for out in outs:
        assert out is not a and out is not b
        assert out.unsafe_buffer_pointer() not in pointers
    assert len({o.unsafe_buffer_pointer() for o in outs}) == 3
