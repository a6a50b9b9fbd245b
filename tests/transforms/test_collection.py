"""Nothing a transform caches keeps a user's objects alive (transforms/plan_owners.py).

A model passed through each transform (twice, so that the fast path has made its
plan), then deleted, is collected by ``gc.collect()``, with its Variables and their
arrays; so are a Variable and an ``Rngs`` passed on their own. The two measurements
of issue #36 are here too, counted with ``jax.live_arrays()``: fresh models of one
structure, and of many structures, through one jitted function each leave no array
behind. JAX itself holds no argument array after a call (``test_jax_holds_no_argument``),
so an array found alive here is held by flaxgraph; and the weak references would see
an object that something still holds (``test_a_held_model_is_seen``).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

import flaxgraph as nnx

X = jnp.ones((2, 4))


def _model() -> nnx.Linear:
    return nnx.Linear(4, 4, rngs=nnx.Rngs(0))


def _loss(m: nnx.Linear, x: jax.Array) -> jax.Array:
    return m(x).sum()


def _custom_vjp() -> Callable[[Any, jax.Array], Any]:
    @nnx.custom_vjp
    def f(m: nnx.Linear, x: jax.Array) -> jax.Array:
        return _loss(m, x)

    def fwd(m: nnx.Linear, x: jax.Array) -> tuple[jax.Array, tuple[Any, jax.Array]]:
        return f(m, x), (m, x)

    def bwd(res: tuple[Any, jax.Array], g: jax.Array) -> tuple[Any, jax.Array]:
        m, x = res
        return jax.tree.map(lambda v: v * g, nnx.grad(_loss)(m, x)), jnp.zeros_like(x)

    f.defvjp(fwd, bwd)
    return lambda m, x: nnx.grad(lambda m: f(m, x))(m)


def _transforms() -> dict[str, Callable[[], Callable[[Any, jax.Array], Any]]]:
    """Each transform, as ``make() -> run(model, x)``: ``make`` builds the transformed
    function once (it lives across the models, as a user's does)."""
    mesh = jax.make_mesh((1,), ("d",))
    fwd = lambda m, x: m(x)
    return {
        "jit": lambda: nnx.jit(fwd),
        "remat": lambda: nnx.remat(fwd),
        "grad": lambda: nnx.grad(_loss),
        "value_and_grad": lambda: nnx.value_and_grad(_loss),
        "vjp": lambda: lambda m, x: nnx.vjp(lambda m: _loss(m, x), m)[1](jnp.float32(1.0)),
        "jvp": lambda: (
            lambda m, x: nnx.jvp(lambda m: _loss(m, x), (m,), (jax.tree.map(jnp.ones_like, m),))
        ),
        "vmap": lambda: nnx.vmap(fwd, in_axes=(None, 0)),
        "pmap": lambda: lambda m, x: nnx.pmap(fwd, in_axes=(None, 0))(m, x[:1]),
        "scan": lambda: (
            lambda m, x: nnx.scan(lambda c, xs: (c, c(xs)), in_axes=(nnx.Carry, 0))(m, x[None])
        ),
        "fori_loop": lambda: (
            lambda m, x: nnx.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (m, x))
        ),
        "while_loop": lambda: (
            lambda m, x: nnx.while_loop(
                lambda c: c[2] < 2, lambda c: (c[0], c[0](c[1]), c[2] + 1), (m, x, 0)
            )
        ),
        "cond": lambda: lambda m, x: nnx.cond(True, fwd, lambda m, x: 2 * m(x), m, x),
        "switch": lambda: lambda m, x: nnx.switch(1, [fwd, lambda m, x: 2 * m(x)], m, x),
        "eval_shape": lambda: lambda m, x: nnx.eval_shape(fwd, m, x),
        "shard_map": lambda: nnx.shard_map(
            fwd, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec()), out_specs=PartitionSpec()
        ),
        "custom_vjp": _custom_vjp,
        "jit(grad)": lambda: nnx.jit(nnx.grad(_loss)),
        "jit(vmap)": lambda: nnx.jit(nnx.vmap(fwd, in_axes=(None, 0))),
        "jit(remat)": lambda: nnx.jit(nnx.remat(fwd)),
        "jit(cond)": lambda: nnx.jit(lambda m, x: nnx.cond(True, fwd, lambda m, x: 2 * m(x), m, x)),
        "jit(scan)": lambda: nnx.jit(
            lambda m, x: nnx.scan(lambda c, xs: (c, c(xs)), in_axes=(nnx.Carry, 0))(m, x[None])
        ),
        "vmap(jit)": lambda: nnx.vmap(nnx.jit(fwd), in_axes=(None, 0)),
    }


def _watch(model: nnx.Module) -> list[weakref.ref[Any]]:
    """Weak references to the model, each of its Variables and each of their arrays."""
    refs: list[weakref.ref[Any]] = [weakref.ref(model)]
    for _, v in nnx.iter_graph(model):
        if isinstance(v, nnx.Variable):
            refs += [weakref.ref(v), weakref.ref(v.get_value())]
    return refs


def _alive(refs: list[weakref.ref[Any]]) -> list[Any]:
    gc.collect()
    return [r() for r in refs if r() is not None]


@pytest.mark.parametrize("name", sorted(_transforms()))
def test_a_model_is_collected_after_del(name: str) -> None:
    run = _transforms()[name]()
    refs: list[weakref.ref[Any]] = []
    for _ in range(3):  # several models through the same transformed function
        model = _model()
        run(model, X)
        run(model, X)  # the fast path's call, where there is one
        refs += _watch(model)
        del model
    assert _alive(refs) == []


def test_a_variable_and_rngs_are_collected_after_del() -> None:
    @nnx.jit
    def step(v: nnx.Variable[jax.Array], rngs: nnx.Rngs) -> jax.Array:
        v[...] += 1
        return v[...] + rngs.params.uniform(())

    refs: list[weakref.ref[Any]] = []
    for seed in range(3):
        v, rngs = nnx.Param(jnp.ones(3)), nnx.Rngs(seed)
        step(v, rngs)
        step(v, rngs)
        assert step.cache_info().plans >= 1  # (the plan was made: it was the owner)
        refs += [weakref.ref(v), weakref.ref(v.get_value()), weakref.ref(rngs)]
        del v, rngs
    assert _alive(refs) == []


def test_a_plan_of_several_objects_goes_with_them() -> None:
    @nnx.jit
    def step(m: nnx.Linear, counter: nnx.Variable[jax.Array], x: jax.Array) -> jax.Array:
        counter[...] += 1
        return m(x)

    model, counter = _model(), nnx.Variable(jnp.zeros(()))
    step(model, counter, X)
    step(model, counter, X)
    assert step.cache_info() == (1, 1)
    refs = _watch(model)
    del model, counter
    assert _alive(refs) == []
    assert step.cache_info().plans == 0


def test_the_plan_still_serves_a_live_model() -> None:
    # Weak holding must not cost the fast path: a model that lives keeps its plan.
    step = nnx.jit(lambda m, x: m(x))
    model = _model()
    for _ in range(5):
        step(model, X)
        gc.collect()
    assert step.cache_info() == (1, 1)


def _new_live_arrays(before: set[int]) -> list[jax.Array]:
    gc.collect()
    return [a for a in jax.live_arrays() if id(a) not in before]


def test_fresh_models_of_one_structure_leave_no_array() -> None:
    # Issue #36's first measurement (there with 512 x 512 layers, which held 8 arrays,
    # 4.2 MB): 50 fresh models through one jitted function.
    x = jnp.ones((1, 64))
    f = nnx.jit(lambda m, x: m(x))
    before = {id(a) for a in jax.live_arrays()}
    for i in range(50):
        model = nnx.Linear(64, 64, rngs=nnx.Rngs(i))
        f(model, x).block_until_ready()
        del model  # (one gc.collect at the end: a kept model is still there then)
    assert _new_live_arrays(before) == []
    assert f.cache_info().general_calls == 50  # (each model was a new plan)


def test_fresh_models_of_many_structures_leave_no_array() -> None:
    # Issue #36's second measurement (there 30 models of 30 structures, which held 16
    # arrays): more structures than a function keeps plans for (PlanCache.size), each
    # a compile.
    x = jnp.ones((1, 16))
    g = nnx.jit(lambda m, x: m(x))
    before = {id(a) for a in jax.live_arrays()}
    for i in range(10):
        model = nnx.Linear(16, 16 + i, rngs=nnx.Rngs(i))
        g(model, x).block_until_ready()
        g(model, x).block_until_ready()
        del model
    assert _new_live_arrays(before) == []


def test_jax_holds_no_argument() -> None:
    # What JAX itself keeps: jax.jit's caches hold no argument array after a call (a
    # closed-over array would be a constant of its traced program; the functions
    # above close over no array of the model).
    f = jax.jit(lambda params, x: x @ params["w"] + params["b"])
    before = {id(a) for a in jax.live_arrays()}
    refs = []
    for i in range(5):
        params = {"w": jnp.full((4, 4), float(i)), "b": jnp.zeros((1, 4))}
        f(params, X).block_until_ready()
        refs += [weakref.ref(params["w"]), weakref.ref(params["b"])]
        del params
    assert _alive(refs) == []
    assert _new_live_arrays(before) == []


def test_a_held_model_is_seen() -> None:
    # The detection can fail: a model someone still holds is found alive.
    step = nnx.jit(lambda m, x: m(x))
    model = _model()
    step(model, X)
    keep = [model]
    refs = _watch(model)
    del model
    assert len(_alive(refs)) == len(refs)
    del keep
    assert _alive(refs) == []


# -- without the garbage collector ----------------------------------------------------------

# The transforms that keep fast-path plans (``PlanCache``): the model and its plans form
# a cycle (plan_owners.py), which only the collector frees (test_a_model_is_collected_after_del);
# docs/design.md, "Who keeps a plan alive", says why it is not broken.
_PLANNED = {
    "jit",
    "vmap",
    "scan",
    "shard_map",
    "jit(grad)",
    "jit(vmap)",
    "jit(remat)",
    "jit(cond)",
    "jit(scan)",
    "vmap(jit)",
}


@pytest.fixture
def no_collector():
    """The garbage collector off for the test (reference counting alone frees)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _watch_freed(model: nnx.Module) -> tuple[list[weakref.ref[Any]], list[int]]:
    """Weak references to the model, its Variables and arrays, with a callback that
    counts each one freed (the callback runs when reference counting frees it)."""
    freed: list[int] = []
    refs: list[weakref.ref[Any]] = [weakref.ref(model, lambda _: freed.append(0))]
    for _, v in nnx.iter_graph(model):
        if isinstance(v, nnx.Variable):
            refs.append(weakref.ref(v, lambda _: freed.append(1)))
            refs.append(weakref.ref(v.get_value(), lambda _: freed.append(2)))
    return refs, freed


@pytest.mark.parametrize("name", sorted(set(_transforms()) - _PLANNED))
def test_without_plans_del_frees_the_model_at_once(name: str, no_collector: None) -> None:
    # A transform that keeps no plan holds nothing of the call: ``del model`` frees the
    # model, its Variables and their arrays by reference counting, with no collection
    # (grad, value_and_grad, vjp and custom_vjp kept the Variables in a recursive
    # closure's cycle until the collector ran).
    run = _transforms()[name]()
    for _ in range(2):
        model = _model()
        run(model, X)
        run(model, X)
        refs, freed = _watch_freed(model)
        del model
        assert len(freed) == len(refs), [r() for r in refs if r() is not None]
