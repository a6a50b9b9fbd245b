"""The object every transform returns (``transforms/transformed.py``): its methods
and attributes, method binding, metadata, and ``nnx.jit``'s ``lower``/``trace``/
``eval_shape``/``jitted_fn`` as Flax NNX 0.12's ``JitWrapped`` has them."""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import pytest
from jax.extend import core as jex_core

import flaxgraph as nnx
from flaxgraph.transforms.transformed import Transformed


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.BatchStat(jnp.array(0))
        self.w = nnx.Param(jnp.arange(3.0))

    @nnx.jit
    def __call__(self, x: jax.Array) -> jax.Array:
        self.count += 1
        return x * self.w

    @nnx.jit(static_argnums=1)
    def scaled(self, k: int, x: jax.Array) -> jax.Array:
        self.count += k
        return k * x * self.w


def step(c: Counter, x: jax.Array) -> jax.Array:
    """Adds one to the counter."""
    c.count += 1
    return x * 2


def test_every_transform_returns_a_transformed_object() -> None:
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("data",))
    made = [
        nnx.jit(step),
        nnx.vmap(step, in_axes=(None, 0)),
        nnx.shard_map(step, mesh=mesh, in_specs=jax.P(), out_specs=jax.P()),
        nnx.cached_partial(nnx.jit(step), Counter()),
        nnx.jit_partial(step, Counter()),
    ]
    for t in made:
        assert isinstance(t, Transformed)
        assert t.__name__ == "step" and t.__doc__ == step.__doc__
        assert t.__wrapped__ is step
        assert t.cache_info().general_calls == 0


def test_decorated_methods_bind_like_functions() -> None:
    c = Counter()
    bound = c.__call__
    assert inspect.ismethod(bound) and bound.__self__ is c
    assert isinstance(Counter.__call__, Transformed)
    assert jnp.array_equal(c(jnp.ones(3)), jnp.arange(3.0))
    assert jnp.array_equal(c.scaled(2, jnp.ones(3)), 2 * jnp.arange(3.0))
    assert int(c.count.value) == 3
    # The unbound form takes the instance explicitly.
    Counter.__call__(c, jnp.ones(3))
    assert int(c.count.value) == 4


def test_repeated_method_calls_take_the_fast_path() -> None:
    c = Counter()
    before = Counter.__call__.cache_info().general_calls  # shared by every Counter
    for _ in range(4):
        c(jnp.ones(3))
    assert int(c.count.value) == 4
    assert Counter.__call__.cache_info().general_calls == before + 1


def _primitives(jaxpr: jex_core.Jaxpr) -> set[str]:
    """The primitives of ``jaxpr`` and of the jaxprs its equations hold."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for inner in jex_core.jaxprs_in_params(eqn.params):
            names |= _primitives(inner)
    return names


def test_jit_lower_trace_and_eval_shape() -> None:
    jitted = nnx.jit(step)
    c = Counter()
    lowered = jitted.lower(c, jnp.array(1.0))
    assert "add" in lowered.as_text() or "stablehlo" in lowered.as_text()
    assert float(lowered.compile()(c, jnp.array(2.0))) == 4.0
    assert int(c.count.value) == 1
    traced = jitted.trace(c, jnp.array(1.0))
    # The step's add and multiply; with automatic donation (the default) they sit in
    # one nested jit equation (the undonated program, docs/design.md "Automatic donation").
    assert {"add", "mul"} <= _primitives(traced.jaxpr.jaxpr)
    off = nnx.jit(step, donate_variables=False).trace(c, jnp.array(1.0))
    assert [e.primitive.name for e in off.jaxpr.eqns] == ["add", "mul"]
    assert float(traced.lower().compile()(c, jnp.array(3.0))) == 6.0
    assert int(c.count.value) == 2
    shape = jitted.eval_shape(c, jnp.array(1.0))
    assert isinstance(shape, jax.ShapeDtypeStruct) and shape.shape == ()
    assert int(c.count.value) == 2  # eval_shape leaves the arguments unchanged


def test_jit_has_flax_attributes() -> None:
    jitted = nnx.jit(step, static_argnames="x", donate_argnums=0)
    assert jitted.fun is step
    assert jitted.static_argnames == ("x",) and jitted.static_argnums == (1,)
    assert jitted.donate_argnums == (0,)
    assert jitted.jitted_fn._cache_size() == 0
    c = Counter()
    jitted(c, 1.0)
    jitted(c, 2.0)  # a new static value: a second executable
    assert jitted.jitted_fn._cache_size() == 2


def test_jitted_fn_through_partials() -> None:
    # As Tunix reads it: functools.partial(nnx.cached_partial(jitted, ...)).func.jitted_fn
    jitted = nnx.jit(step)
    c = Counter()
    train_step = functools.partial(nnx.cached_partial(jitted, c))
    assert train_step.func.jitted_fn._cache_size() == 0
    train_step(jnp.array(1.0))
    train_step(jnp.array(2.0))
    assert train_step.func.jitted_fn._cache_size() == 1
    assert train_step.func.cache_info().general_calls == 1
    assert int(c.count.value) == 2


def test_module_instance_is_bound() -> None:
    c = Counter()
    jitted = nnx.jit(c)
    assert jnp.array_equal(jitted(jnp.ones(3)), jnp.arange(3.0))
    assert jitted.bound == (c,)
    assert int(c.count.value) == 1


@pytest.mark.parametrize("transform", [nnx.jit, nnx.vmap])
def test_decorator_forms(transform: object) -> None:
    plain = transform(step)  # type: ignore[operator]
    configured = transform()(step)  # type: ignore[operator]
    assert type(plain) is type(configured)


def test_pmap_with_static_arguments_and_custom_vjp_are_transformed_objects() -> None:
    # nnx.pmap with static_broadcasted_argnums (one pmapped function per static
    # value) and nnx.custom_vjp return the same kind of object as nnx.jit: metadata,
    # cache_info() and method binding included.
    def scale(c: Counter, k: int, x: jax.Array) -> jax.Array:
        """Scales x."""
        c.count += 1
        return k * x

    pmapped = nnx.pmap(scale, in_axes=(None, None, 0), static_broadcasted_argnums=1)
    assert isinstance(pmapped, Transformed) and pmapped.__doc__ == scale.__doc__
    c, x = Counter(), jnp.ones((1, 2))
    for k in (2, 2, 3):
        assert float(pmapped(c, k, x).sum()) == 2 * k
    assert int(c.count[...]) == 3
    # Summed over the static values; pmap has no fast path of its own (every call
    # goes through jax.pmap's cache), so every call counts.
    assert pmapped.cache_info() == (3, 0)
    assert len(pmapped.by_static) == 2  # one pmapped function per static value

    @nnx.custom_vjp
    def double(m: Counter, x: jax.Array) -> jax.Array:
        return 2 * x * m.w[...]

    double.defvjp(
        lambda m, x: (double(m, x), (m.w[...], x)),
        lambda res, g: (nnx.State({"w": nnx.Param(2 * res[1] * g)}), 2 * res[0] * g),
    )
    assert isinstance(double, Transformed) and double.__wrapped__ is double.fun

    class Holder(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.arange(3.0))

        apply = double

    h = Holder()
    assert inspect.ismethod(h.apply) and h.apply.__self__ is h
    assert jnp.allclose(h.apply(jnp.ones(3)), 2 * h.w[...])
    assert double.cache_info().general_calls == 1
